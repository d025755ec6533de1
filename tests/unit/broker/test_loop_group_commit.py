"""SYNC_FLUSH's group commit driven from the event loop (cluster/broker/loop_group_commit.py):
rounds the loop starts, synced by the native thread, answered in the loop's callback; the
same outcomes as the thread service and a failed sync counted as the thread counts it. Its
shutdown: test_loop_group_commit_shutdown.py."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import threading

import pytest

from cluster.broker.loop_group_commit import (
    RangeSyncer,
    native_sync_available,
)
from storage.config import FlushDiskType
from storage.errors import PutMessageStatus
from storage.flush import GroupCommitService
from storage.running_flags import FLUSH_COMMIT_LOG_ERROR
from tests.conftest import make_message
from tests.unit.broker.group_commit_fakes import (
    manual_store,
    open_store,
    settled,
    until,
)

pytestmark = pytest.mark.skipif(not native_sync_available(),
                                reason="the native syncer needs the compiled core on Linux")


def test_every_put_learns_its_own_bytes_are_flushed_by_rounds_the_loop_drives(store_factory):
    async def run():
        store = open_store(store_factory, asyncio.get_running_loop())
        puts = []
        for burst in range(12):  # 4 KiB files: rounds cross file boundaries
            for _ in range(5):
                result, request = store.put_message_nowait(make_message(body=b"x" * 300))
                assert result.status is PutMessageStatus.PUT_OK
                puts.append((result.append.next_offset, request))
            await asyncio.sleep(0 if burst % 2 else 0.003)
        assert await settled([r for _, r in puts])
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
        store = open_store(store_factory, asyncio.get_running_loop(), mapped_file_size_commit_log=1 << 20)
        service = store.flush_service
        requests = [store.put_message_nowait(make_message(body=b"y" * 200))[1] for _ in range(10)]
        assert all(r is requests[0] for r in requests)
        assert requests[0].next_offset == store.commit_log.get_max_offset()
        assert await settled(requests)
        assert service.rounds == 1
        # The next put joins no request a round has taken.
        later = store.put_message_nowait(make_message(body=b"z"))[1]
        assert later is not requests[0]
        assert await settled([later])
        assert service.rounds == 2
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["thread", "loop"])
def test_both_services_give_the_same_outcomes(store_factory, kind):
    async def run():
        loop = asyncio.get_running_loop()
        if kind == "loop":
            store = open_store(store_factory, loop)
        else:
            store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
            assert isinstance(store.flush_service, GroupCommitService)
        outcomes = []
        for i in range(30):
            result, request = store.put_message_nowait(make_message(body=b"q" * (50 + i * 20)))
            outcomes.append((result.append.next_offset, request))
            if i % 7 == 0:
                await asyncio.sleep(0.001)
        assert await settled([r for _, r in outcomes])
        assert [(r.flush_ok, r.flushed_to >= end) for end, r in outcomes] == [(True, True)] * 30
        assert store.commit_log.mapped_file_queue.flushed_where \
            == store.commit_log.get_max_offset()
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


class _FailingFirst:
    """The real syncer, whose rounds report EIO (the disk refused the write-back) until the
    test says the disk is healed: a retry that came before the test had looked at the failed
    round (the idle round retries at once; a loaded machine wakes the test later) would move
    the flushed position the test checks did not move."""

    healed = threading.Event()

    def __init__(self) -> None:
        self.real = RangeSyncer()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def result(self):
        rc = self.real.result()
        self.synced = self.real.synced
        if rc is not None and not self.healed.is_set():
            self.synced = 0  # (its one range)
            return errno.EIO
        return rc


def test_a_failed_sync_raises_the_flag_counts_nothing_and_the_next_round_recovers(store_factory):
    _FailingFirst.healed.clear()

    async def run():
        store = open_store(store_factory, asyncio.get_running_loop(), _FailingFirst,
                      mapped_file_size_commit_log=1 << 20)
        queue = store.commit_log.mapped_file_queue
        before = queue.flushed_where
        rewritten = []
        segment = queue.get_last_mapped_file_or_create(0)
        redirty = segment._redirty
        segment._redirty = lambda start, end: (rewritten.append((start, end)), redirty(start, end))
        result, request = store.put_message_nowait(make_message(body=b"f" * 100))
        assert await settled([request])
        assert request.flush_ok is False  # FLUSH_DISK_TIMEOUT at once, not after 5 s
        assert request.flushed_to == before
        assert queue.flushed_where == before  # nothing counted flushed that was not
        assert store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)
        assert "Input/output error" in store.running_flags.reason(FLUSH_COMMIT_LOG_ERROR)
        assert queue.mapped_files[0]._flush_failed  # rewritten before the next sync
        # The flag refuses puts until a flush succeeds; the idle round retries on its own.
        _FailingFirst.healed.set()
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
        store = open_store(store_factory, asyncio.get_running_loop())
        result = await asyncio.to_thread(store.put_message, make_message(body=b"t" * 100))
        assert result.status is PutMessageStatus.PUT_OK
        assert store.commit_log.mapped_file_queue.flushed_where >= result.append.next_offset
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_bytes_put_without_waiting_are_flushed_by_the_idle_round(store_factory):
    async def run():
        store = open_store(store_factory, asyncio.get_running_loop(), mapped_file_size_commit_log=1 << 20)
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


def test_the_thread_service_runs_where_the_compiled_core_is_not_used():
    code = ("from cluster.broker.loop_group_commit import native_sync_available; "
            "print(native_sync_available())")
    env = dict(os.environ, ROCKETDESK_PURE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_requests_filed_during_a_round_go_to_the_next_which_starts_as_it_ends(store_factory):
    async def run():
        loop = asyncio.get_running_loop()
        store, syncer = manual_store(store_factory, loop, mapped_file_size_commit_log=1 << 20)
        first = store.put_message_nowait(make_message(body=b"a" * 100))[1]
        first_end = store.commit_log.get_max_offset()
        assert await until(lambda: syncer.calls)  # after the loop iteration, not in the put
        assert syncer.calls == [[(0, first_end)]]
        second = store.put_message_nowait(make_message(body=b"b" * 100))[1]
        assert second is not first  # the round in flight took the first request
        await asyncio.sleep(0.01)
        assert len(syncer.calls) == 1  # one round at a time
        seen = []
        first.add_done_callback(
            lambda ok: loop.call_soon(lambda: seen.append(len(syncer.calls))))
        syncer.end(0)
        assert await until(lambda: seen)
        assert first.flush_ok
        assert not second.done()
        assert seen == [2]  # the next round started in the callback that ended the first
        assert syncer.calls[1] == [(first_end, store.commit_log.get_max_offset())]
        syncer.end(0)
        assert await until(second.done)
        assert second.flush_ok
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_round_syncs_every_full_file_from_the_flushed_offset_and_stops_at_the_writer(
        store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop())  # 4 KiB files
        requests = [store.put_message_nowait(make_message(body=b"c" * 700))[1] for _ in range(14)]
        files = store.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 3
        assert await until(lambda: syncer.calls)
        expected = [(0, f.read_position) for f in files][:4]  # (at most four files a round)
        assert syncer.calls[0] == expected
        while not all(r.done() for r in requests):
            syncer.end(0)
            await until(lambda: syncer.busy or all(r.done() for r in requests))
        assert all(r.flush_ok for r in requests)
        assert store.commit_log.mapped_file_queue.flushed_where \
            == store.commit_log.get_max_offset()
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_every_file_a_round_held_is_let_go(store_factory):
    async def run():
        store = open_store(store_factory, asyncio.get_running_loop())  # 4 KiB files
        requests = [store.put_message_nowait(make_message(body=b"h" * 900))[1] for _ in range(20)]
        assert await settled(requests)
        files = store.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 4
        assert [f._refs for f in files] == [1] * len(files)  # the queue's own reference only
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_request_a_round_could_not_cover_in_time_is_answered_at_once(store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop())  # 4 KiB files
        for _ in range(30):  # (a burst of one iteration: one request)
            request = store.put_message_nowait(make_message(body=b"e" * 700))[1]
        assert len(store.commit_log.mapped_file_queue.mapped_files) > 4
        assert await until(lambda: syncer.calls)
        assert len(syncer.calls[0]) == 4  # four files a round: the request's end is past them
        request.deadline = 0  # (its syncFlushTimeout has passed)
        syncer.end(0)
        assert await until(request.done)
        assert request.flush_ok is False  # FLUSH_DISK_TIMEOUT now, not in another round
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_the_ranges_synced_before_a_failed_one_count_as_flushed(store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop())  # 4 KiB files
        queue = store.commit_log.mapped_file_queue
        early = store.put_message_nowait(make_message(body=b"p" * 3000))[1]
        early_end = queue.get_max_offset()
        late = store.put_message_nowait(make_message(body=b"p" * 3000))[1]  # the second file
        assert early is late  # (one request for the burst: its end is the second file's)
        assert await until(lambda: syncer.calls)
        first, second = queue.mapped_files[:2]
        assert syncer.calls[0] == [(0, first.read_position), (0, second.read_position)]
        syncer.end(errno.EIO, synced=1)
        assert await until(early.done)
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
        store, syncer = manual_store(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        first = store.put_message_nowait(make_message(body=b"a" * 100))[1]
        assert await until(lambda: syncer.calls)
        result, none = store.put_message_nowait(
            make_message(body=b"n" * 100, properties={"WAIT": "false"}))
        assert none is None
        syncer.end(0)
        assert await until(first.done)
        assert len(syncer.calls) == 2  # at once, not at the idle round (an hour here)
        assert syncer.calls[1][-1][1] == result.append.next_offset
        syncer.end(0)
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_file_being_destroyed_is_counted_flushed_as_the_thread_counts_it(store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop())  # 4 KiB files
        queue = store.commit_log.mapped_file_queue
        requests = [store.put_message_nowait(make_message(body=b"g" * 1500))[1] for _ in range(4)]
        first, second = queue.mapped_files[:2]
        first._available = False  # (destroy() has begun: hold() refuses)
        assert await until(lambda: syncer.calls)
        assert syncer.calls[0] == [(0, second.read_position)]  # the first is not synced...
        syncer.end(0)
        assert await settled(requests)
        assert queue.flushed_where == second.file_from_offset + second.read_position
        assert first.flushed_position == first.read_position  # ...and counted, unsynced
        first._available = True
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_lone_file_being_destroyed_is_counted_flushed_with_no_round(store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        queue = store.commit_log.mapped_file_queue
        result, request = store.put_message_nowait(make_message(body=b"k" * 100))
        queue.mapped_files[0]._available = False  # (destroy() has begun: hold() refuses)
        assert await until(request.done)
        assert syncer.calls == []  # nothing to sync: the file is going
        assert request.flush_ok
        assert queue.flushed_where == result.append.next_offset
        queue.mapped_files[0]._available = True
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())


def test_a_failed_rewrite_of_failed_pages_is_a_failed_round_answered_at_once(store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        queue = store.commit_log.mapped_file_queue
        segment = queue.get_last_mapped_file_or_create(0)
        segment._flush_failed = True  # (an earlier flush failed)

        def refuse(start, end):
            raise OSError(errno.EIO, "Input/output error")

        segment._redirty = refuse
        request = store.put_message_nowait(make_message(body=b"i" * 100))[1]
        assert await until(request.done)
        assert request.flush_ok is False  # FLUSH_DISK_TIMEOUT now, not never
        assert syncer.calls == []
        assert store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)
        assert segment._refs == 1  # let go
        segment._flush_failed = False
        del segment._redirty
        await asyncio.to_thread(store.shutdown)

    asyncio.run(run())
