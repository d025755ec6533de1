"""CommitLog: every message of every topic, appended under one put lock.

The put path (mirrors ``CommitLog.putMessage`` and ``DefaultAppendMessageCallback.doAppend``):

1. outside the lock: every field checked against its slot in the record (put_checks.py), the
   delay-level rewrite to SCHEDULE_TOPIC_XXXX, body CRC, the record's tail bytes (body, topic,
   properties);
2. inside the lock: store timestamp (so store times never decrease along the log), the queue
   offset for (topic, queueId), the physical offset; a record that does not fit (plus the 8-byte
   blank marker) ends the file with a blank record and goes to the next file; the blocks are
   claimed (a full disk is a refusal, not a SIGBUS), the record encoded into a staging buffer
   and written to the file in one call (through the page cache, not the mapping: see
   ``MappedFile.write_at``), and only then the write position moved, which is what makes the
   record visible;
3. outside the lock: msgId, and the caller's flush/replication wait.

Exception safety: whatever raises in step 2 (a full disk, a failed file roll, a bug) is rolled
back before the lock is released: the bytes are zeroed, the queue offset and dispatch's entries
restored, the in-lock timer cleared; the caller gets a PutMessageError and its message object
unchanged. A batch is all or nothing.

Prepared and rollback transaction records get queue offset 0 and do not advance the queue.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from types import MethodType

from common import speedups
from storage import plain_run, put_checks
from storage.batch_record import batch_layout, encode_batch_into
from storage.config import MessageStoreConfig
from storage.errors import (
    AppendMessageError,
    CreateMappedFileError,
    DiskNotWritableError,
    MessageIllegalError,
    OffsetOutOfRangeError,
    PutMessageError,
    StoreError,
    describe_os_error,
    is_disk_error,
)
from storage.mapped_file import MappedFile, TransientStorePool
from storage.mapped_file_queue import MappedFileQueue
from storage.message import (
    BORNHOST_V6_FLAG,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBatch,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
)
from storage.message_id import host_to_bytes, is_ipv6
from storage.page_warmer import PageWarmer
from storage.record import (
    END_FILE_MIN_BLANK_LENGTH,
    encode_blank,
    encode_record_into,
)
from storage.results import AppendMessageResult
from storage.running_flags import LogThrottle

log = logging.getLogger(__name__)

# CommitLog.append_plain compiled (common/_append.c), where the core is built and has it.
_append_plain_compiled = getattr(speedups.store_core, "append_plain", None)
_append_plain_run_compiled = getattr(speedups.store_core, "append_plain_run", None)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CommitLog:
    """The log of all messages, with the queue-offset table that numbers each topic queue."""

    def __init__(
        self,
        config: MessageStoreConfig,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        pool: TransientStorePool | None = None,
    ) -> None:
        self.config = config
        self.mapped_file_size = config.mapped_file_size_commit_log
        self.mapped_file_queue = MappedFileQueue(config.commit_log_dir, self.mapped_file_size, pool)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.put_lock = threading.Lock()
        # Records are encoded here, under the put lock, and then written to the file in one
        # call (MappedFile.write_at says why not into the mapping); grows to the largest put.
        self._staging_buffer = bytearray(1 << 16)
        self.begin_time_in_lock = 0.0
        self.store_host = store_host
        self.store_host_bytes = host_to_bytes(*store_host)
        # create_message_id's first half, once: a put appends its offset as 16 hex digits.
        self._msg_id_prefix = self.store_host_bytes.hex().upper()
        self.store_host_v6 = is_ipv6(store_host[0])
        self.max_delay_level = len(config.delay_levels_ms())
        # Records appended since dispatch last looked, in log order, so dispatch need not
        # decode what the put path already knows: (offset, size, store time, queue offset,
        # topic, queue id, sysFlag, prepared tx offset, properties); topic None marks a blank.
        # Bounded: if dispatch falls behind, older entries go and it decodes the log instead.
        self.appended: deque = deque(maxlen=65536)
        self.on_append: Callable[[], None] | None = None  # set by the store: wakes dispatch
        self._failures = LogThrottle()
        self.page_warmer: PageWarmer | None = None  # set by the store where it can run
        if _append_plain_compiled is not None:  # (the instance's own: no Python frame a put)
            self.append_plain = MethodType(_append_plain_compiled, self)  # type: ignore[method-assign]
        if _append_plain_run_compiled is not None:
            self.append_plain_run = MethodType(  # type: ignore[method-assign]
                _append_plain_run_compiled, self)

    def _staging(self, total: int) -> bytearray:
        """The encode buffer for a put of ``total`` bytes (under the put lock)."""
        buffer = self._staging_buffer
        if len(buffer) < total:
            buffer = self._staging_buffer = bytearray(total)
        return buffer

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        self.mapped_file_queue.load()

    def shutdown(self) -> None:
        try:
            self.mapped_file_queue.flush_all()
        finally:
            self.mapped_file_queue.shutdown()

    # -- positions ----------------------------------------------------------------------------
    def get_min_offset(self) -> int:
        first = self.mapped_file_queue.get_first_mapped_file()
        if first is None:
            return -1
        if first.is_available:
            return first.file_from_offset
        return self.roll_next_file(first.file_from_offset)

    def get_max_offset(self) -> int:
        """End of readable data: what dispatch, readers and slaves may see."""
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    # -- the put path -------------------------------------------------------------------------
    def _delay_rewrite(self, msg: MessageExtBrokerInner) -> tuple[str, int, str, dict | None]:
        """(topic, queue id, properties string, properties) the record is written with: a delay
        level parks the message in SCHEDULE_TOPIC_XXXX. Computed, not applied: the caller's
        message changes only once the put has succeeded (a refused put leaves it as it was, so
        whoever retries it does not park an already parked message)."""
        unchanged = (msg.topic, msg.queue_id, msg.properties_string, None)
        tran_type = msg.sys_flag & 0xC
        if tran_type not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return unchanged
        level = msg.delay_time_level
        if level <= 0:
            return unchanged
        props = string_to_properties(msg.properties_string)
        if level > self.max_delay_level:
            level = self.max_delay_level
            props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        return SCHEDULE_TOPIC, level - 1, properties_to_string(props), props

    def _host_flags(self, born_host: bytes) -> int:
        flags = 0
        if len(born_host) == 20:
            flags |= BORNHOST_V6_FLAG
        if self.store_host_v6:
            flags |= STOREHOSTADDRESS_V6_FLAG
        return flags

    def _check_fits(self, total: int, what: str) -> None:
        if total + END_FILE_MIN_BLANK_LENGTH > self.mapped_file_size:
            raise MessageIllegalError(
                f"{what} of {total} bytes cannot fit one CommitLog file of {self.mapped_file_size} bytes"
            )

    def put_message(self, msg: MessageExtBrokerInner) -> AppendMessageResult:
        """Append one message; raises PutMessageError subclasses when refused.

        A refused put leaves nothing behind: no bytes, no queue offset, nothing for dispatch,
        and ``msg`` as it was.
        """
        try:
            put_checks.message_fields(msg)
            topic_bytes = put_checks.topic_bytes(msg.topic)  # the real topic, delayed or not
            sys_flag = msg.sys_flag
            if sys_flag & 0xC in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) \
                    and msg.delay_time_level > 0:
                topic, queue_id, props, parsed = self._delay_rewrite(msg)
                topic_bytes = topic.encode()
            else:  # most puts (the rewrite's own first test, without its call)
                topic, queue_id, props, parsed = msg.topic, msg.queue_id, msg.properties_string, None
            born_host = put_checks.born_host_bytes(msg.born_host)
            sys_flag |= self._host_flags(born_host)
            body = put_checks.body_of(msg.body)
            props_bytes = put_checks.properties_bytes(props)
            total = self._record_total(len(body) + 1 + len(topic_bytes) + 2 + len(props_bytes),
                                       len(born_host))
            crc = zlib.crc32(body) & 0x7FFFFFFF
        except PutMessageError:
            raise
        except Exception as exc:
            raise MessageIllegalError(f"the message cannot be encoded: {exc}") from exc
        self._check_fits(total, "a record")
        tran_type = sys_flag & 0xC
        advances = tran_type not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
        prepared = msg.prepared_transaction_offset
        host = self.store_host_bytes
        flag, born_ts, reconsume = msg.flag, msg.born_timestamp, msg.reconsume_times

        def write(target, pos: int, physical: int, queue_offset: int, store_ts: int) -> list:
            encode_record_into(
                target, pos, crc, queue_id, flag, queue_offset, physical, sys_flag,
                born_ts, born_host, store_ts, host, reconsume, prepared, body, topic_bytes,
                props_bytes)
            return [(physical, total, store_ts, queue_offset, topic, queue_id, sys_flag,
                     prepared, props)]

        with self.put_lock:
            begin = time.monotonic()
            self.begin_time_in_lock = begin
            try:
                store_ts, wrote_offset, queue_offset = self._append_locked(
                    total, write, topic, queue_id, advances)
            finally:
                # Whatever happened, the lock is no longer held: a put that raised must not
                # leave the page cache looking busy for ever (OS_PAGECACHE_BUSY on every put).
                self.begin_time_in_lock = 0.0
            elapsed = time.monotonic() - begin
        self._notify_append()
        if parsed is not None:
            msg.topic, msg.queue_id = topic, queue_id
            msg.replace_properties(parsed, props)
        msg.sys_flag = sys_flag
        msg.store_timestamp = store_ts
        msg.queue_offset = queue_offset
        msg.commit_log_offset = wrote_offset
        return AppendMessageResult(
            wrote_offset, total, store_ts, queue_offset, 1,
            [f"{self._msg_id_prefix}{wrote_offset:016X}"],  # create_message_id, offset >= 0
            topic, queue_id, elapsed * 1000,
        )

    def append_plain(
        self, topic: str, topic_bytes: bytes, queue_id: int, flag: int, body: bytes,
        properties: str, sys_flag: int, born_timestamp: int, born_host: bytes,
        reconsume_times: int,
    ) -> tuple[int, int, int, str, float] | None:
        """The common put in one step, for a sender's message as the send processor checked
        it: a non-transactional record with no delay level, every number already known to fit
        its field. Writes exactly what :meth:`put_message` writes for the same message and
        returns (wrote offset, total, queue offset, msgId, milliseconds in the lock).

        Returns None, having written nothing, when the put needs what only
        :meth:`put_message` does (a new file, claiming blocks, properties that
        are not UTF-8 or too long): the caller then takes that path, which also words every
        refusal. Why a second path: the general one costs ~9 µs of Python a message in calls
        and objects around a 1 µs encode; this one is a third of that, and the compiled core
        (common/_append.c, bound over this method in ``__init__``) a third of that again.
        """
        return self._append_plain_pure(topic, topic_bytes, queue_id, flag, body, properties,
                                       sys_flag, born_timestamp, born_host, reconsume_times)

    def _append_plain_pure(
        self, topic: str, topic_bytes: bytes, queue_id: int, flag: int, body: bytes,
        properties: str, sys_flag: int, born_timestamp: int, born_host: bytes,
        reconsume_times: int,
    ) -> tuple[int, int, int, str, float] | None:
        """:meth:`append_plain`'s reference, in Python (the compiled one's pure twin): a run
        of one."""
        results, error = self._append_plain_run_pure([(
            topic, topic_bytes, queue_id, flag, body, properties, sys_flag, born_timestamp,
            born_host, reconsume_times)])
        if error is not None:
            raise error
        return results[0] if results else None

    def append_plain_run(
        self, puts: list[tuple],
    ) -> tuple[list[tuple[int, int, int, str, float]], Exception | None]:
        """:meth:`append_plain` for a run of messages, each a tuple of its arguments (without
        the CommitLog), under one hold of the put lock, their records written together (one
        ``pwrite``): (the results of the first ones, as many as were written; None, or the
        refusal of a run none of which was written). A run stops, with no refusal, at the first
        message the one-step put would not take (see :meth:`append_plain`; arguments of a kind
        it does not expect), or that does not fit the file as claimed: the caller puts that
        one, and the rest, by itself. A burst of sends read together costs one call (the
        compiled core, common/_append.c, binds over this method in ``__init__``)."""
        return self._append_plain_run_pure(puts)

    def _append_plain_run_pure(
        self, puts: list[tuple],
    ) -> tuple[list[tuple[int, int, int, str, float]], Exception | None]:
        """:meth:`append_plain_run`'s reference, in Python (the compiled one's pure twin),
        storage/plain_run.py; with this module's clock (tests set their own)."""
        return plain_run.append_plain_run(self, puts, time)

    def put_messages(self, batch: MessageExtBatch) -> AppendMessageResult:
        """Append a batch: one record per inner message, consecutive queue offsets, one file.
        All or nothing: a batch that fails midway leaves none of its records behind."""
        try:
            put_checks.batch_fields(batch)
            born_host = put_checks.born_host_bytes(batch.born_host)
            sys_flag = batch.sys_flag | self._host_flags(born_host)
            topic = put_checks.topic_bytes(batch.topic)
            body = put_checks.body_of(batch.body)
            cluster = batch.properties.get("CLUSTER")
            cluster_bytes = put_checks.utf8("CLUSTER property", cluster) if cluster else None
            # Each record: the fixed fields and hosts, then the topic with its length byte and
            # the properties' length; bodies and properties come from the batch.
            overhead = self._record_total(1 + len(topic) + 2, len(born_host))
            count, batch_total = batch_layout(body, cluster_bytes, overhead)
        except PutMessageError:
            raise
        except Exception as exc:
            raise MessageIllegalError(f"the batch cannot be encoded: {exc}") from exc
        self._check_fits(batch_total, "a batch")
        host = self.store_host_bytes
        ids: list[str] = []

        def write(target, pos: int, physical: int, queue_offset: int, store_ts: int) -> list:
            entries, msg_ids = encode_batch_into(
                target, pos, body, cluster_bytes, topic, batch.topic, batch.queue_id,
                queue_offset, physical, sys_flag, batch.born_timestamp, born_host, store_ts,
                host, batch.reconsume_times)
            ids.extend(msg_ids)
            return entries

        with self.put_lock:
            begin = time.monotonic()
            self.begin_time_in_lock = begin
            try:
                store_ts, first_offset, queue_offset = self._append_locked(
                    batch_total, write, batch.topic, batch.queue_id, True)
            finally:
                self.begin_time_in_lock = 0.0
            elapsed = time.monotonic() - begin
        self._notify_append()
        batch.store_timestamp = store_ts
        return AppendMessageResult(
            first_offset, batch_total, store_ts, queue_offset, count, ids, batch.topic,
            batch.queue_id, elapsed * 1000,
        )

    def _append_locked(
        self, total: int, write: Callable[..., list], topic: str, queue_id: int, advances: bool,
    ) -> tuple[int, int, int]:
        """Write ``total`` bytes of records with ``write(buffer, position, physical offset,
        first queue offset, store time)``, which encodes them into the staging buffer and
        returns their entries for dispatch; the bytes then go to the file in one write.
        Returns (store time, first offset, first queue offset).

        Under the put lock. The records become visible in one step at the end (the write
        position moves last); until then readers, dispatch, the commit service and slaves stop
        short of them. Whatever raises before that step is undone: the queue offset, the
        entries for dispatch, and the bytes, zeroed so that a crash right after cannot make
        recovery take a whole but unacknowledged record for a good one.
        """
        key = (topic, queue_id)
        try:  # nothing to undo yet (ending a full file with a blank is a step of its own)
            store_ts = int(time.time() * 1000)
            mapped_file = self._writable_file(total)
            start = mapped_file.wrote_position
            base = mapped_file.file_from_offset
            previous = self.topic_queue_table.get(key)
        except PutMessageError:
            raise
        except Exception as exc:
            raise self._refusal(exc) from exc
        queue_offset = (previous or 0) if advances else 0
        previous_ts = mapped_file.store_timestamp
        claimed = 0
        try:
            mapped_file.ensure_allocated(start + total)  # ENOSPC here, not SIGBUS while encoding
            claimed = total
            if self.page_warmer is not None:
                mapped_file.claim_early(start + total)
                self.page_warmer.after_claim(mapped_file, start + total)
            staging = self._staging(total)
            entries = write(staging, 0, base + start, queue_offset, store_ts)
            mapped_file.write_at(start, staging, total)
            if advances:
                self.topic_queue_table[key] = queue_offset + len(entries)
            self.appended.extend(entries)
            mapped_file.store_timestamp = store_ts
            mapped_file.wrote_position = start + total  # the records are in: visible from here on
        except BaseException as exc:
            self._roll_back(mapped_file, start, claimed, key, previous, advances)
            mapped_file.store_timestamp = previous_ts
            if isinstance(exc, PutMessageError) or not isinstance(exc, Exception):
                raise
            raise self._refusal(exc) from exc
        return store_ts, base + start, queue_offset

    def _roll_back(
        self, mapped_file: MappedFile, start: int, claimed: int, key: tuple[str, int],
        previous: int | None, advances: bool,
    ) -> None:
        """Undo a put that failed before its write position moved (see ``_append_locked``)."""
        first = mapped_file.file_from_offset + start
        appended = self.appended
        # Ours are the newest entries, from ``first`` on (however many an interrupted extend
        # left); dispatch only takes readable ones from the other end, so it never races us here.
        while appended:
            try:
                if appended[-1][0] < first:
                    break
                appended.pop()
            except IndexError:
                break
        if advances:
            if previous is None:
                self.topic_queue_table.pop(key, None)
            else:
                self.topic_queue_table[key] = previous
        mapped_file.wrote_position = start
        if claimed:  # only bytes whose blocks are claimed (in case the write went halfway)
            mapped_file.write_at(start, bytes(claimed), claimed)

    def _refusal(self, exc: Exception) -> PutMessageError:
        """The typed refusal for what made a put fail under the lock (already rolled back)."""
        if is_disk_error(exc):
            return DiskNotWritableError(
                f"the CommitLog cannot take the message: {describe_os_error(exc)}; "
                "writes are refused until space is freed or the disk is writable again"
            )
        due, suppressed = self._failures.should_log("append")
        if due:
            log.error("a CommitLog append failed and was rolled back (%d like it since the last "
                      "line)", suppressed + 1, exc_info=exc)
        return AppendMessageError(
            f"the CommitLog append failed and was rolled back: {type(exc).__name__}: {exc}"
        )

    def _notify_append(self) -> None:
        """Wake dispatch. The put has succeeded whatever this does: dispatch also looks on its
        own every second, so a failing hook delays the message, it does not lose it."""
        hook = self.on_append
        if hook is None:
            return
        try:
            hook()
        except Exception as exc:
            self._append_hook_failed(exc)

    def _append_hook_failed(self, exc: Exception) -> None:
        """Log a failing ``on_append`` (now and then); the compiled put calls this too."""
        due, _ = self._failures.should_log("on_append")
        if due:
            log.error("waking dispatch after a put failed; it catches up on its own",
                      exc_info=exc)

    def _record_total(self, tail_length: int, born_host_length: int) -> int:
        store = 20 if self.store_host_v6 else 8
        # 48 fixed head bytes + born host + store time 8 + store host + 16 (reconsume, prepared
        # tx offset, body length) + the tail (body, topic and properties with their lengths)
        return 72 + born_host_length + store + tail_length

    def _writable_file(self, total: int) -> MappedFile:
        """The file to write ``total`` bytes into, ending the current one with a blank if needed."""
        queue = self.mapped_file_queue
        try:
            mapped_file = queue.get_last_mapped_file_or_create(0)
            if total + END_FILE_MIN_BLANK_LENGTH > mapped_file.remaining():
                self._end_file(mapped_file)
                mapped_file = queue.get_last_mapped_file_or_create(0)
        except PutMessageError:
            raise
        except Exception as exc:
            if is_disk_error(exc):
                raise DiskNotWritableError(
                    f"the CommitLog cannot roll to its next file: {describe_os_error(exc)}; "
                    "writes are refused until space is freed or the disk is writable again"
                ) from exc
            if isinstance(exc, OSError | StoreError):
                raise CreateMappedFileError(f"cannot create the next CommitLog file: {exc}") from exc
            raise self._refusal(exc) from exc
        return mapped_file

    def _end_file(self, mapped_file: MappedFile) -> None:
        """End a file with a blank record. It is a whole record of its own: should the put that
        needed the room fail after it (the next file cannot be created), the file stays ended,
        as RocketMQ's does, and the next put goes to the next file."""
        pos = mapped_file.wrote_position
        max_blank = mapped_file.remaining()
        mapped_file.ensure_allocated(pos + END_FILE_MIN_BLANK_LENGTH)
        mapped_file.write_at(pos, encode_blank(max_blank), END_FILE_MIN_BLANK_LENGTH)
        mapped_file.skip_to_end()  # the blank is in: visible from here on
        self.appended.append((mapped_file.file_from_offset + pos, max_blank, 0, 0, None, 0, 0, 0, ""))

    # -- reads ---------------------------------------------------------------------------------
    def get_data(self, offset: int, max_size: int | None = None) -> tuple[bytes, int]:
        """Bytes from ``offset`` to the readable end of the file holding it, at most ``max_size``
        of them (HA transfers 32 KiB at a time; dispatch reads a window)."""
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            raise OffsetOutOfRangeError(f"no CommitLog file holds offset {offset}")
        position = offset - mapped_file.file_from_offset
        if max_size is None:
            return mapped_file.read(position), offset
        size = max(0, min(max_size, mapped_file.read_position - position))
        return mapped_file.read(position, size), offset

    def get_message(self, offset: int, size: int) -> bytes:
        """``size`` bytes of the record at ``offset``."""
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            raise OffsetOutOfRangeError(f"no CommitLog file holds offset {offset}")
        return mapped_file.read(offset - mapped_file.file_from_offset, size)

    def pickup_store_timestamp(self, offset: int, size: int) -> int | None:
        """Store time of the record at ``offset``, or None if its file is gone."""
        if offset < self.get_min_offset():
            return None
        try:
            head = self.get_message(offset, min(size, 80))
        except OffsetOutOfRangeError:
            return None
        (sys_flag,) = _I32.unpack_from(head, 36)
        born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
        (store_ts,) = _I64.unpack_from(head, 48 + born)
        return store_ts

    # -- raw appends (a slave applying what its master sent) -----------------------------------
    def append_data(self, start_offset: int, data: bytes) -> None:
        """Append replicated bytes at ``start_offset``, which must be the current end."""
        with self.put_lock:
            queue = self.mapped_file_queue
            last = queue.get_last_mapped_file()
            if last is None and start_offset % queue.mapped_file_size:
                # (a master starts a new slave at one of its files' start: a file made here for
                # any other offset would stay, and the slave would report it on every connect)
                raise StoreError(f"replicated data for an empty CommitLog starts at "
                                 f"{start_offset}, not at the start of a file")
            if last is None or last.is_full():
                mapped_file = queue.get_last_mapped_file_or_create(start_offset)
            else:
                mapped_file = last
            end = mapped_file.file_from_offset + mapped_file.wrote_position
            if end != start_offset:
                raise StoreError(
                    f"replicated data starts at {start_offset} but the CommitLog ends at {end}"
                )
            if len(data) > mapped_file.remaining():
                raise StoreError(
                    f"replicated chunk of {len(data)} bytes crosses the end of {mapped_file.file_name}"
                )
            mapped_file.append(data)
        if self.on_append is not None:
            self.on_append()

    def note_store_timestamp(self, offset: int, store_timestamp: int) -> None:
        """A record in the file holding ``offset``, written there already, was stored at
        ``store_timestamp``: what dispatch learns of a slave's replicated bytes, which carry no
        time of their own to the file. The flush's checkpoint time moves on with it, so that a
        slave's recovery after a crash starts near its end, not at its first file."""
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is not None and store_timestamp > mapped_file.store_timestamp:
            mapped_file.store_timestamp = store_timestamp

    # -- queue offsets ---------------------------------------------------------------------------
    def set_topic_queue_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.topic_queue_table[(topic, queue_id)] = offset

    def remove_queue_from_topic_queue_table(self, topic: str, queue_id: int) -> None:
        self.topic_queue_table.pop((topic, queue_id), None)

