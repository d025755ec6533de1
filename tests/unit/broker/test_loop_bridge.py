"""LoopBridge: store completions reach the event loop, and a flush that never comes times out."""

from __future__ import annotations

import asyncio
import threading

from cluster.broker.bridge import LoopBridge


class _Request:
    """What when_done needs of a GroupCommitRequest: its outcome, a callback when it completes."""

    def __init__(self) -> None:
        self.callbacks = []
        self.flush_ok = False
        self._done = False

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback) -> None:
        if self._done:
            callback(self.flush_ok)
        else:
            self.callbacks.append(callback)

    def complete(self, ok: bool) -> None:
        self._done, self.flush_ok = True, ok
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback(ok)


def test_a_completion_from_another_thread_calls_back_on_the_loop_once_and_stops_the_timer():
    async def run():
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop)
        request = _Request()
        heard = loop.create_future()
        calls = []

        def callback(ok):
            calls.append((ok, threading.get_ident()))
            heard.set_result(ok)

        bridge.when_done(request, 5, callback)
        threading.Thread(target=request.complete, args=(True,)).start()
        assert await asyncio.wait_for(heard, 2) is True
        assert calls == [(True, threading.get_ident())]  # on the loop's thread
        assert not [h for h in loop._scheduled if not h.cancelled()]  # the 5 s timer is gone

    asyncio.run(run())


def test_a_flush_that_never_completes_calls_back_false_after_the_timeout():
    async def run():
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop)
        request = _Request()
        heard = loop.create_future()
        calls = []

        def callback(ok):
            calls.append(ok)
            if not heard.done():
                heard.set_result(ok)

        begin = loop.time()
        bridge.when_done(request, 0.05, callback)
        assert await heard is False
        assert loop.time() - begin >= 0.04
        request.complete(True)  # late: changes nothing
        await asyncio.sleep(0.01)
        assert calls == [False]

    asyncio.run(run())


def test_a_request_done_already_calls_back_at_once_and_a_failing_callback_spares_the_others():
    async def run():
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop)
        done = _Request()
        done.complete(True)
        heard = []
        bridge.when_done(done, 5, heard.append)
        assert heard == [True]  # in the call: no hop through the bridge
        calls = []

        def broken(_value):
            raise RuntimeError("bug")

        bridge.call(broken, 1)
        bridge.call(calls.append, 2)
        await asyncio.sleep(0.01)
        assert calls == [2]

    asyncio.run(run())


def test_a_completion_on_the_loop_itself_calls_back_in_that_call_with_no_hop():
    # (a group commit the loop drives: cluster/broker/loop_group_commit.py)
    async def run():
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop)
        request = _Request()
        heard = []
        bridge.when_done(request, 5, heard.append)
        request.complete(True)
        assert heard == [True]  # before any other callback of the loop ran
        assert not bridge.pending
        assert not bridge.scheduled
        assert not [h for h in loop._scheduled if not h.cancelled()]  # the timer is gone
        failing = _Request()

        def broken(_ok):
            raise RuntimeError("bug")

        bridge.when_done(failing, 5, broken)
        failing.complete(True)  # logged; the completer is not interrupted

    asyncio.run(run())
