"""Getting CommitLog bytes to disk: async flush, sync group commit, and the commit service.

* ASYNC_FLUSH (``FlushRealTimeService``): every ``flushIntervalCommitLog`` (500 ms) flush when at
  least ``flushCommitLogLeastPages`` (4) pages are dirty; every
  ``flushCommitLogThoroughInterval`` (10 s) flush whatever is dirty.
* SYNC_FLUSH (``GroupCommitService``): a put files a ``GroupCommitRequest`` for its end offset
  and waits. The service swaps its request lists, flushes once for all of them and completes
  every request the flush covered: concurrent writers share one ``fdatasync``. A request not
  completed within ``syncFlushTimeout`` (5 s) answers FLUSH_DISK_TIMEOUT.
* With the transient store pool, ``CommitRealTimeService`` copies appended bytes from the write
  buffers to the files every ``commitIntervalCommitLog`` (200 ms) and wakes the flusher.

Waiters may block (``GroupCommitRequest.wait``) or register a callback that runs on the
service thread (an event loop bridges it with ``call_soon_threadsafe``).

A commit or flush the disk refuses (ENOSPC, EIO, a read-only remount) does not kill or wedge a
service: it raises a running flag (puts are refused with SERVICE_NOT_AVAILABLE), waiters that
the failed flush should have covered are answered at once (FLUSH_DISK_TIMEOUT, as RocketMQ's
GroupCommitService answers a flush that did not reach them), and the next round tries again;
the first success lowers the flag. Nothing is counted flushed that was not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from storage.checkpoint import StoreCheckpoint
from storage.config import MessageStoreConfig
from storage.errors import describe_os_error
from storage.mapped_file import OS_PAGE_SIZE
from storage.mapped_file_queue import MappedFileQueue
from storage.running_flags import (
    COMMIT_COMMIT_LOG_ERROR,
    FLUSH_COMMIT_LOG_ERROR,
    FLUSH_CONSUME_QUEUE_ERROR,
    RunningFlags,
)
from storage.service_thread import ServiceThread

RETRY_TIMES_OVER = 10


def _guarded(flags: RunningFlags, flag: str, what: str, action: Callable[[], object]) -> bool:
    """Run ``action``; an OSError raises ``flag`` instead of the exception. True on success."""
    try:
        action()
    except OSError as exc:
        flags.set(flag, f"{what} failed: {describe_os_error(exc)}")
        return False
    flags.clear(flag)
    return True


# How recent a round's newest request must be for a put to join it (seconds).
_JOIN_WITHIN = 0.01


def join_window(request: GroupCommitRequest, timeout_ms: int) -> bool:
    """Whether a put with ``timeout_ms`` may join ``request`` (moving its end up) instead of
    filing its own: only a recent one, whose deadline is (nearly) the put's own."""
    return request.deadline - time.monotonic() > timeout_ms / 1000 - _JOIN_WITHIN


class GroupCommitRequest:
    """A writer's wait for everything before ``next_offset`` to be flushed (or replicated)."""

    __slots__ = ("_callbacks", "_done", "_event", "_lock", "deadline", "flush_ok", "flushed_to",
                 "next_offset")

    def __init__(self, next_offset: int, timeout_ms: int) -> None:
        self.next_offset = next_offset
        self.deadline = time.monotonic() + timeout_ms / 1000
        self.flush_ok = False
        # Where the flush stood when the request was resolved: the sends that share a request
        # (GroupCommitService.request_flush) each judge their own end by it.
        self.flushed_to = -1
        self._done = False
        self._event: threading.Event | None = None  # made only for a blocking waiter
        self._callbacks: list[Callable[[bool], None]] = []
        self._lock = threading.Lock()

    def complete(self, ok: bool) -> None:
        """Resolve the request once; later calls are ignored."""
        with self._lock:
            if self._done:
                return
            self.flush_ok = ok
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            callback(ok)

    def add_done_callback(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` when resolved (at once if it already is)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self.flush_ok)

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None = None) -> bool:
        """Block until resolved or the request's own deadline; True when flushed in time."""
        with self._lock:
            if not self._done and self._event is None:
                self._event = threading.Event()
            event = self._event
        remaining = self.deadline - time.monotonic() if timeout is None else timeout
        if event is not None:
            event.wait(max(remaining, 0))
        return self._done and self.flush_ok


class GroupCommit(Protocol):
    """SYNC_FLUSH's service as the store uses it: ``GroupCommitService`` here, or one a caller
    makes (a broker's loop-driven one, cluster/broker/loop_group_commit.py)."""

    # The round in progress outlived shutdown's wait (a disk that hangs): nobody may flush
    # the CommitLog again on the way out.
    abandoned: bool

    def start(self) -> None: ...

    def request_flush(self, next_offset: int, timeout_ms: int) -> GroupCommitRequest: ...

    def wakeup(self) -> None: ...

    def shutdown(self, timeout: float = 30.0) -> None: ...


GroupCommitFactory = Callable[[MappedFileQueue, StoreCheckpoint, RunningFlags], GroupCommit]


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH: periodic flushes of the CommitLog."""

    name = "FlushRealTimeService"

    def __init__(
        self, queue: MappedFileQueue, config: MessageStoreConfig, checkpoint: StoreCheckpoint,
        flags: RunningFlags | None = None,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.config = config
        self.checkpoint = checkpoint
        self.flags = flags if flags is not None else RunningFlags()
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        config = self.config
        least_pages = config.flush_commit_log_least_pages
        now = time.monotonic()
        if now >= self._last_thorough + config.flush_commit_log_thorough_interval / 1000:
            self._last_thorough = now
            least_pages = 0
        if config.flush_commit_log_timed:
            self._stopped.wait(config.flush_interval_commit_log / 1000)
        else:
            self.wait_for_running(config.flush_interval_commit_log)
        if not self._flush(least_pages):
            return
        if self.queue.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = self.queue.store_timestamp

    def wakeup_if_due(self, written_to: int) -> None:
        """After a put that wrote up to ``written_to``: wake the flush only once it has
        ``flushCommitLogLeastPages`` to write. A wakeup per put would find nothing to flush
        most of the time and still take the interpreter lock from the put path on every
        message. (The put's own end, not the queue's: no walk to the last file a put.)"""
        least = self.config.flush_commit_log_least_pages * OS_PAGE_SIZE
        if written_to - self.queue.flushed_where >= least:
            self.wakeup()

    def _flush(self, least_pages: int) -> bool:
        return _guarded(self.flags, FLUSH_COMMIT_LOG_ERROR, "flushing the CommitLog",
                        lambda: self.queue.flush(least_pages))

    def on_shutdown(self) -> None:
        for _ in range(RETRY_TIMES_OVER):
            if not self._flush(0) or self.queue.flushed_where >= self.queue.get_max_offset():
                break
        if self.queue.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = self.queue.store_timestamp


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: flush once for every request filed since the last round."""

    name = "GroupCommitService"

    def __init__(
        self, queue: MappedFileQueue, checkpoint: StoreCheckpoint, flags: RunningFlags | None = None,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.checkpoint = checkpoint
        self.flags = flags if flags is not None else RunningFlags()
        self._requests_write: list[GroupCommitRequest] = []
        self._requests_read: list[GroupCommitRequest] = []
        self._swap_lock = threading.Lock()

    def put_request(self, request: GroupCommitRequest) -> None:
        with self._swap_lock:
            self._requests_write.append(request)
        self.wakeup()

    def request_flush(self, next_offset: int, timeout_ms: int) -> GroupCommitRequest:
        """A wait for everything before ``next_offset`` to be flushed. Every request the
        flush thread takes in one round is resolved by that round's one flush, so a put joins
        the round's newest request while the thread has not taken it yet (moving its end up)
        instead of filing its own: one object, lock, wakeup and completion a round, not a put.
        A request older than a few milliseconds (one a round put back) is not joined: its
        deadline would not be the new put's."""
        with self._swap_lock:
            requests = self._requests_write
            if requests:
                last = requests[-1]
                if not last._done and join_window(last, timeout_ms):
                    last.next_offset = max(last.next_offset, next_offset)
                    return last
            request = GroupCommitRequest(next_offset, timeout_ms)
            requests.append(request)
        self.wakeup()
        return request

    def on_wait_end(self) -> None:
        with self._swap_lock:
            self._requests_write, self._requests_read = self._requests_read, self._requests_write

    def run_once(self) -> None:
        self.wait_for_running(10)
        self._do_commit()

    def _do_commit(self) -> None:
        requests = self._requests_read
        queue = self.queue
        if requests:
            target = max(r.next_offset for r in requests)
            ok = True
            # A file boundary may sit between flushed_where and the target: at most one
            # flush per file is needed, RocketMQ's "flush at most twice" generalised.
            for _ in range(4):
                if queue.flushed_where >= target:
                    break
                ok = self._flush()
                if not ok:
                    break
            flushed = queue.flushed_where
            now = time.monotonic()
            for request in requests:
                request.flushed_to = flushed
                if flushed >= request.next_offset:
                    request.complete(True)
                elif not ok or now >= request.deadline:
                    request.complete(False)  # the disk refused: FLUSH_DISK_TIMEOUT now, not later
                else:
                    self.put_request(request)  # not yet: try again next round
            if ok and queue.store_timestamp > 0:
                self.checkpoint.physic_msg_timestamp = queue.store_timestamp
            requests.clear()
        else:
            # Puts that did not ask to wait (WAIT=false) still get flushed promptly.
            self._flush()

    def _flush(self) -> bool:
        return _guarded(self.flags, FLUSH_COMMIT_LOG_ERROR, "flushing the CommitLog",
                        lambda: self.queue.flush(0))

    def on_shutdown(self) -> None:
        time.sleep(0.01)
        self.on_wait_end()
        self._do_commit()
        for request in self._requests_write + self._requests_read:
            request.flushed_to = self.queue.flushed_where
            request.complete(self.queue.flushed_where >= request.next_offset)


class CommitRealTimeService(ServiceThread):
    """Transient store pool: copy write buffers to the files, then wake the flusher."""

    name = "CommitRealTimeService"

    def __init__(
        self, queue: MappedFileQueue, config: MessageStoreConfig,
        flush_service: ServiceThread | GroupCommit,
        flags: RunningFlags | None = None,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.config = config
        self.flush_service = flush_service
        self.flags = flags if flags is not None else RunningFlags()
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        config = self.config
        least_pages = config.commit_commit_log_least_pages
        now = time.monotonic()
        if now >= self._last_thorough + config.commit_commit_log_thorough_interval / 1000:
            self._last_thorough = now
            least_pages = 0
        if self._commit(least_pages) is False:
            self._last_thorough = time.monotonic()
            self.flush_service.wakeup()
        self.wait_for_running(config.commit_interval_commit_log)

    def _commit(self, least_pages: int) -> bool | None:
        """What ``queue.commit`` answered (True: nothing moved), or None when the disk refused."""
        try:
            idle = self.queue.commit(least_pages)
        except OSError as exc:
            self.flags.set(COMMIT_COMMIT_LOG_ERROR,
                           f"committing the CommitLog failed: {describe_os_error(exc)}")
            return None
        self.flags.clear(COMMIT_COMMIT_LOG_ERROR)
        return idle

    def on_shutdown(self) -> None:
        for _ in range(RETRY_TIMES_OVER):
            if self._commit(0) is not False:
                break


class FlushConsumeQueueService(ServiceThread):
    """Flushes ConsumeQueues and the index every flushIntervalConsumeQueue, then the checkpoint."""

    name = "FlushConsumeQueueService"

    def __init__(self, store) -> None:
        super().__init__()
        self.store = store
        self.flags: RunningFlags = store.running_flags
        self._last_thorough = time.monotonic()
        # Off when the CommitLog's last flush hung in the disk: this one would hang as well.
        self.final_flush = True

    def run_once(self) -> None:
        if self._stopped.wait(self.store.config.flush_interval_consume_queue / 1000):
            return  # stopping: on_shutdown's flush is the last one (or none, see final_flush)
        self.flush_once(thorough=False)

    def on_shutdown(self) -> None:
        if self.final_flush:
            self.flush_once(thorough=True)

    def flush_once(self, thorough: bool) -> None:
        store = self.store
        config = store.config
        now = time.monotonic()
        least = config.flush_consume_queue_least_pages
        if thorough or now >= self._last_thorough + config.flush_consume_queue_thorough_interval / 1000:
            self._last_thorough = now
            least = 0
        # Read the time before flushing: the checkpoint must never claim more than is on disk.
        dispatched_ts = store.reput.last_store_timestamp
        step = "flushing the ConsumeQueues"
        try:
            for queues in list(store.consume_queue_table.values()):
                for queue in list(queues.values()):
                    queue.flush(least)
            step = "flushing the index"
            # The index only on thorough rounds (every flushConsumeQueueThoroughInterval, at
            # shutdown; a full file is flushed as the next one starts), as RocketMQ flushes it
            # rarely: a flush write-protects every page it cleans, and keys land on random hash
            # slots, so each flush cost a page fault a key until the slots were dirty again
            # (97 % of a broker's faults at one round a second). After a crash, recovery
            # re-indexes from the last flushed entry (recovery.py), as it did before; a file
            # that filled is flushed as it fills, and its time reaches the checkpoint here.
            index = store.index_service
            index_ts = (index.flush() if least == 0 else index.flushed_timestamp) \
                if config.message_index_enable else 0
            # Only now: the checkpoint must not claim what did not reach the disk.
            checkpoint = store.checkpoint
            if least == 0 and dispatched_ts:
                checkpoint.logics_msg_timestamp = dispatched_ts
            if index_ts:
                checkpoint.index_msg_timestamp = index_ts
            step = "writing the checkpoint"
            checkpoint.flush()
        except OSError as exc:
            self.flags.set(FLUSH_CONSUME_QUEUE_ERROR, f"{step} failed: {describe_os_error(exc)}")
            return
        self.flags.clear(FLUSH_CONSUME_QUEUE_ERROR)
