"""A disk that is full or read-only: writes refused with SERVICE_NOT_AVAILABLE, reads served,
nothing corrupted, services alive and quiet, and writes back once space is.

ENOSPC, EROFS, EACCES and EIO are injected where the store meets the disk: creating the next
CommitLog, ConsumeQueue or index file, claiming blocks before a write, fdatasync, the commit
of a write buffer, the checkpoint. A real tmpfs filled up is in tests/integration/test_disk_full.py.
"""

from __future__ import annotations

import errno
import logging
import os
import time

import pytest

import storage.file_space as file_space_module
import storage.mapped_file as mapped_file_module
from storage.checkpoint import StoreCheckpoint
from storage.config import FlushDiskType
from storage.consume_queue import ConsumeQueue
from storage.errors import (
    CreateMappedFileError,
    DiskNotWritableError,
    PutMessageStatus,
    ServiceNotAvailableError,
)
from storage.file_space import create_sized_file
from storage.mapped_file import MappedFile, offset_to_file_name
from storage.record import iter_records
from storage.running_flags import (
    COMMIT_COMMIT_LOG_ERROR,
    DISK_FULL,
    FLUSH_COMMIT_LOG_ERROR,
    FLUSH_CONSUME_QUEUE_ERROR,
    WRITE_COMMIT_LOG_ERROR,
    WRITE_LOGICS_QUEUE_ERROR,
    LogThrottle,
    RunningFlags,
)
from storage.service_thread import ServiceThread
from tests.conftest import make_message
from tests.unit.storage.store_checks import (
    Acked,
    Ledger,
    assert_recovers_exactly,
    assert_store_holds,
    reopen,
)


def _failing(code: int, when=lambda *args: True, real=None):
    def fail(*args, **kwargs):
        if when(*args):
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    return fail


def _commit_log_sync_fails(store, code: int):
    """A mapped file's sync (msync of its range, or fdatasync) failing for the CommitLog's
    files only (not the checkpoint's or the queues')."""
    files = set(store.commit_log.mapped_file_queue.mapped_files)
    return _failing(code, lambda mapped, *_: mapped in files, real=MappedFile._sync)


def _wait_until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def _bodies(store, topic="TopicTest", queue_id=0):
    result = store.get_message("g", topic, queue_id, 0, 64)
    return [r.body for r in iter_records(result.body, check_crc=True)]


# -- the put path --------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT])
def test_a_commitlog_file_that_cannot_be_created_refuses_the_put_and_reads_go_on(
        store_factory, monkeypatch, tmp_path, code):
    store = store_factory(start=False)
    ledger = Ledger()
    for i in range(3):
        ledger.put(store, make_message(body=b"%d" % i * 1200))  # the next one needs a new file
    assert store.wait_dispatched()
    with monkeypatch.context() as mp:
        mp.setattr(mapped_file_module, "create_sized_file", _failing(code))
        for _ in range(3):
            with pytest.raises(DiskNotWritableError) as info:
                store.put_message(make_message(body=b"x" * 1200))
            assert info.value.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert errno.errorcode[code] in str(info.value)
        assert store.running_flags.is_set(WRITE_COMMIT_LOG_ERROR)
        assert store.commit_log.begin_time_in_lock == 0
        assert _bodies(store) == [a.body for a in ledger.acked]  # reads are served meanwhile
    ledger.put(store, make_message(body=b"back"))  # the same disk, space again: accepted
    assert not store.running_flags.is_set(WRITE_COMMIT_LOG_ERROR)
    assert not [p for p in os.listdir(store.config.commit_log_dir) if p.endswith(".tmp")]
    assert_store_holds(store, ledger)
    assert_recovers_exactly(store, ledger, tmp_path)


def test_other_creation_failures_are_create_mapedfile_failed(store_factory, monkeypatch):
    store = store_factory(start=False)
    with monkeypatch.context() as mp:
        mp.setattr(mapped_file_module, "create_sized_file", _failing(errno.EMFILE))
        with pytest.raises(CreateMappedFileError) as info:
            store.put_message(make_message())
    assert info.value.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED
    store.put_message(make_message())


def test_no_space_to_claim_blocks_refuses_the_put_before_a_byte_is_written(
        store_factory, monkeypatch, tmp_path):
    # On a full disk a write through the mapping would be a SIGBUS; the claim comes first.
    store = store_factory(start=False)
    ledger = Ledger()
    ledger.put(store, make_message(body=b"before"))
    mapped = store.commit_log.mapped_file_queue.get_last_mapped_file()
    mapped.allocated_position = mapped.wrote_position  # as if the disk filled up right here
    real = os.posix_fallocate
    with monkeypatch.context() as mp:
        mp.setattr(file_space_module.os, "posix_fallocate", _failing(errno.ENOSPC, real=real))
        with pytest.raises(DiskNotWritableError, match="No space left on device"):
            store.put_message(make_message(body=b"refused"))
    assert mapped.allocated_position == mapped.wrote_position
    ledger.put(store, make_message(body=b"after"))
    assert_store_holds(store, ledger)
    assert_recovers_exactly(store, ledger, tmp_path)


def test_the_refusal_is_logged_once_per_state_change_not_once_per_put(store_factory, monkeypatch,
                                                                      caplog):
    store = store_factory(start=False)
    store.put_message(make_message(body=b"x" * 1200))
    store.put_message(make_message(body=b"x" * 1200))
    store.put_message(make_message(body=b"x" * 1200))
    caplog.set_level(logging.INFO, logger="storage")
    with monkeypatch.context() as mp:
        mp.setattr(mapped_file_module, "create_sized_file", _failing(errno.ENOSPC))
        for _ in range(50):
            with pytest.raises(DiskNotWritableError):
                store.put_message(make_message(body=b"x" * 1200))
    store.put_message(make_message(body=b"x" * 1200))
    lines = [r for r in caplog.records if "WRITE_COMMIT_LOG_ERROR" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.ERROR, logging.WARNING]  # raised, cleared
    assert not any(r.exc_info for r in lines)


def test_a_slave_appending_replicated_bytes_to_a_full_disk_gets_an_error_not_a_crash(
        store_factory, monkeypatch):
    store = store_factory(start=False)
    real = os.posix_fallocate
    with monkeypatch.context() as mp:
        mp.setattr(file_space_module.os, "posix_fallocate", _failing(errno.ENOSPC, real=real))
        with pytest.raises(OSError, match="No space"):  # the HA client reconnects on OSError
            store.append_to_commit_log(0, b"\0" * 100)
    assert store.get_max_phy_offset() == 0


# -- flush, commit, checkpoint ----------------------------------------------------------------------
def test_a_failing_fdatasync_under_sync_flush_answers_at_once_and_refuses_writes_until_it_works(
        store_factory, monkeypatch, tmp_path):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=3000,
                          mapped_file_size_commit_log=1 << 20)
    ledger = Ledger()
    ledger.put(store, make_message(body=b"flushed"))
    queue = store.commit_log.mapped_file_queue
    with monkeypatch.context() as mp:
        mp.setattr(MappedFile, "_sync", _commit_log_sync_fails(store, errno.EIO))
        begin = time.monotonic()
        result = store.put_message(make_message(body=b"not flushed"))
        assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT  # stored, not durable
        assert time.monotonic() - begin < 2  # answered by the failed flush, not the timeout
        ledger.acked.append(Acked(result.append.wrote_offset, "TopicTest", 0, 1, b"not flushed",
                                  True))
        assert queue.flushed_where < queue.get_max_offset()
        assert _wait_until(lambda: store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR))
        with pytest.raises(ServiceNotAvailableError, match="flushing the CommitLog failed"):
            store.put_message(make_message(body=b"refused"))
        assert store.flush_service.is_running
    assert _wait_until(lambda: store.running_flags.write_refusal() is None)
    assert queue.flushed_where == queue.get_max_offset()
    ledger.put(store, make_message(body=b"after"))
    assert_store_holds(store, ledger)
    assert_recovers_exactly(store, ledger, tmp_path)


def test_a_failed_flush_dirties_the_unflushed_pages_again_before_retrying(tmp_path, monkeypatch):
    # Linux may count pages whose write-back failed as clean: the retry must not trust that.
    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 8192)
    mapped.append(b"a" * 5000)
    real = MappedFile._sync
    with monkeypatch.context() as mp:
        mp.setattr(MappedFile, "_sync", _failing(errno.EIO, real=real))
        with pytest.raises(OSError, match="Input/output error"):
            mapped.flush(0)
    assert mapped.flushed_position == 0
    rewritten = []
    real_pwrite = os.pwrite

    def spy(fd, data, offset):
        rewritten.append((offset, len(data)))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(mapped_file_module.os, "pwrite", spy)
    assert mapped.flush(0) == 5000
    assert rewritten == [(0, 5000)]
    assert mapped.read(0, 5000) == b"a" * 5000
    mapped.close()


def test_async_flush_failures_raise_a_flag_and_the_service_keeps_going(store_factory, monkeypatch):
    store = store_factory(flush_interval_commit_log=10, flush_commit_log_thorough_interval=10)
    store.put_message(make_message())
    with monkeypatch.context() as mp:
        mp.setattr(MappedFile, "_sync", _commit_log_sync_fails(store, errno.ENOSPC))
        store.put_message(make_message())
        assert _wait_until(lambda: store.running_flags.is_set(FLUSH_COMMIT_LOG_ERROR))
        assert store.flush_service.is_running
    assert _wait_until(lambda: store.running_flags.write_refusal() is None)
    queue = store.commit_log.mapped_file_queue
    assert _wait_until(lambda: queue.flushed_where == queue.get_max_offset())
    store.put_message(make_message())


def test_a_write_buffer_that_cannot_be_committed_stays_invisible_until_it_can(store_factory,
                                                                               monkeypatch):
    store = store_factory(transient_store_pool_enable=True, commit_interval_commit_log=10)
    real = os.pwrite
    with monkeypatch.context() as mp:
        mp.setattr(mapped_file_module.os, "pwrite", _failing(errno.ENOSPC, real=real))
        store.put_message(make_message(body=b"buffered"))
        assert _wait_until(lambda: store.running_flags.is_set(COMMIT_COMMIT_LOG_ERROR))
        assert store.get_max_phy_offset() == 0  # nothing half-committed is readable
        with pytest.raises(ServiceNotAvailableError, match="committing"):
            store.put_message(make_message())
    assert _wait_until(lambda: not store.running_flags.is_set(COMMIT_COMMIT_LOG_ERROR))
    assert store.wait_dispatched()
    assert _wait_until(lambda: _bodies(store) == [b"buffered"])


def test_a_checkpoint_that_cannot_be_written_refuses_writes_until_it_can(store_factory,
                                                                         monkeypatch):
    store = store_factory(flush_interval_consume_queue=10)
    store.put_message(make_message())
    with monkeypatch.context() as mp:
        mp.setattr(StoreCheckpoint, "flush", _failing(errno.EROFS))
        assert _wait_until(lambda: store.running_flags.is_set(FLUSH_CONSUME_QUEUE_ERROR))
        assert "checkpoint" in store.running_flags.reason(FLUSH_CONSUME_QUEUE_ERROR)
        with pytest.raises(ServiceNotAvailableError, match="Read-only file system"):
            store.put_message(make_message())
    assert _wait_until(lambda: not store.running_flags.is_set(FLUSH_CONSUME_QUEUE_ERROR))
    store.put_message(make_message())


def test_a_checkpoint_never_claims_consume_queues_that_failed_to_flush(store_factory, monkeypatch):
    store = store_factory(start=False)
    store.put_message(make_message())
    store.wait_dispatched()
    from storage.flush import FlushConsumeQueueService

    flusher = FlushConsumeQueueService(store)
    before = store.checkpoint.logics_msg_timestamp
    with monkeypatch.context() as mp:
        mp.setattr(ConsumeQueue, "flush", _failing(errno.EIO))
        flusher.flush_once(thorough=True)
    assert store.checkpoint.logics_msg_timestamp == before
    assert store.running_flags.is_set(FLUSH_CONSUME_QUEUE_ERROR)
    flusher.flush_once(thorough=True)
    assert store.checkpoint.logics_msg_timestamp == store.reput.last_store_timestamp
    assert not store.running_flags.is_set(FLUSH_CONSUME_QUEUE_ERROR)


# -- dispatch --------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["consumequeue", "index"])
def test_dispatch_retries_a_file_it_cannot_create_and_loses_nothing(store_factory, monkeypatch,
                                                                    tmp_path, where):
    store = store_factory()
    ledger = Ledger()
    ledger.put(store, make_message(topic="Old", body=b"old"))
    assert store.wait_dispatched()
    real = mapped_file_module.create_sized_file
    with monkeypatch.context() as mp:
        mp.setattr(mapped_file_module, "create_sized_file",
                   _failing(errno.ENOSPC, lambda path, *_: f"{os.sep}{where}{os.sep}" in path,
                            real=real))
        # A new topic needs a ConsumeQueue file; with index files full (256 entries), a new
        # index file; the put itself is acknowledged: it is in the CommitLog.
        ledger.put(store, make_message(topic="New", body=b"new", keys="k"))
        keys = []
        if where == "index":
            for i in range(300):
                try:
                    ledger.put(store, make_message(topic="Old", body=b"%d" % i, keys=f"k{i}"))
                except ServiceNotAvailableError:  # dispatch reached the record it cannot index
                    break
                keys.append(f"k{i}")
        assert _wait_until(lambda: store.running_flags.is_set(WRITE_LOGICS_QUEUE_ERROR))
        assert "No space left on device" in store.running_flags.reason(WRITE_LOGICS_QUEUE_ERROR)
        with pytest.raises(ServiceNotAvailableError, match="dispatching"):
            store.put_message(make_message(topic="Old"))
        time.sleep(1.2)  # a retry round or two
        assert store.reput.is_running
    assert _wait_until(lambda: not store.running_flags.is_set(WRITE_LOGICS_QUEUE_ERROR))
    assert store.wait_dispatched()
    assert store.reput.stuck_reason is None
    for key in keys:  # the record that failed is indexed too, and nothing twice
        assert len(store.query_message("Old", key, 32).messages) == 1, key
    assert_store_holds(store, ledger)
    assert_recovers_exactly(store, ledger, tmp_path)


def test_a_consume_queue_unit_that_failed_to_write_is_written_on_retry(tmp_path, monkeypatch):
    queue = ConsumeQueue("T", 0, str(tmp_path), 200)
    with monkeypatch.context() as mp:
        mp.setattr(MappedFile, "ensure_allocated", _failing(errno.ENOSPC))
        with pytest.raises(OSError, match="No space"):
            queue.put_message_position_info(0, 100, 0, 0)
    assert queue.max_physic_offset == -1  # not counted: the retry is not skipped as a duplicate
    queue.put_message_position_info(0, 100, 0, 0)
    assert queue.get_unit(0).size == 100


# -- the clean service's early refusal -------------------------------------------------------------
def test_disk_full_by_ratio_refuses_writes_serves_reads_and_clears(store_factory):
    store = store_factory(start=False)
    store.put_message(make_message(body=b"kept"))
    store.wait_dispatched()
    usage = [0.97]
    store.clean_service.usage_of = lambda _path: usage[0]
    store.clean_service.check_disk()
    with pytest.raises(ServiceNotAvailableError, match="97% full") as info:
        store.put_message(make_message())
    assert info.value.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.running_flags.is_set(DISK_FULL)
    assert _bodies(store) == [b"kept"]
    usage[0] = 0.5
    store.clean_service.check_disk()
    store.put_message(make_message())


def test_the_clean_service_survives_a_disk_it_cannot_measure(store_factory):
    store = store_factory(start=False)

    def broken(_path):
        raise OSError(errno.EIO, "Input/output error")

    store.clean_service.usage_of = broken
    store.clean_service.clean_once()
    store.put_message(make_message())


# -- building blocks -------------------------------------------------------------------------------
def test_a_file_that_cannot_be_created_leaves_no_temporary_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(file_space_module.os, "ftruncate", _failing(errno.ENOSPC))
    with pytest.raises(OSError, match="No space"):
        create_sized_file(str(tmp_path / "00000000000000000000"), 4096)
    assert os.listdir(tmp_path) == []


def test_claiming_ahead_falls_back_to_exactly_what_the_write_needs(tmp_path, monkeypatch):
    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 1 << 20, allocate_ahead=1 << 19)
    calls = []
    real = os.posix_fallocate

    def only_small(fd, offset, length):
        calls.append(length)
        if length > 1000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, offset, length)

    monkeypatch.setattr(file_space_module.os, "posix_fallocate", only_small)
    mapped.append(b"x" * 100)
    assert calls == [1 << 19, 100]
    assert mapped.allocated_position == 100
    with pytest.raises(OSError, match="No space"):
        mapped.append(b"y" * 2000)
    assert mapped.wrote_position == 100
    mapped.close()


def test_file_systems_without_fallocate_are_written_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(file_space_module.os, "posix_fallocate", _failing(errno.EOPNOTSUPP))
    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 8192)
    mapped.append(b"z" * 10)
    assert mapped.allocated_position == 8192  # stops asking
    assert mapped.read(0, 10) == b"z" * 10
    mapped.close()


def test_a_store_whose_disk_fails_at_shutdown_still_closes_and_recovers(store_factory, monkeypatch,
                                                                        tmp_path):
    store = store_factory()
    ledger = Ledger()
    for i in range(5):
        ledger.put(store, make_message(body=b"%d" % i))
    assert store.wait_dispatched()
    config = store.config
    real = MappedFile._sync
    with monkeypatch.context() as mp:
        mp.setattr(MappedFile, "_sync", _failing(errno.EIO, real=real))
        mp.setattr(StoreCheckpoint, "flush", _failing(errno.EIO))
        store.shutdown()
    assert os.path.exists(config.abort_path)  # the next start recovers from the checkpoint
    reopened = reopen(config)
    try:
        assert not reopened.last_exit_ok
        assert_store_holds(reopened, ledger)
    finally:
        reopened.shutdown()


def test_running_flags_log_once_when_raised_and_remind_at_most_once_an_interval(caplog):
    now = [0.0]
    flags = RunningFlags(reminder_interval=60, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="storage.running_flags")
    for second in range(120):
        now[0] = float(second)
        flags.set(DISK_FULL, "the disk is full")
    assert flags.write_refusal() == "the disk is full"
    flags.clear(DISK_FULL)
    flags.clear(DISK_FULL)
    assert flags.write_refusal() is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3  # raised; one reminder at 60 s, with how many it stands for; cleared
    assert "60 more times" in messages[1]
    assert "cleared" in messages[-1]


def test_a_service_failing_every_round_logs_its_traceback_once(caplog):
    class Failing(ServiceThread):
        name = "FailingService"
        rounds = 0

        def run_once(self):
            Failing.rounds += 1
            raise OSError(errno.ENOSPC, "No space left on device")

    caplog.set_level(logging.ERROR, logger="storage.service_thread")
    service = Failing()
    service.start()
    assert _wait_until(lambda: Failing.rounds >= 5)
    service.shutdown()
    assert len(caplog.records) == 1
    assert caplog.records[0].exc_info is not None


def test_a_log_throttle_counts_what_it_held_back():
    now = [0.0]
    throttle = LogThrottle(interval=10, clock=lambda: now[0])
    assert throttle.should_log("k") == (True, 0)
    assert throttle.should_log("k") == (False, 0)
    now[0] = 10
    assert throttle.should_log("k") == (True, 1)
    throttle.forget("k")
    assert throttle.should_log("k") == (True, 0)
