"""CommitLog: every message of every topic, appended under one put lock.

The put path (mirrors ``CommitLog.putMessage`` and ``DefaultAppendMessageCallback.doAppend``):

1. outside the lock: delay-level rewrite to SCHEDULE_TOPIC_XXXX, body CRC, the record's tail
   bytes (body, topic, properties);
2. inside the lock: store timestamp (so store times never decrease along the log), the queue
   offset for (topic, queueId), the physical offset; a record that does not fit (plus the 8-byte
   blank marker) ends the file with a blank record and goes to the next file;
3. outside the lock: msgId, and the caller's flush/replication wait.

Prepared and rollback transaction records get queue offset 0 and do not advance the queue.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field

from storage.config import MessageStoreConfig
from storage.errors import (
    CreateMappedFileError,
    MessageIllegalError,
    OffsetOutOfRangeError,
    StoreError,
)
from storage.mapped_file import MappedFile, MappedFileQueue, TransientStorePool
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
)
from storage.message_id import create_message_id, host_to_bytes, is_ipv6
from storage.record import (
    END_FILE_MIN_BLANK_LENGTH,
    HEAD,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    PREFIX_V4,
    decode_batch_body,
    encode_blank,
)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAIL_V6 = struct.Struct(">iqi")


@dataclass(slots=True)
class AppendMessageResult:
    """Where a put landed (RocketMQ's ``AppendMessageResult``); batches list every msgId."""

    wrote_offset: int
    wrote_bytes: int
    store_timestamp: int
    logics_offset: int
    msg_num: int = 1
    msg_ids: list[str] = field(default_factory=list)
    topic: str = ""
    queue_id: int = 0
    page_cache_rt_ms: float = 0.0

    @property
    def msg_id(self) -> str:
        return ",".join(self.msg_ids)

    @property
    def next_offset(self) -> int:
        """End of the written bytes: what a flush or a slave must reach."""
        return self.wrote_offset + self.wrote_bytes


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
        self.begin_time_in_lock = 0.0
        self.store_host = store_host
        self.store_host_bytes = host_to_bytes(*store_host)
        self.store_host_v6 = is_ipv6(store_host[0])
        self.max_delay_level = len(config.delay_levels_ms())
        # Records appended since dispatch last looked, in log order, so dispatch need not
        # decode what the put path already knows: (offset, size, store time, queue offset,
        # topic, queue id, sysFlag, prepared tx offset, properties); topic None marks a blank.
        # Bounded: if dispatch falls behind, older entries go and it decodes the log instead.
        self.appended: deque = deque(maxlen=65536)
        self.on_append = None  # set by the store: wakes dispatch

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        self.mapped_file_queue.load()

    def shutdown(self) -> None:
        self.mapped_file_queue.flush_all()
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
    def _rewrite_delay(self, msg: MessageExtBrokerInner) -> None:
        tran_type = msg.sys_flag & 0xC
        if tran_type not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return
        level = msg.delay_time_level
        if level <= 0:
            return
        if level > self.max_delay_level:
            level = self.max_delay_level
            msg.put_property(PROPERTY_DELAY_TIME_LEVEL, str(level))
        msg.put_property(PROPERTY_REAL_TOPIC, msg.topic)
        msg.put_property(PROPERTY_REAL_QUEUE_ID, str(msg.queue_id))
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1

    def _host_flags(self, born_host: bytes) -> int:
        flags = 0
        if len(born_host) == 20:
            flags |= BORNHOST_V6_FLAG
        if self.store_host_v6:
            flags |= STOREHOSTADDRESS_V6_FLAG
        return flags

    def _encode_tail(self, body: bytes, topic: bytes, props: bytes) -> bytes:
        if len(topic) > MAX_TOPIC_LENGTH_V1:
            raise MessageIllegalError(f"topic is {len(topic)} bytes long; the limit is 127")
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise MessageIllegalError(
                f"properties are {len(props)} bytes long; the limit is {MAX_PROPERTIES_LENGTH}"
            )
        return b"".join((body, bytes((len(topic),)), topic, len(props).to_bytes(2, "big"), props))

    def put_message(self, msg: MessageExtBrokerInner) -> AppendMessageResult:
        """Append one message; raises PutMessageError subclasses when refused."""
        self._rewrite_delay(msg)
        tran_type = msg.sys_flag & 0xC
        born_host = host_to_bytes(*msg.born_host)
        msg.sys_flag |= self._host_flags(born_host)
        body = msg.body
        crc = zlib.crc32(body) & 0x7FFFFFFF
        tail = self._encode_tail(body, msg.topic.encode(), msg.properties_string.encode())
        fields = (crc, msg.queue_id, msg.flag, msg.sys_flag, msg.born_timestamp, born_host,
                  msg.reconsume_times, msg.prepared_transaction_offset, len(body))
        key = (msg.topic, msg.queue_id)
        advances = tran_type not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
        total = self._record_total(len(tail), len(born_host))
        if total + END_FILE_MIN_BLANK_LENGTH > self.mapped_file_size:
            raise MessageIllegalError(
                f"a record of {total} bytes cannot fit one CommitLog file of {self.mapped_file_size} bytes"
            )
        with self.put_lock:
            begin = time.monotonic()
            self.begin_time_in_lock = begin
            store_ts = int(time.time() * 1000)
            mapped_file = self._writable_file(total)
            wrote_offset = mapped_file.file_from_offset + mapped_file.wrote_position
            queue_offset = self.topic_queue_table.get(key, 0) if advances else 0
            self._write(mapped_file, total, fields, queue_offset, wrote_offset, store_ts, tail)
            if advances:
                self.topic_queue_table[key] = queue_offset + 1
            mapped_file.store_timestamp = store_ts
            self.appended.append((wrote_offset, total, store_ts, queue_offset, msg.topic,
                                  msg.queue_id, msg.sys_flag, msg.prepared_transaction_offset,
                                  msg.properties_string))
            self.begin_time_in_lock = 0.0
            elapsed = time.monotonic() - begin
        if self.on_append is not None:
            self.on_append()
        msg.store_timestamp = store_ts
        msg.queue_offset = queue_offset
        msg.commit_log_offset = wrote_offset
        return AppendMessageResult(
            wrote_offset, total, store_ts, queue_offset, 1,
            [create_message_id(self.store_host_bytes, wrote_offset)],
            msg.topic, msg.queue_id, elapsed * 1000,
        )

    def put_messages(self, batch: MessageExtBatch) -> AppendMessageResult:
        """Append a batch: one record per inner message, consecutive queue offsets, one file."""
        entries = decode_batch_body(batch.body)
        born_host = host_to_bytes(*batch.born_host)
        sys_flag = batch.sys_flag | self._host_flags(born_host)
        topic = batch.topic.encode()
        cluster = batch.properties.get("CLUSTER")
        records = []
        for entry in entries:
            props = entry.properties_string
            if cluster and "CLUSTER\x01" not in props:
                if props and not props.endswith("\x02"):
                    props += "\x02"
                props += f"CLUSTER\x01{cluster}\x02"
            tail = self._encode_tail(entry.body, topic, props.encode())
            crc = zlib.crc32(entry.body) & 0x7FFFFFFF
            fields = (crc, batch.queue_id, entry.flag, sys_flag, batch.born_timestamp, born_host,
                      batch.reconsume_times, 0, len(entry.body))
            records.append((self._record_total(len(tail), len(born_host)), fields, tail, props))
        batch_total = sum(r[0] for r in records)
        if batch_total + END_FILE_MIN_BLANK_LENGTH > self.mapped_file_size:
            raise MessageIllegalError(
                f"batch of {batch_total} bytes cannot fit one CommitLog file of "
                f"{self.mapped_file_size} bytes"
            )
        key = (batch.topic, batch.queue_id)
        with self.put_lock:
            begin = time.monotonic()
            self.begin_time_in_lock = begin
            store_ts = int(time.time() * 1000)
            mapped_file = self._writable_file(batch_total)
            first_offset = mapped_file.file_from_offset + mapped_file.wrote_position
            queue_offset = self.topic_queue_table.get(key, 0)
            wrote_offset = first_offset
            offsets = []
            for index, (total, fields, tail, props) in enumerate(records):
                self._write(mapped_file, total, fields, queue_offset + index, wrote_offset,
                            store_ts, tail)
                offsets.append(wrote_offset)
                self.appended.append((wrote_offset, total, store_ts, queue_offset + index,
                                      batch.topic, batch.queue_id, sys_flag, 0, props))
                wrote_offset += total
            self.topic_queue_table[key] = queue_offset + len(records)
            mapped_file.store_timestamp = store_ts
            self.begin_time_in_lock = 0.0
            elapsed = time.monotonic() - begin
        if self.on_append is not None:
            self.on_append()
        batch.store_timestamp = store_ts
        host = self.store_host_bytes
        return AppendMessageResult(
            first_offset, batch_total, store_ts, queue_offset, len(records),
            [create_message_id(host, o) for o in offsets], batch.topic, batch.queue_id,
            elapsed * 1000,
        )

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
                blank_at = mapped_file.file_from_offset + mapped_file.wrote_position
                max_blank = mapped_file.remaining()
                if mapped_file.write_buffer is not None:
                    mapped_file.write_buffer[mapped_file.wrote_position:
                                             mapped_file.wrote_position + 8] = encode_blank(max_blank)
                else:
                    mapped_file.mm[mapped_file.wrote_position:
                                   mapped_file.wrote_position + 8] = encode_blank(max_blank)
                mapped_file.skip_to_end()
                self.appended.append((blank_at, max_blank, 0, 0, None, 0, 0, 0, ""))
                mapped_file = queue.get_last_mapped_file_or_create(0)
        except OSError as exc:
            raise CreateMappedFileError(f"cannot create the next CommitLog file: {exc}") from exc
        return mapped_file

    def _write(
        self, mapped_file: MappedFile, total: int, fields: tuple, queue_offset: int,
        wrote_offset: int, store_ts: int, tail: bytes,
    ) -> None:
        crc, queue_id, flag, sys_flag, born_ts, born_host, reconsume, prepared, body_len = fields
        target = mapped_file.write_buffer if mapped_file.write_buffer is not None else mapped_file.mm
        pos = mapped_file.wrote_position
        if len(born_host) == 8 and not self.store_host_v6:
            PREFIX_V4.pack_into(
                target, pos, total, 0xDAA320A7, crc, queue_id, flag, queue_offset, wrote_offset,
                sys_flag, born_ts, born_host[:4], _I32.unpack(born_host[4:])[0], store_ts,
                self.store_host_bytes[:4], _I32.unpack(self.store_host_bytes[4:])[0],
                reconsume, prepared, body_len,
            )
            start = pos + 88
        else:
            HEAD.pack_into(target, pos, total, 0xDAA320A7, crc, queue_id, flag, queue_offset,
                           wrote_offset, sys_flag, born_ts)
            p = pos + 48
            target[p : p + len(born_host)] = born_host
            p += len(born_host)
            _I64.pack_into(target, p, store_ts)
            p += 8
            host = self.store_host_bytes
            target[p : p + len(host)] = host
            p += len(host)
            _TAIL_V6.pack_into(target, p, reconsume, prepared, body_len)
            start = p + 16
        target[start : start + len(tail)] = tail
        mapped_file.wrote_position = pos + total

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

    # -- queue offsets ---------------------------------------------------------------------------
    def set_topic_queue_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.topic_queue_table[(topic, queue_id)] = offset

    def remove_queue_from_topic_queue_table(self, topic: str, queue_id: int) -> None:
        self.topic_queue_table.pop((topic, queue_id), None)

