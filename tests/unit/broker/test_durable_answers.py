"""DurableAnswers: SYNC_FLUSH / SYNC_MASTER sends of one loop iteration wait together, once, and
each is answered with its own status."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from cluster.broker.bridge import LoopBridge
from cluster.broker.durable_answers import DurableAnswers
from cluster.ha.master import ReplicaWaiters
from cluster.remoting.deferred_answer import DeferredAnswer
from storage.errors import PutMessageStatus
from storage.flush import GroupCommitRequest

OK = PutMessageStatus.PUT_OK


class _HA:
    """What DurableAnswers needs of an HAService, with its real waiters."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.waiters = ReplicaWaiters(loop)
        self.push_to_slave_max_offset = 0
        self.asked: list[int] = []

    def wait_for_replica(self, next_offset: int) -> asyncio.Future:
        self.asked.append(next_offset)
        return self.waiters.wait(next_offset, self.push_to_slave_max_offset, timeout=0.2)

    def acknowledge(self, offset: int) -> None:
        self.push_to_slave_max_offset = offset
        self.waiters.notify(offset)


def _broker(loop, ha=None, timeout_ms: int = 3000):
    return SimpleNamespace(bridge=LoopBridge(loop), ha_service=ha,
                           store_config=SimpleNamespace(sync_flush_timeout=timeout_ms))


class _Owed:
    """Stands for the connections that owe the answers: each DeferredAnswer a future the test
    awaits, resolved in the call that answers it."""

    def __init__(self, answers: DurableAnswers) -> None:
        self.answers = answers
        self.futures: dict[DeferredAnswer, asyncio.Future] = {}
        self.deferred: dict[asyncio.Future, DeferredAnswer] = {}

    def __call__(self, *args) -> asyncio.Future:
        deferred = self.answers.answer_when_durable(*args)
        future = asyncio.get_running_loop().create_future()
        self.futures[deferred], self.deferred[future] = future, deferred
        deferred.bind(self, None, 0)
        return future

    def cancel(self, future: asyncio.Future) -> None:  # its connection closed
        self.deferred[future].cancel()
        future.cancel()

    def deferred_answered(self, deferred: DeferredAnswer) -> None:
        future = self.futures[deferred]
        if deferred.failure is not None:
            future.set_exception(deferred.failure)
        else:
            future.set_result(deferred.response)


def _respond(name: str):
    return lambda status: (name, status)


def test_a_burst_waits_for_its_newest_flush_once_and_answers_every_send():
    async def run():
        loop = asyncio.get_running_loop()
        broker = _broker(loop)
        owe = _Owed(DurableAnswers(broker))
        requests = [GroupCommitRequest(100 * (i + 1), 3000) for i in range(3)]
        futures = [owe(100 * (i + 1), request, False, OK, _respond(f"s{i}"))
                   for i, request in enumerate(requests)]
        await asyncio.sleep(0)  # the burst closes at the end of this iteration
        assert not any(f.done() for f in futures)
        assert len(requests[-1]._callbacks) == 1  # only the newest request is waited for
        assert not requests[0]._callbacks
        for request in requests:  # the group commit completes them in order, on its thread
            threading.Thread(target=request.complete, args=(True,)).start()
        answered = await asyncio.wait_for(asyncio.gather(*futures), 2)
        assert answered == [("s0", OK), ("s1", OK), ("s2", OK)]

    asyncio.run(run())


def test_a_late_flush_times_out_only_the_sends_whose_own_bytes_were_not_flushed():
    async def run():
        loop = asyncio.get_running_loop()
        owe = _Owed(DurableAnswers(_broker(loop, timeout_ms=0)))  # the bridge gives up after ~1 s
        older, newer = GroupCommitRequest(100, 0), GroupCommitRequest(200, 0)
        first = owe(100, older, False, OK, _respond("older"))
        second = owe(200, newer, False, OK, _respond("newer"))
        older.complete(True)  # flushed before the disk stalled; the newer one never is
        assert await asyncio.wait_for(first, 3) == ("older", OK)
        assert await asyncio.wait_for(second, 3) == ("newer", PutMessageStatus.FLUSH_DISK_TIMEOUT)

    asyncio.run(run())


def test_sends_sharing_a_request_are_judged_by_where_the_flush_stood():
    # The puts of one group-commit round share its request (GroupCommitService.request_flush):
    # a flush that got past the older send's end but not the newer's fails only the newer.
    async def run():
        loop = asyncio.get_running_loop()
        owe = _Owed(DurableAnswers(_broker(loop, timeout_ms=0)))
        shared = GroupCommitRequest(200, 0)
        first = owe(100, shared, False, OK, _respond("older"))
        second = owe(200, shared, False, OK, _respond("newer"))
        shared.flushed_to = 150
        threading.Thread(target=shared.complete, args=(False,)).start()
        assert await asyncio.wait_for(first, 3) == ("older", OK)
        assert await asyncio.wait_for(second, 3) == ("newer", PutMessageStatus.FLUSH_DISK_TIMEOUT)

    asyncio.run(run())


def test_one_replica_wait_a_burst_and_a_timeout_spares_what_the_slave_did_acknowledge():
    async def run():
        loop = asyncio.get_running_loop()
        ha = _HA(loop)
        owe = _Owed(DurableAnswers(_broker(loop, ha)))
        early = owe(100, None, True, OK, _respond("early"))
        late = owe(300, None, True, OK, _respond("late"))
        unneeded = owe(
            50, None, False, PutMessageStatus.SLAVE_NOT_AVAILABLE, _respond("no slave"))
        await asyncio.sleep(0)
        assert ha.asked == [300]  # the newest offset only
        ha.acknowledge(150)  # the slave got the first send's bytes, not the second's
        sweeper = loop.create_task(_sweep(ha))
        try:
            assert await asyncio.wait_for(late, 3) == ("late", PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        finally:
            sweeper.cancel()
        assert early.result() == ("early", OK)
        assert unneeded.result() == ("no slave", PutMessageStatus.SLAVE_NOT_AVAILABLE)

    asyncio.run(run())


async def _sweep(ha: _HA) -> None:
    while True:  # HAService's sweeper: waiters past their deadline fail
        await asyncio.sleep(0.05)
        ha.waiters.expire(asyncio.get_running_loop().time() + 1e9)


def test_flush_and_replica_both_must_come_and_a_closed_connections_send_is_skipped():
    async def run():
        loop = asyncio.get_running_loop()
        ha = _HA(loop)
        owe = _Owed(DurableAnswers(_broker(loop, ha)))
        request = GroupCommitRequest(100, 3000)
        kept = owe(100, request, True, OK, _respond("kept"))
        asked = []
        gone = owe(100, None, True, OK, asked.append)
        owe.cancel(gone)  # its connection closed meanwhile
        await asyncio.sleep(0)
        request.complete(True)
        await asyncio.sleep(0.05)
        assert not kept.done()  # flushed, but no slave yet
        ha.acknowledge(100)
        assert await asyncio.wait_for(kept, 2) == ("kept", OK)
        assert asked == []  # no answer built for it (a build counts the send's statistics)

    asyncio.run(run())


def test_a_respond_that_raises_fails_only_its_own_future():
    async def run():
        loop = asyncio.get_running_loop()
        owe = _Owed(DurableAnswers(_broker(loop)))
        request = GroupCommitRequest(100, 3000)

        def broken(_status):
            raise RuntimeError("bug")

        bad = owe(100, request, False, OK, broken)
        good = owe(100, request, False, OK, _respond("good"))
        request.complete(True)
        assert await asyncio.wait_for(good, 2) == ("good", OK)
        assert isinstance(bad.exception(), RuntimeError)

    asyncio.run(run())


def test_a_burst_whose_wait_cannot_be_set_up_answers_every_send_with_the_failure():
    async def run():
        loop = asyncio.get_running_loop()

        class BrokenHA(_HA):
            def wait_for_replica(self, next_offset):
                raise RuntimeError("no waiters")

        owe = _Owed(DurableAnswers(_broker(loop, BrokenHA(loop))))
        futures = [owe(100 * i, None, True, OK, _respond(str(i)))
                   for i in range(3)]
        await asyncio.sleep(0)
        assert all(isinstance(f.exception(), RuntimeError) for f in futures)

    asyncio.run(run())


def test_a_send_that_waits_for_the_disk_only_is_not_held_for_the_slave():
    async def run():
        loop = asyncio.get_running_loop()
        ha = _HA(loop)
        owe = _Owed(DurableAnswers(_broker(loop, ha)))
        request = GroupCommitRequest(200, 3000)
        disk_only = owe(
            100, request, False, PutMessageStatus.SLAVE_NOT_AVAILABLE, _respond("disk"))
        both = owe(200, request, True, OK, _respond("both"))
        await asyncio.sleep(0)
        request.complete(True)
        assert await asyncio.wait_for(disk_only, 2) == ("disk", PutMessageStatus.SLAVE_NOT_AVAILABLE)
        assert not both.done()  # still waiting for the slave
        ha.acknowledge(200)
        assert await asyncio.wait_for(both, 2) == ("both", OK)

    asyncio.run(run())


def test_a_flush_done_before_the_burst_closes_answers_in_that_same_iteration():
    # No loop iteration between learning the answer and writing it (a future's callbacks
    # would each have waited one, behind every read of it).
    async def run():
        loop = asyncio.get_running_loop()
        owe = _Owed(DurableAnswers(_broker(loop)))
        request = GroupCommitRequest(100, 3000)
        request.flushed_to = 100
        request.complete(True)
        first = owe(100, request, False, OK, _respond("first"))
        second = owe(100, request, False, OK, _respond("second"))
        await asyncio.sleep(0)  # the burst closes: answered in that call
        assert first.result() == ("first", OK)
        assert second.result() == ("second", OK)
        assert not [h for h in loop._scheduled if not h.cancelled()]  # no timer left behind

    asyncio.run(run())


def test_a_wait_that_ends_in_an_error_answers_every_send_with_it():
    async def run():
        loop = asyncio.get_running_loop()

        class FailingHA(_HA):
            def wait_for_replica(self, next_offset):
                future = loop.create_future()
                loop.call_soon(future.set_exception, RuntimeError("the waiters broke"))
                return future

        owe = _Owed(DurableAnswers(_broker(loop, FailingHA(loop))))
        futures = [owe(100 * (i + 1), None, True, OK, _respond(str(i))) for i in range(3)]
        done, _ = await asyncio.wait(futures, timeout=2)
        assert len(done) == 3
        assert all(isinstance(f.exception(), RuntimeError) for f in futures)

    asyncio.run(run())


def test_one_connection_failing_to_write_does_not_keep_the_others_waiting():
    async def run():
        loop = asyncio.get_running_loop()
        owe = _Owed(DurableAnswers(_broker(loop)))
        request = GroupCommitRequest(300, 3000)
        futures = [owe(100 * (i + 1), request, False, OK, _respond(str(i))) for i in range(3)]
        broken = owe.deferred[futures[0]]
        answered = owe.deferred_answered

        def write(deferred):
            if deferred is broken:
                raise OSError("the peer's socket broke")
            answered(deferred)

        owe.deferred_answered = write
        await asyncio.sleep(0)
        request.complete(True)
        assert await asyncio.wait_for(asyncio.gather(*futures[1:]), 2) == [("1", OK), ("2", OK)]

    asyncio.run(run())
