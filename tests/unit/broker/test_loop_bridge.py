"""LoopBridge: store completions reach the event loop, and a flush that never comes times out."""

from __future__ import annotations

import asyncio
import threading

from cluster.broker.bridge import LoopBridge


class _Request:
    """What future_of needs of a GroupCommitRequest: a callback when it completes."""

    def __init__(self) -> None:
        self.callbacks = []

    def add_done_callback(self, callback) -> None:
        self.callbacks.append(callback)

    def complete(self, ok: bool) -> None:
        for callback in self.callbacks:
            callback(ok)


def test_a_completion_from_another_thread_resolves_the_future_and_stops_its_timer():
    async def run():
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop)
        request = _Request()
        future = bridge.future_of(request, timeout=5)
        threading.Thread(target=request.complete, args=(True,)).start()
        assert await asyncio.wait_for(future, 2) is True
        await asyncio.sleep(0)
        assert not [h for h in loop._scheduled if not h.cancelled()]  # the 5 s timer is gone

    asyncio.run(run())


def test_a_flush_that_never_completes_answers_false_after_the_timeout():
    async def run():
        bridge = LoopBridge(asyncio.get_running_loop())
        request = _Request()
        begin = asyncio.get_running_loop().time()
        assert await bridge.future_of(request, timeout=0.05) is False
        assert asyncio.get_running_loop().time() - begin >= 0.04
        request.complete(True)  # late: changes nothing
        await asyncio.sleep(0.01)

    asyncio.run(run())
