"""DefaultMessageStore: the facade a broker uses.

Owns the CommitLog, the ConsumeQueues (``consumequeue/<topic>/<queueId>``), the index, the
checkpoint, the abort and lock files, and the services: flush (async or group commit), commit
(transient pool), dispatch (reput), cleaning and statistics.

Threads: ``put_*`` may be called from any thread (one put lock orders them); dispatch, flush and
cleaning run in their own service threads. Callers on an event loop use ``put_message_nowait``
and bridge the returned ``GroupCommitRequest`` with ``call_soon_threadsafe``. A service the disk
fails raises one of the ``running_flags`` (running_flags.py); puts are refused until it clears.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from itertools import repeat
from operator import eq, itemgetter

from common.platform import file_io
from common.platform.file_lock import try_lock
from common.platform.files import BINARY
from storage.checkpoint import StoreCheckpoint
from storage.cleanup import CleanService
from storage.commitlog import CommitLog
from storage.config import FlushDiskType, MessageStoreConfig
from storage.consume_queue import ConsumeQueue
from storage.dispatch import DispatchRequest, ReputMessageService
from storage.dispatchers import Dispatchers
from storage.errors import (
    DiskNotWritableError,
    PutMessageStatus,
    ServiceNotAvailableError,
    StoreLockedError,
)
from storage.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommit,
    GroupCommitFactory,
    GroupCommitRequest,
    GroupCommitService,
)
from storage.get_message import read_queue
from storage.index_file import IndexService
from storage.mapped_file import TransientStorePool
from storage.message import (
    MessageExtBatch,
    MessageExtBrokerInner,
)
from storage.message_lookup import MessageLookup
from storage.page_warmer import page_warmer_for
from storage.put_checks import check_batch_rules, check_body_size, check_store_status, topic_bytes
from storage.recovery import recover_store
from storage.results import (
    AppendMessageResult,
    GetMessageResult,
    MessageFilter,
    PutMessageResult,
)
from storage.running_flags import WRITE_COMMIT_LOG_ERROR, LogThrottle, RunningFlags
from storage.runtime_info import store_runtime_info
from storage.stats import StoreStatsService
from storage.store_shutdown import shut_down_store

log = logging.getLogger(__name__)
# A put's topic; a CommitLog result's size and elapsed ms (put_plain_run's counts).
_TOPIC, _SIZE, _ELAPSED = itemgetter(0), itemgetter(1), itemgetter(4)

_SYNC_FLUSH = FlushDiskType.SYNC_FLUSH  # (read once: a member read through its class costs ~70 ns)


def _total_physical_memory() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)  # (os.sysconf is POSIX only)
    except (ImportError, OSError, RuntimeError):
        return 8 * 1024**3


class DefaultMessageStore(MessageLookup):
    """The message store of one broker."""

    def __init__(
        self, config: MessageStoreConfig, store_host: tuple[str, int] = ("127.0.0.1", 10911)
    ) -> None:
        config.validate()
        self.config = config
        self.store_host = store_host
        self.pool = (
            TransientStorePool(config.transient_store_pool_size, config.mapped_file_size_commit_log)
            if config.transient_store_pool_active
            else None
        )
        self.commit_log = CommitLog(config, store_host, self.pool)
        # What stops writes now (disk full, a service that cannot write), each with its reason.
        self.running_flags = RunningFlags()
        self._after_put_failures = LogThrottle()
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self._cq_lock = threading.Lock()
        self.index_service = IndexService(
            config.index_dir, config.max_hash_slot_num, config.max_index_num,
            config.max_msgs_num_batch,
        )
        self.checkpoint: StoreCheckpoint | None = None
        self.stats = StoreStatsService()
        self.delay_levels_ms = config.delay_levels_ms()
        self.dispatchers = Dispatchers(self)
        dispatchers: list[Callable[[DispatchRequest], None]] = [
            self.dispatchers.build_consume_queue]
        if config.message_index_enable:
            dispatchers.append(self.dispatchers.build_index)
        self.reput = ReputMessageService(self.commit_log, dispatchers, self.delay_levels_ms,
                                         self.running_flags)
        self.reput.dispatch_plain = self.dispatchers.dispatch_plain  # (both above, fused)
        self.reput.dispatch_plain_run = self.dispatchers.dispatch_plain_run  # (for a run)
        self.commit_log.on_append = self.reput.wakeup
        self.flush_service: GroupCommit | FlushRealTimeService | None = None
        self._group_commit: GroupCommit | None = None  # the flush service under SYNC_FLUSH
        self.commit_service: CommitRealTimeService | None = None
        self.clean_service = CleanService(self)
        self._lock_fd: int | None = None
        self.last_exit_ok = True
        self.recovered_problem: str | None = None
        self._started = False
        self._shutdown = False
        self._shutdown_lock = threading.Lock()  # (two threads may stop a store at once)
        # Data further than this behind the write position is probably no longer in memory.
        self.memory_limit = _total_physical_memory() * config.access_message_in_memory_max_ratio // 100

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self) -> bool:
        """Lock the directory, map every file and recover; returns whether the last exit was clean."""
        config = self.config
        os.makedirs(config.store_path_root_dir, exist_ok=True)
        self._take_lock()
        self.last_exit_ok = not os.path.exists(config.abort_path)
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self.commit_log.load()
        self._load_consume_queues()
        self.index_service.load(self.last_exit_ok, self.checkpoint.index_msg_timestamp)
        self._recover()
        return self.last_exit_ok

    def _take_lock(self) -> None:
        path = self.config.lock_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | BINARY, 0o644)
        try:
            try_lock(fd)  # another store, in this process or another (a Java broker too)
        except OSError as exc:
            os.close(fd)
            raise StoreLockedError(
                f"{self.config.store_path_root_dir} is in use by another broker (lock file held)"
            ) from exc
        file_io.pwrite(fd, b"lock", 0)
        self._lock_fd = fd

    def _load_consume_queues(self) -> None:
        root = self.config.consume_queue_dir
        if not os.path.isdir(root):
            return
        for topic in os.listdir(root):
            topic_dir = os.path.join(root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for queue_name in os.listdir(topic_dir):
                # A queue's folder is its id as Java writes an int ("007" or "²" would be
                # opened as another folder, or fail int()): anything else is not a queue.
                if not (queue_name.isascii() and queue_name.isdigit()) \
                        or str(int(queue_name)) != queue_name:
                    continue
                queue = ConsumeQueue(topic, int(queue_name), root,
                                     self.config.mapped_file_size_consume_queue)
                queue.load()
                self.consume_queue_table.setdefault(topic, {})[int(queue_name)] = queue

    def _recover(self) -> None:
        recover_store(self)
        # Recovery has read the files with readahead; the ones written next go without it.
        self.commit_log.mapped_file_queue.advise_writing()
        for queues in self.consume_queue_table.values():
            for queue in queues.values():
                queue.mapped_file_queue.advise_writing()

    def _max_physic_offset_in_consume_queues(self) -> int:
        best = -1
        for queues in self.consume_queue_table.values():
            for queue in queues.values():
                best = max(best, queue.max_physic_offset)
        return best

    def rebuild_topic_queue_table(self) -> None:
        """Number each queue's next message from what its ConsumeQueue holds."""
        table = {}
        for topic, queues in self.consume_queue_table.items():
            for queue_id, queue in queues.items():
                table[(topic, queue_id)] = queue.get_max_offset_in_queue()
        self.commit_log.topic_queue_table = table

    def start(self, group_commit: GroupCommitFactory | None = None) -> None:
        """Start the services and mark the store as running (the abort file). ``group_commit``:
        SYNC_FLUSH's service made by the caller instead of the thread (a broker drives it from
        its event loop: cluster/broker/loop_group_commit.py); not with the transient pool,
        whose commit service wakes the flush from its own thread."""
        if self.checkpoint is None:
            self.load()
        checkpoint, config = self.checkpoint, self.config
        assert checkpoint is not None  # load() made it
        with open(config.abort_path, "w") as abort:
            abort.write(str(os.getpid()))
        queue = self.commit_log.mapped_file_queue
        flags = self.running_flags
        flush: GroupCommit | FlushRealTimeService
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            if group_commit is not None and self.pool is None:
                flush = group_commit(queue, checkpoint, flags)
            else:
                flush = GroupCommitService(queue, checkpoint, flags)
            self._group_commit = flush
        else:
            flush = FlushRealTimeService(queue, config, checkpoint, flags)
        self.flush_service = flush
        if self.pool is not None:
            self.commit_service = CommitRealTimeService(queue, config, flush, flags)
            self.commit_service.start()
        flush.start()
        warmer = self.commit_log.page_warmer = page_warmer_for(config, self.pool is not None)
        self.index_service.use_page_warmer(warmer)
        self.reput.start()
        self._cq_flusher = FlushConsumeQueueService(self)
        self._cq_flusher.start()
        self.stats.start()
        self.clean_service.check_disk()
        self.clean_service.start()
        self._started = True

    def shutdown(self) -> None:
        """Stop services, flush everything, write the checkpoint and remove the abort file
        (storage/store_shutdown.py). Once: a second call returns at once."""
        with self._shutdown_lock:
            if self._shutdown:
                return
            self._shutdown = True
        shut_down_store(self)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def destroy(self) -> None:
        """Delete every file of this store (tests and `rm`)."""
        self.commit_log.mapped_file_queue.destroy()
        for queues in self.consume_queue_table.values():
            for queue in queues.values():
                queue.destroy()
        self.index_service.destroy()

    # -- the put path -------------------------------------------------------------------------
    def put_message_nowait(
        self, msg: MessageExtBrokerInner
    ) -> tuple[PutMessageResult, GroupCommitRequest | None]:
        """Append without waiting; returns the result and the flush to wait for (SYNC_FLUSH).
        Raises PutMessageError subclasses only (see commitlog.py: a refusal leaves nothing behind)."""
        check_store_status(self)
        check_body_size(msg.body, self.config.max_message_size)
        begin = time.monotonic()
        append = self._put(self.commit_log.put_message, msg)
        self._after_put(append, begin)
        return PutMessageResult(PutMessageStatus.PUT_OK, append), self._flush_request(
            append.next_offset, msg.wait_store_msg_ok
        )

    def put_plain(
        self, topic: str, queue_id: int, flag: int, body: bytes, properties: str, sys_flag: int,
        born_timestamp: int, born_host: bytes, reconsume_times: int, wait: bool = True,
    ) -> tuple[int, int, str, GroupCommitRequest | None] | None:
        """A sender's common message (see ``CommitLog.append_plain`` for what it must be):
        (queue offset, next offset, msgId, the flush to wait for under SYNC_FLUSH when
        ``wait``), or None, with nothing written, when only :meth:`put_message_nowait` can take
        it. Refuses as that does."""
        check_store_status(self)
        if len(body) > self.config.max_message_size:
            return None  # the general path words the refusal
        try:  # (``_put``'s bookkeeping, written out: two calls fewer a send)
            done = self.commit_log.append_plain(
                topic, topic_bytes(topic), queue_id, flag, body, properties, sys_flag,
                born_timestamp, born_host, reconsume_times)
        except Exception as exc:
            self._put_failed(exc)
            raise
        if done is None:
            return None
        self.running_flags.clear(WRITE_COMMIT_LOG_ERROR)
        offset, total, queue_offset, msg_id, elapsed_ms = done
        try:
            self.stats.record_put(topic, 1, total, elapsed_ms)
        except Exception:  # stored: nothing here may turn it into an error for the sender
            if self._after_put_failures.should_log("stats")[0]:
                log.exception("recording put statistics failed")
        end = offset + total
        flush = self.flush_service
        if self.config.flush_disk_type is _SYNC_FLUSH:
            return queue_offset, end, msg_id, self._flush_request(end, wait)
        if self.commit_service is not None:
            self.commit_service.wakeup()
        elif isinstance(flush, FlushRealTimeService):  # (None in tools that never start it)
            flush.wakeup_if_due(end)
        return queue_offset, end, msg_id, None

    def put_plain_run(
        self, puts: list[tuple],
    ) -> tuple[list[tuple[int, int, int, str, float]], Exception | None]:
        """:meth:`put_plain` for a run of messages read together (each tuple is
        ``CommitLog.append_plain``'s arguments): the written ones' CommitLog results, in order,
        and the refusal of the next one (nothing of it written) or None. It stops with no
        refusal at a put that only :meth:`put_plain` or the general put takes (a body over
        ``maxMessageSize``, a new file): the caller puts the rest one by one. Refuses the whole
        run, having written nothing, as :meth:`put_plain` refuses one. Under SYNC_FLUSH the
        caller then asks for the run's flush (:meth:`request_flush`), as it knows which of its
        sends wait for it."""
        check_store_status(self)
        limit = self.config.max_message_size
        for taken, put in enumerate(puts):
            if len(put[4]) > limit:
                puts = puts[:taken]
                break
        try:
            results, error = self.commit_log.append_plain_run(puts)
        except Exception as exc:
            self._put_failed(exc)
            raise
        if error is not None:
            self._put_failed(error)
        if not results:
            return results, error
        self.running_flags.clear(WRITE_COMMIT_LOG_ERROR)
        try:  # one count a topic: nearly always one topic a run
            # (map and itemgetter: the loops run in C, not a generator's frame an item)
            first_topic = puts[0][0]
            if all(map(eq, repeat(first_topic), map(_TOPIC, puts[:len(results)]))):
                self.stats.record_put(first_topic, len(results), sum(map(_SIZE, results)),
                                      max(map(_ELAPSED, results)), len(results))
            else:
                for put, result in zip(puts, results, strict=False):
                    self.stats.record_put(put[0], 1, result[1], result[4])
        except Exception:  # stored: nothing here may turn it into an error for the sender
            if self._after_put_failures.should_log("stats")[0]:
                log.exception("recording put statistics failed")
        last = results[-1]
        if self.config.flush_disk_type is _SYNC_FLUSH:
            return results, error  # (the caller asks for the flush: request_flush)
        if self.commit_service is not None:
            self.commit_service.wakeup()
        elif isinstance(self.flush_service, FlushRealTimeService):
            self.flush_service.wakeup_if_due(last[0] + last[1])
        return results, error

    def _put(self, put, arg):
        """``put(arg)``, a CommitLog append, with the running flag and failure count kept."""
        try:
            append = put(arg)
        except Exception as exc:
            self._put_failed(exc)
            raise
        if append is not None:  # (None: a one-step put declined, having tried nothing)
            self.running_flags.clear(WRITE_COMMIT_LOG_ERROR)
        return append

    def _put_failed(self, exc: Exception) -> None:
        """Count a failed CommitLog append; a disk that cannot be written raises the flag."""
        self.stats.record_put_failure()
        if isinstance(exc, DiskNotWritableError):
            self.running_flags.set(WRITE_COMMIT_LOG_ERROR, str(exc), refuse_writes=False)

    def _after_put(self, append: AppendMessageResult, begin: float) -> None:
        """Bookkeeping once the message is in: nothing here may turn a stored message into an
        error for the sender, who would send it again."""
        try:
            self.stats.record_put(append.topic, append.msg_num, append.wrote_bytes,
                                  (time.monotonic() - begin) * 1000)
        except Exception:
            if self._after_put_failures.should_log("stats")[0]:
                log.exception("recording put statistics failed")

    def put_messages_nowait(
        self, batch: MessageExtBatch
    ) -> tuple[PutMessageResult, GroupCommitRequest | None]:
        """Batch form of :meth:`put_message_nowait`."""
        check_store_status(self)
        check_batch_rules(batch, self.config.max_message_size)
        begin = time.monotonic()
        append = self._put(self.commit_log.put_messages, batch)
        self._after_put(append, begin)
        wait = batch.properties.get("WAIT", "true").lower() == "true"
        return PutMessageResult(PutMessageStatus.PUT_OK, append), self._flush_request(
            append.next_offset, wait)

    def request_flush(self, next_offset: int, wait: bool) -> GroupCommitRequest | None:
        """After :meth:`put_plain_run` under SYNC_FLUSH: the flush the run's sends wait for,
        up to its end ``next_offset`` (None, the flush woken, when none of them waits), as
        :meth:`put_plain` asks it for one send."""
        return self._flush_request(next_offset, wait)

    def _flush_request(self, next_offset: int, wait: bool) -> GroupCommitRequest | None:
        service = self.flush_service
        if service is not None and service is self._group_commit:
            if wait:
                return service.request_flush(next_offset, self.config.sync_flush_timeout)
            service.wakeup()
            return None
        if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH and wait:
            # Not started (tests, tools): nobody will flush, so the wait times out as RocketMQ's would.
            return GroupCommitRequest(next_offset, self.config.sync_flush_timeout)
        if self.commit_service is not None:
            self.commit_service.wakeup()
        elif isinstance(service, FlushRealTimeService):
            service.wakeup_if_due(next_offset)
        return None

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Append and, under SYNC_FLUSH, wait for the flush (FLUSH_DISK_TIMEOUT when late)."""
        result, request = self.put_message_nowait(msg)
        return self._await_flush(result, request)

    def put_messages(self, batch: MessageExtBatch) -> PutMessageResult:
        result, request = self.put_messages_nowait(batch)
        return self._await_flush(result, request)

    @staticmethod
    def _await_flush(result: PutMessageResult, request: GroupCommitRequest | None) -> PutMessageResult:
        # (its own end: the puts of a round share the request, GroupCommitService.request_flush)
        if (request is not None and not request.wait()
                and (result.append is None or request.flushed_to < result.append.next_offset)):
            log.error("group commit: flush did not finish within syncFlushTimeout")
            result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return result

    # -- dispatchers ----------------------------------------------------------------------------
    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        if queues is not None:
            queue = queues.get(queue_id)
            if queue is not None:
                return queue
        if not create:
            return None
        with self._cq_lock:
            queues = self.consume_queue_table.setdefault(topic, {})
            queue = queues.get(queue_id)
            if queue is None:
                queue = ConsumeQueue(topic, queue_id, self.config.consume_queue_dir,
                                     self.config.mapped_file_size_consume_queue)
                queues[queue_id] = queue
            return queue

    def add_arrival_listener(self, listener) -> None:
        """Call ``listener(Arrivals)`` after each round of dispatch (on the dispatch thread or
        the event loop): the queues that got records, each with its newest."""
        self.reput.arrival_listeners.append(listener)

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until everything readable is dispatched (tests, benchmarks, tools)."""
        deadline = time.monotonic() + timeout
        while self.reput.behind() > 0:
            if not self.reput.is_running:
                self.reput.do_reput()
                if self.reput.behind() > 0:
                    return False
                break
            if time.monotonic() > deadline:
                return False
            self.reput.wakeup()
            time.sleep(0.001)
        return True

    # -- the read path ----------------------------------------------------------------------------
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
        joined: bool = False,
    ) -> GetMessageResult:
        """Read up to ``max_msg_nums`` records of one queue from logical ``offset``
        (``getMessage``); ``joined`` for a pull's answer, whose body is all it needs
        (storage/get_message.py ``read_queue``)."""
        if self._shutdown:
            raise ServiceNotAvailableError("the message store has shut down")
        result = read_queue(self, topic, queue_id, offset, max_msg_nums, message_filter, joined)
        self.stats.record_get(result.message_count)
        return result

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id, create=False)
        return queue.get_max_offset_in_queue() if queue else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id, create=False)
        return queue.get_min_offset_in_queue() if queue else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        queue = self.find_consume_queue(topic, queue_id, create=False)
        unit = queue.get_unit(cq_offset) if queue else None
        return unit.commit_log_offset if unit else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First logical offset stored at or after ``timestamp`` (ms); max offset if none."""
        queue = self.find_consume_queue(topic, queue_id, create=False)
        if queue is None:
            return 0
        return queue.get_offset_in_queue_by_time(timestamp, self.commit_log.pickup_store_timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """Store time of one queue entry, or -1 when it is gone."""
        queue = self.find_consume_queue(topic, queue_id, create=False)
        unit = queue.get_unit(cq_offset) if queue else None
        if unit is None:
            return -1
        stored = self.commit_log.pickup_store_timestamp(unit.commit_log_offset, unit.size)
        return -1 if stored is None else stored

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return self.get_message_store_timestamp(
            topic, queue_id, self.get_min_offset_in_queue(topic, queue_id)
        )

    # -- raw CommitLog access (replication) ------------------------------------------------------
    def get_commit_log_data(self, offset: int, max_size: int | None = None) -> bytes:
        """Readable bytes from ``offset`` to the end of its file, at most ``max_size`` (what a
        master streams); empty when nothing is readable there yet."""
        if offset >= self.commit_log.get_max_offset():
            return b""
        return self.commit_log.get_data(offset, max_size)[0]

    def append_to_commit_log(self, start_offset: int, data: bytes) -> None:
        """Append bytes a master sent; dispatch indexes them like local puts."""
        if self._shutdown:
            raise ServiceNotAvailableError("the message store has shut down")
        self.commit_log.append_data(start_offset, data)

    def get_max_phy_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_min_phy_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind()

    # -- maintenance ----------------------------------------------------------------------------
    def _flush_consume_queues(self, least_pages: int) -> None:
        for queues in list(self.consume_queue_table.values()):
            for queue in list(queues.values()):
                queue.flush(least_pages)

    def clean_derived_files(self) -> None:
        """Drop ConsumeQueue and index files that only point at deleted CommitLog files."""
        minimum = self.commit_log.get_min_offset()
        if minimum < 0:
            return
        for queues in list(self.consume_queue_table.values()):
            for queue in list(queues.values()):
                queue.delete_expired_file(minimum)
        self.index_service.delete_expired_file(minimum)

    def execute_delete_files_manually(self) -> None:
        """Ask the clean service to delete expired files on its next rounds, whatever the hour."""
        self.clean_service.manual_delete_rounds = 20
        self.clean_service.wakeup()

    def delete_topics(self, topics: set[str]) -> None:
        """Forget the ConsumeQueues of deleted topics."""
        for topic in topics:
            queues = self.consume_queue_table.pop(topic, {})
            for queue_id, queue in queues.items():
                queue.destroy()
                self.commit_log.remove_queue_from_topic_queue_table(topic, queue_id)

    # -- runtime information ----------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's store runtime keys plus RocketDesk's positions and histogram."""
        return store_runtime_info(self)
