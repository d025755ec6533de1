"""The loop group commit's shutdown (cluster/broker/loop_group_commit.py): from the store's
worker thread or the loop's, with a round in flight, a round that never ends (a hung disk:
abandoned, and the store syncs nothing else), a loop too busy to let go, two at once."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from cluster.broker.loop_group_commit import (
    native_sync_available,
)
from storage.running_flags import FLUSH_COMMIT_LOG_ERROR
from tests.conftest import make_message
from tests.unit.broker.group_commit_fakes import (
    ManualSyncer,
    manual_store,
    open_store,
    until,
)

pytestmark = pytest.mark.skipif(not native_sync_available(),
                                reason="the native syncer needs the compiled core on Linux")


def test_a_shutdown_from_the_worker_thread_answers_every_request_and_flushes_all(store_factory):
    async def run():
        store = open_store(store_factory, asyncio.get_running_loop())
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


def test_a_shutdown_on_the_loop_thread_flushes_what_no_round_took(store_factory):
    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"d" * 100))[1]
        store.shutdown()  # before the round's call_soon: nothing was handed to the syncer
        assert syncer.calls == []
        assert request.done()
        assert request.flush_ok
        assert request.flushed_to == store.commit_log.mapped_file_queue.flushed_where > 0

    asyncio.run(run())


def test_a_shutdown_waits_for_the_round_in_flight(store_factory):
    async def run():
        loop = asyncio.get_running_loop()
        store, syncer = manual_store(store_factory, loop, mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"r" * 100))[1]
        assert await until(lambda: syncer.calls)
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
        store, syncer = manual_store(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"h" * 100))[1]
        assert await until(lambda: syncer.calls)
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
        for mapped_file in queue.mapped_files:  # nor its files' times (metadata waits too)
            mapped_file.stamp_store_time = lambda: synced.append("file time")
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


class _SlowTakeSyncer(ManualSyncer):
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
        store, _ = manual_store(store_factory, asyncio.get_running_loop(), syncer,
                           mapped_file_size_commit_log=1 << 20)
        result, request = store.put_message_nowait(make_message(body=b"s" * 100))
        assert await until(lambda: syncer.calls)
        service = store.flush_service
        stopper = threading.Thread(
            target=lambda: (syncer.taken.wait(5), service.shutdown(5)))
        stopper.start()
        syncer.end(0)
        await until(request.done, timeout=5)
        await asyncio.to_thread(stopper.join, 10)
        assert request.flush_ok
        assert store.commit_log.mapped_file_queue.flushed_where >= result.append.next_offset
        assert not store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR)

    asyncio.run(run())


def test_a_second_shutdown_waits_for_the_first_and_runs_nothing_again(store_factory):
    import time

    async def run():
        store, syncer = manual_store(store_factory, asyncio.get_running_loop(),
                                mapped_file_size_commit_log=1 << 20)
        request = store.put_message_nowait(make_message(body=b"t" * 100))[1]
        assert await until(lambda: syncer.calls)
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
        stores.append(open_store(store_factory, asyncio.get_running_loop(),
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
