"""SYNC_FLUSH's group commit driven from the event loop (cluster/broker/loop_group_commit.py):
rounds the loop starts, synced by the native thread, answered in the loop's callback; the
same outcomes as the thread service, a failed sync counted as the thread counts it, and a
shutdown from the store's worker thread that answers and flushes everything."""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import subprocess
import sys
import threading

import pytest

from cluster.broker.loop_group_commit import (
    LoopGroupCommitService,
    RangeSyncer,
    native_sync_available,
)
from storage.config import FlushDiskType
from storage.errors import PutMessageStatus
from storage.flush import GroupCommitService
from storage.running_flags import FLUSH_COMMIT_LOG_ERROR
from tests.conftest import make_message

pytestmark = pytest.mark.skipif(not native_sync_available(),
                                reason="the native syncer needs the compiled core on Linux")


def _open(store_factory, loop, syncer_factory=None, **overrides):
    """A SYNC_FLUSH store whose group commit the running loop drives."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, start=False, **overrides)
    store.start(group_commit=functools.partial(LoopGroupCommitService, loop=loop,
                                               syncer_factory=syncer_factory))
    assert isinstance(store.flush_service, LoopGroupCommitService)
    return store


async def _settled(requests, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not all(r.done() for r in requests) and loop.time() < deadline:
        await asyncio.sleep(0.002)
    return all(r.done() for r in requests)


def test_every_put_learns_its_own_bytes_are_flushed_by_rounds_the_loop_drives(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop())
        puts = []
        for burst in range(12):  # 4 KiB files: rounds cross file boundaries
            for _ in range(5):
                result, request = store.put_message_nowait(make_message(body=b"x" * 300))
                assert result.status is PutMessageStatus.PUT_OK
                puts.append((result.append.next_offset, request))
            await asyncio.sleep(0 if burst % 2 else 0.003)
        assert await _settled([r for _, r in puts])
        for end, request in puts:
            assert request.flush_ok
            assert request.flushed_to >= end
        queue = store.commit_log.mapped_file_queue
        assert queue.flushed_where == store.commit_log.get_max_offset()
        assert len(queue.mapped_files) > 2
        assert all(f.flushed_position == f.read_position for f in queue.mapped_files)
        service = store.flush_service
        assert 1 <= service.rounds <= len(puts)
        assert store.checkpoint.physic_msg_timestamp > 0
        # No Python thread does the flushing.
        assert "GroupCommitService" not in {t.name for t in threading.enumerate()}
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_the_puts_of_one_loop_iteration_share_one_request_and_one_round(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop(), mapped_file_size_commit_log=1 << 20)
        service = store.flush_service
        requests = [store.put_message_nowait(make_message(body=b"y" * 200))[1] for _ in range(10)]
        assert all(r is requests[0] for r in requests)
        assert requests[0].next_offset == store.commit_log.get_max_offset()
        assert await _settled(requests)
        assert service.rounds == 1
        # The next put joins no request a round has taken.
        later = store.put_message_nowait(make_message(body=b"z"))[1]
        assert later is not requests[0]
        assert await _settled([later])
        assert service.rounds == 2
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["thread", "loop"])
def test_both_services_give_the_same_outcomes(store_factory, kind):
    async def run():
        loop = asyncio.get_running_loop()
        if kind == "loop":
            store = _open(store_factory, loop)
        else:
            store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
            assert isinstance(store.flush_service, GroupCommitService)
        outcomes = []
        for i in range(30):
            result, request = store.put_message_nowait(make_message(body=b"q" * (50 + i * 20)))
            outcomes.append((result.append.next_offset, request))
            if i % 7 == 0:
                await asyncio.sleep(0.001)
        assert await _settled([r for _, r in outcomes])
        assert [(r.flush_ok, r.flushed_to >= end) for end, r in outcomes] == [(True, True)] * 30
        assert store.commit_log.mapped_file_queue.flushed_where \
            == store.commit_log.get_max_offset()
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


class _FailingFirst:
    """The real syncer, whose first round reports EIO (the disk refused the write-back)."""

    def __init__(self) -> None:
        self.real = RangeSyncer()
        self.failures = 1

    def __getattr__(self, name):
        return getattr(self.real, name)

    def result(self):
        rc = self.real.result()
        self.synced = self.real.synced
        if rc is not None and self.failures:
            self.failures -= 1
            self.synced = 0  # (its one range)
            return errno.EIO
        return rc


def test_a_failed_sync_raises_the_flag_counts_nothing_and_the_next_round_recovers(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop(), _FailingFirst,
                      mapped_file_size_commit_log=1 << 20)
        queue = store.commit_log.mapped_file_queue
        before = queue.flushed_where
        rewritten = []
        segment = queue.get_last_mapped_file_or_create(0)
        redirty = segment._redirty
        segment._redirty = lambda start, end: (rewritten.append((start, end)), redirty(start, end))
        result, request = store.put_message_nowait(make_message(body=b"f" * 100))
        assert await _settled([request])
        assert request.flush_ok is False  # FLUSH_DISK_TIMEOUT at once, not after 5 s
        assert request.flushed_to == before
        assert queue.flushed_where == before  # nothing counted flushed that was not
        assert store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)
        assert "Input/output error" in store.running_flags.reason(FLUSH_COMMIT_LOG_ERROR)
        assert queue.mapped_files[0]._flush_failed  # rewritten before the next sync
        # The flag refuses puts until a flush succeeds; the idle round retries on its own.
        deadline = asyncio.get_running_loop().time() + 5
        while queue.flushed_where < result.append.next_offset \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        assert queue.flushed_where == result.append.next_offset
        assert not store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)
        assert not queue.mapped_files[0]._flush_failed
        # The retry wrote the failed pages again first (Linux may count them clean now).
        assert rewritten[:1] == [(0, result.append.next_offset)]
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_blocking_put_from_another_thread_is_flushed_by_the_loop(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop())
        result = await asyncio.to_thread(store.put_message, make_message(body=b"t" * 100))
        assert result.status is PutMessageStatus.PUT_OK
        assert store.commit_log.mapped_file_queue.flushed_where >= result.append.next_offset
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_bytes_put_without_waiting_are_flushed_by_the_idle_round(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop(), mapped_file_size_commit_log=1 << 20)
        result, request = store.put_message_nowait(
            make_message(body=b"w" * 100, properties={"WAIT": "false"}))
        assert request is None
        queue = store.commit_log.mapped_file_queue
        deadline = asyncio.get_running_loop().time() + 2
        while queue.flushed_where < result.append.next_offset \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        assert queue.flushed_where == result.append.next_offset
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_shutdown_from_the_worker_thread_answers_every_request_and_flushes_all(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop())
        requests = [store.put_message_nowait(make_message(body=b"s" * 500))[1] for _ in range(20)]
        end = store.commit_log.get_max_offset()
        await asyncio.to_thread(store.shutdown)  # (the broker's way), before any round ends
        assert all(r.done() and r.flush_ok for r in requests)
        assert store.commit_log.mapped_file_queue.flushed_where == end
        assert not store.flush_service._syncer.running
        late = store.flush_service.request_flush(end + 100, 3000)
        assert late.done()
        assert not late.flush_ok

    asyncio.run(run())


def test_the_thread_service_runs_where_the_compiled_core_is_not_used():
    code = ("from cluster.broker.loop_group_commit import native_sync_available; "
            "print(native_sync_available())")
    env = dict(os.environ, ROCKETDESK_PURE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False"


class _ManualSyncer:
    """A syncer whose rounds end when the test says (and sync nothing): what the loop hands
    it, and when, is then exact."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self.calls: list[list[tuple[int, int]]] = []
        self.busy = False
        self.running = True
        self.synced = 0
        self._ended = threading.Event()
        self._outcome: int | None = None

    def fileno(self) -> int:
        return self._read

    def sync(self, spans) -> None:
        assert not self.busy
        assert self._outcome is None
        self.calls.append([(start, end) for _, start, end in spans])
        self.busy = True
        self._ended.clear()

    def end(self, rc: int = 0, synced: int | None = None) -> None:
        self.synced = len(self.calls[-1]) if synced is None else synced
        self.busy, self._outcome = False, rc
        # (The eventfd first: a shutdown waiting on _ended may stop the syncer, closing it.)
        os.write(self._write, b"!")
        self._ended.set()

    def result(self) -> int | None:
        try:
            os.read(self._read, 64)
        except BlockingIOError:
            pass
        rc, self._outcome = self._outcome, None
        return rc

    def wait(self, timeout: float) -> bool:
        return not self.busy or self._ended.wait(timeout)

    def stop(self) -> None:
        if self.abandoned:
            return
        self.running = False
        os.close(self._read)
        os.close(self._write)

    abandoned = False

    def abandon(self) -> None:
        self.abandoned = True


def _manual(store_factory, loop, syncer=None, **overrides):
    syncer = syncer or _ManualSyncer()
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, start=False, **overrides)
    store.start(group_commit=functools.partial(
        LoopGroupCommitService, loop=loop, syncer_factory=lambda: syncer, idle_round_s=3600))
    return store, syncer


async def _until(condition, timeout=2.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition() and loop.time() < deadline:
        await asyncio.sleep(0.001)
    return condition()


def test_requests_filed_during_a_round_go_to_the_next_which_starts_as_it_ends(store_factory):
    async def run():
        loop = asyncio.get_running_loop()
        store, syncer = _manual(store_factory, loop, mapped_file_size_commit_log=1 << 20)
        first = store.put_message_nowait(make_message(body=b"a" * 100))[1]
        first_end = store.commit_log.get_max_offset()
        assert await _until(lambda: syncer.calls)  # after the loop iteration, not in the put
        assert syncer.calls == [[(0, first_end)]]
        second = store.put_message_nowait(make_message(body=b"b" * 100))[1]
        assert second is not first  # the round in flight took the first request
        await asyncio.sleep(0.01)
        assert len(syncer.calls) == 1  # one round at a time
        seen = []
        first.add_done_callback(
            lambda ok: loop.call_soon(lambda: seen.append(len(syncer.calls))))
        syncer.end(0)
        assert await _until(lambda: seen)
        assert first.flush_ok
        assert not second.done()
        assert seen == [2]  # the next round started in the callback that ended the first
        assert syncer.calls[1] == [(first_end, store.commit_log.get_max_offset())]
        syncer.end(0)
        assert await _until(second.done)
        assert second.flush_ok
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_round_syncs_every_full_file_from_the_flushed_offset_and_stops_at_the_writer(
        store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop())  # 4 KiB files
        requests = [store.put_message_nowait(make_message(body=b"c" * 700))[1] for _ in range(14)]
        files = store.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 3
        assert await _until(lambda: syncer.calls)
        expected = [(0, f.read_position) for f in files][:4]  # (at most four files a round)
        assert syncer.calls[0] == expected
        while not all(r.done() for r in requests):
            syncer.end(0)
            await _until(lambda: syncer.busy or all(r.done() for r in requests))
        assert all(r.flush_ok for r in requests)
        assert store.commit_log.mapped_file_queue.flushed_where \
            == store.commit_log.get_max_offset()
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_shutdown_on_the_loop_thread_flushes_what_no_round_took(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"d" * 100))[1]
        store.shutdown()  # before the round's call_soon: nothing was handed to the syncer
        assert syncer.calls == []
        assert request.done()
        assert request.flush_ok
        assert request.flushed_to == store.commit_log.mapped_file_queue.flushed_where > 0

    asyncio.run(run())


def test_every_file_a_round_held_is_let_go(store_factory):
    async def run():
        store = _open(store_factory, asyncio.get_running_loop())  # 4 KiB files
        requests = [store.put_message_nowait(make_message(body=b"h" * 900))[1] for _ in range(20)]
        assert await _settled(requests)
        files = store.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 4
        assert [f._refs for f in files] == [1] * len(files)  # the queue's own reference only
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_request_a_round_could_not_cover_in_time_is_answered_at_once(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop())  # 4 KiB files
        for _ in range(30):  # (a burst of one iteration: one request)
            request = store.put_message_nowait(make_message(body=b"e" * 700))[1]
        assert len(store.commit_log.mapped_file_queue.mapped_files) > 4
        assert await _until(lambda: syncer.calls)
        assert len(syncer.calls[0]) == 4  # four files a round: the request's end is past them
        request.deadline = 0  # (its syncFlushTimeout has passed)
        syncer.end(0)
        assert await _until(request.done)
        assert request.flush_ok is False  # FLUSH_DISK_TIMEOUT now, not in another round
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_the_ranges_synced_before_a_failed_one_count_as_flushed(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop())  # 4 KiB files
        queue = store.commit_log.mapped_file_queue
        early = store.put_message_nowait(make_message(body=b"p" * 3000))[1]
        early_end = queue.get_max_offset()
        late = store.put_message_nowait(make_message(body=b"p" * 3000))[1]  # the second file
        assert early is late  # (one request for the burst: its end is the second file's)
        assert await _until(lambda: syncer.calls)
        first, second = queue.mapped_files[:2]
        assert syncer.calls[0] == [(0, first.read_position), (0, second.read_position)]
        syncer.end(errno.EIO, synced=1)
        assert await _until(early.done)
        assert queue.flushed_where == first.file_from_offset + first.read_position >= early_end
        assert early.flushed_to == queue.flushed_where  # what a put of the first file judges by
        assert early.flush_ok is False
        assert not first._flush_failed
        assert second._flush_failed
        assert store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_bytes_put_without_waiting_during_a_round_start_the_next_as_it_ends(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        first = store.put_message_nowait(make_message(body=b"a" * 100))[1]
        assert await _until(lambda: syncer.calls)
        result, none = store.put_message_nowait(
            make_message(body=b"n" * 100, properties={"WAIT": "false"}))
        assert none is None
        syncer.end(0)
        assert await _until(first.done)
        assert len(syncer.calls) == 2  # at once, not at the idle round (an hour here)
        assert syncer.calls[1][-1][1] == result.append.next_offset
        syncer.end(0)
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_file_being_destroyed_is_counted_flushed_as_the_thread_counts_it(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop())  # 4 KiB files
        queue = store.commit_log.mapped_file_queue
        requests = [store.put_message_nowait(make_message(body=b"g" * 1500))[1] for _ in range(4)]
        first, second = queue.mapped_files[:2]
        first._available = False  # (destroy() has begun: hold() refuses)
        assert await _until(lambda: syncer.calls)
        assert syncer.calls[0] == [(0, second.read_position)]  # the first is not synced...
        syncer.end(0)
        assert await _settled(requests)
        assert queue.flushed_where == second.file_from_offset + second.read_position
        assert first.flushed_position == first.read_position  # ...and counted, unsynced
        first._available = True
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_shutdown_waits_for_the_round_in_flight(store_factory):
    async def run():
        loop = asyncio.get_running_loop()
        store, syncer = _manual(store_factory, loop, mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"r" * 100))[1]
        assert await _until(lambda: syncer.calls)
        stopping = asyncio.ensure_future(asyncio.to_thread(store.shutdown))
        await asyncio.sleep(0.05)
        assert not stopping.done()  # waiting for the msync in progress
        syncer.end(0)
        await stopping
        assert request.flush_ok
        assert not syncer.running

    asyncio.run(run())


def test_a_round_that_outlives_the_shutdown_wait_is_abandoned_and_its_requests_answered(
        store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"h" * 100))[1]
        assert await _until(lambda: syncer.calls)
        queue = store.commit_log.mapped_file_queue
        held = queue.mapped_files[0]
        await asyncio.to_thread(store.flush_service.shutdown, 0.05)  # (the disk hangs)
        assert request.done()
        assert request.flush_ok is False
        assert syncer.abandoned
        assert store.flush_service.abandoned
        assert syncer.running  # never joined: its thread would still be in msync
        assert held._refs == 2  # and the file it syncs stays held
        # The store's own shutdown must sync nothing on that disk again (it would hang the
        # same way): it unmaps every file, lets go of the lock and keeps the abort file for
        # the next start's recovery.
        synced = []
        store.checkpoint.flush = lambda: synced.append("checkpoint")
        store.index_service.flush = lambda: synced.append("index") or 0
        for queues in store.consume_queue_table.values():
            for consume_queue in queues.values():
                consume_queue.mapped_file_queue.flush = (
                    lambda least=0: synced.append("consume queue") or True)
        assert store.consume_queue_table  # (the put was dispatched: there is one to skip)
        flushed = queue.flushed_where
        await asyncio.to_thread(store.shutdown)
        assert synced == []
        assert queue.flushed_where == flushed < request.next_offset
        assert held.flushed_position == 0
        assert held.is_cleanup_over
        assert store._lock_fd is None
        assert os.path.exists(store.config.abort_path)

    asyncio.run(run())


class _SlowTakeSyncer(_ManualSyncer):
    """Whoever takes an ended round's outcome dwells a while before going on (a busy loop)."""

    def __init__(self, dwell: float) -> None:
        super().__init__()
        self.dwell = dwell
        self.taken = threading.Event()

    def result(self) -> int | None:
        rc = super().result()
        if rc is not None:
            self.taken.set()
            threading.Event().wait(self.dwell)
        return rc


def test_a_round_the_loop_is_settling_is_not_counted_failed_by_a_shutdown(store_factory):
    # The loop takes a successful round's outcome and is slow to go on; a shutdown on the
    # store's worker thread gives up waiting for the loop (1 s) meanwhile. The round must be
    # counted as it ended, by whichever of the two took it, not as failed by the other.
    syncer = _SlowTakeSyncer(dwell=1.5)

    async def run():
        store, _ = _manual(store_factory, asyncio.get_running_loop(), syncer,
                           mapped_file_size_commit_log=1 << 20)
        result, request = store.put_message_nowait(make_message(body=b"s" * 100))
        assert await _until(lambda: syncer.calls)
        service = store.flush_service
        stopper = threading.Thread(
            target=lambda: (syncer.taken.wait(5), service.shutdown(5)))
        stopper.start()
        syncer.end(0)
        await _until(request.done, timeout=5)
        await asyncio.to_thread(stopper.join, 10)
        assert request.flush_ok
        assert store.commit_log.mapped_file_queue.flushed_where >= result.append.next_offset
        assert not store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)

    asyncio.run(run())


def test_a_second_shutdown_waits_for_the_first_and_runs_nothing_again(store_factory):
    import time

    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"t" * 100))[1]
        assert await _until(lambda: syncer.calls)
        service = store.flush_service
        stops = []
        stop_syncer = syncer.stop
        syncer.stop = lambda: (stops.append(1), stop_syncer())
        ended: dict[str, float] = {}

        def stop(name: str) -> None:
            service.shutdown(5.0)
            ended[name] = time.monotonic()

        first = threading.Thread(target=stop, args=("first",))
        first.start()
        await asyncio.sleep(0.1)  # (the first waits for the round in flight)
        second = threading.Thread(target=stop, args=("second",))
        second.start()
        await asyncio.sleep(0.2)
        assert ended == {}  # the second does not return before the first has answered all
        syncer.end(0)
        await asyncio.to_thread(first.join, 5)
        await asyncio.to_thread(second.join, 5)
        assert ended["second"] >= ended["first"]
        assert stops == [1]  # the shutdown ran once
        assert request.done()
        assert request.flush_ok

    asyncio.run(run())


def test_a_put_from_another_thread_after_the_loop_closed_is_answered_by_shutdown(store_factory):
    stores = []

    async def run():
        stores.append(_open(store_factory, asyncio.get_running_loop(),
                            mapped_file_size_commit_log=1 << 20))

    asyncio.run(run())
    store = stores[0]
    box = []
    worker = threading.Thread(target=lambda: box.append(store.put_message_nowait(
        make_message(body=b"l" * 100))))
    worker.start()
    worker.join(5)
    result, request = box[0]
    assert not request.done()  # filed, with no loop to run a round
    store.shutdown()
    assert request.done()
    assert request.flush_ok
    assert request.flushed_to >= result.append.next_offset


def test_a_lone_file_being_destroyed_is_counted_flushed_with_no_round(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        queue = store.commit_log.mapped_file_queue
        result, request = store.put_message_nowait(make_message(body=b"k" * 100))
        queue.mapped_files[0]._available = False  # (destroy() has begun: hold() refuses)
        assert await _until(request.done)
        assert syncer.calls == []  # nothing to sync: the file is going
        assert request.flush_ok
        assert queue.flushed_where == result.append.next_offset
        queue.mapped_files[0]._available = True
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_failed_rewrite_of_failed_pages_is_a_failed_round_answered_at_once(store_factory):
    async def run():
        store, syncer = _manual(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        queue = store.commit_log.mapped_file_queue
        segment = queue.get_last_mapped_file_or_create(0)
        segment._flush_failed = True  # (an earlier flush failed)

        def refuse(start, end):
            raise OSError(errno.EIO, "Input/output error")

        segment._redirty = refuse
        request = store.put_message_nowait(make_message(body=b"i" * 100))[1]
        assert await _until(request.done)
        assert request.flush_ok is False  # FLUSH_DISK_TIMEOUT now, not never
        assert syncer.calls == []
        assert store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)
        assert segment._refs == 1  # let go
        segment._flush_failed = False
        del segment._redirty
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())
