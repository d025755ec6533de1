"""The CommitLog record codec: RocketMQ's stored message layout, byte for byte.

One record (big-endian; hosts are 4+4 bytes, or 16+4 when the sysFlag's V6 bit is set)::

    | TOTALSIZE i32 | MAGICCODE u32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 |
    | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 8/20 | STORETIMESTAMP i64 |
    | STOREHOST 8/20 | RECONSUMETIMES i32 | PREPARED TX OFFSET i64 | BODYLEN i32 | BODY |
    | TOPICLEN i8 (v1) or i16 (v2) | TOPIC | PROPERTIESLEN i16 | PROPERTIES |

A blank end-of-file record is ``| maxBlank i32 | 0xCBD43194 |`` followed by whatever was in the
file. BODYCRC is zlib's CRC32 with the top bit cleared. v2 magic (2-byte topic length) is read,
never written: RocketMQ 4.x writes v1 only.

House rule: decoding never returns half a record. Bytes that end inside a record raise
:class:`TornTailError`; a record that is whole but wrong raises :class:`CorruptRecordError`.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from common import speedups
from storage.errors import CorruptRecordError, MessageIllegalError, OffsetOutOfRangeError, TornTailError
from storage.message import (
    BORNHOST_V6_FLAG,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    STOREHOSTADDRESS_V6_FLAG,
    property_from_string,
    string_to_properties,
)
from storage.message_id import bytes_to_host, create_message_id

MESSAGE_MAGIC_CODE: Final = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = 0xDAA320AB
BLANK_MAGIC_CODE: Final = 0xCBD43194
# The smallest message record: IPv4 hosts, no body, topic or properties.
MIN_MESSAGE_SIZE: Final = 91
# A record may end no closer than this to the end of a file: room for the blank marker.
END_FILE_MIN_BLANK_LENGTH: Final = 8

# The 88-byte prefix when both hosts are IPv4: the put path packs it in one call.
PREFIX_V4 = struct.Struct(">iIiiiqqiq4siq4siiqi")
# The first 48 bytes, common to every host variant: TOTALSIZE .. BORNTIMESTAMP.
HEAD = struct.Struct(">iIiiiqqiq")
BLANK = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_B = struct.Struct(">b")
_TAIL_FIXED = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED TX OFFSET, BODYLEN

MAX_TOPIC_LENGTH_V1: Final = 127
MAX_PROPERTIES_LENGTH: Final = 32767


def body_crc_pure(body: bytes) -> int:
    """RocketMQ's ``UtilAll.crc32``: zlib CRC32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


# The compiled one folds with carry-less multiplication where the CPU can (common/_crc32.c):
# ~4x zlib's speed, for recovery's check of every record and the pure paths' puts alike.
body_crc = body_crc_pure if speedups.store_core is None else speedups.store_core.body_crc


def record_size(
    body_length: int, topic_length: int, properties_length: int, sys_flag: int = 0, v2: bool = False
) -> int:
    """TOTALSIZE of a record with these field lengths (``calMsgLength``)."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    topic_prefix = 2 if v2 else 1
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
        + 4 + body_length + topic_prefix + topic_length + 2 + properties_length
    )


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """One v1 record. Hosts are their 8- or 20-byte forms; sysFlag must carry the V6 bits."""
    if len(topic) > MAX_TOPIC_LENGTH_V1:
        raise MessageIllegalError(f"topic is {len(topic)} bytes, more than 127")
    if len(properties) > MAX_PROPERTIES_LENGTH:
        raise MessageIllegalError(f"properties are {len(properties)} bytes, more than 32767")
    crc = body_crc(body) if crc is None else crc
    body_length = len(body)
    if len(born_host) == 8 and len(store_host) == 8:
        total = 91 + body_length + len(topic) + len(properties)
        prefix = PREFIX_V4.pack(
            total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset, physical_offset,
            sys_flag, born_timestamp, born_host[:4], _I32.unpack(born_host[4:])[0],
            store_timestamp, store_host[:4], _I32.unpack(store_host[4:])[0],
            reconsume_times, prepared_transaction_offset, body_length,
        )
        return b"".join(
            (prefix, body, len(topic).to_bytes(1, "big"), topic,
             len(properties).to_bytes(2, "big"), properties)
        )
    total = record_size(body_length, len(topic), len(properties), sys_flag)
    return b"".join(
        (
            HEAD.pack(total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset,
                      physical_offset, sys_flag, born_timestamp),
            born_host,
            _I64.pack(store_timestamp),
            store_host,
            struct.pack(">iqi", reconsume_times, prepared_transaction_offset, body_length),
            body,
            len(topic).to_bytes(1, "big"),
            topic,
            len(properties).to_bytes(2, "big"),
            properties,
        )
    )


def encode_record_into_pure(
    target, pos: int, crc: int, queue_id: int, flag: int, queue_offset: int, physical_offset: int,
    sys_flag: int, born_timestamp: int, born_host: bytes, store_timestamp: int, store_host: bytes,
    reconsume_times: int, prepared_transaction_offset: int, body, topic: bytes, properties: bytes,
) -> int:
    """Write one v1 record into the writable buffer ``target`` (a mapping, a write buffer) at
    ``pos``, straight from its fields: no intermediate bytes. Returns its TOTALSIZE.

    The put path's encoder (``encode_record`` builds the same bytes as a value, for tests and
    tools). Hosts are their 8- or 20-byte forms; sysFlag must carry the V6 bits."""
    born_len, store_len = len(born_host), len(store_host)
    if born_len not in (8, 20) or store_len not in (8, 20):
        raise ValueError("a host is 8 or 20 bytes")
    if len(topic) > MAX_TOPIC_LENGTH_V1 or len(properties) > MAX_PROPERTIES_LENGTH:
        raise ValueError("the topic or the properties are too long for a record")
    body_len = len(body)
    total = 72 + born_len + store_len + body_len + 1 + len(topic) + 2 + len(properties)
    if pos < 0 or total > len(target) - pos:
        raise ValueError("the record does not fit the buffer")
    if born_len == 8 and store_len == 8:
        PREFIX_V4.pack_into(
            target, pos, total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset,
            physical_offset, sys_flag, born_timestamp, born_host[:4],
            _I32.unpack(born_host[4:])[0], store_timestamp, store_host[:4],
            _I32.unpack(store_host[4:])[0], reconsume_times, prepared_transaction_offset, body_len,
        )
        p = pos + 88
    else:
        HEAD.pack_into(target, pos, total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset,
                       physical_offset, sys_flag, born_timestamp)
        p = pos + 48
        target[p : p + born_len] = born_host
        p += born_len
        _I64.pack_into(target, p, store_timestamp)
        p += 8
        target[p : p + store_len] = store_host
        p += store_len
        _TAIL_FIXED.pack_into(target, p, reconsume_times, prepared_transaction_offset, body_len)
        p += 16
    target[p : p + body_len] = body
    p += body_len
    target[p] = len(topic)
    target[p + 1 : p + 1 + len(topic)] = topic
    p += 1 + len(topic)
    _U16.pack_into(target, p, len(properties))
    target[p + 2 : p + 2 + len(properties)] = properties
    return total


# The compiled twin when it is built (common/speedups.py): the same bytes, the same refusals.
encode_record_into = (encode_record_into_pure if speedups.store_core is None
                      else speedups.store_core.encode_record_into)


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte header of a blank end-of-file record that fills ``max_blank`` bytes."""
    return BLANK.pack(max_blank, BLANK_MAGIC_CODE)


@dataclass(slots=True, frozen=True)
class BlankRecord:
    """The end-of-file filler: the rest of this file holds no records."""

    offset: int
    size: int


class _EndOfData:
    """Zero bytes where a record would start: the writer has not been here yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END_OF_DATA"


END_OF_DATA: Final = _EndOfData()


@dataclass(slots=True)
class MessageRecord:
    """A decoded CommitLog record (RocketMQ's ``MessageExt``)."""

    total_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host_raw: bytes
    store_timestamp: int
    store_host_raw: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties_string: str

    @property
    def born_host(self) -> tuple[str, int]:
        return bytes_to_host(self.born_host_raw)

    @property
    def store_host(self) -> tuple[str, int]:
        return bytes_to_host(self.store_host_raw)

    @property
    def msg_id(self) -> str:
        """The offset msgId: store host + physical offset."""
        return create_message_id(self.store_host_raw, self.commit_log_offset)

    @property
    def properties(self) -> dict[str, str]:
        return string_to_properties(self.properties_string)

    @property
    def tags(self) -> str | None:
        return property_from_string(self.properties_string, PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return property_from_string(self.properties_string, PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return property_from_string(self.properties_string, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def client_msg_id(self) -> str:
        """What clients call the msgId: UNIQ_KEY when present, else the offset msgId."""
        return self.uniq_key or self.msg_id


def message_size_from_head(head: bytes, offset: int, max_message_size: int) -> int:
    """The total size in a message record's first 8 bytes, checked against the magic code and
    the largest record a store with ``max_message_size`` writes (raises OffsetOutOfRangeError:
    no message starts at ``offset``)."""
    size, magic = BLANK.unpack_from(head, 0)
    largest = max_message_size + MAX_TOPIC_LENGTH_V1 + MAX_PROPERTIES_LENGTH + 256  # + hosts etc.
    if (magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
            or not MIN_MESSAGE_SIZE <= size <= largest):
        raise OffsetOutOfRangeError(f"no message starts at offset {offset}")
    return size


def decode_record(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    pos: int = 0,
    *,
    check_crc: bool = True,
    read_body: bool = True,
    base_offset: int = 0,
) -> MessageRecord | BlankRecord | _EndOfData:
    """Decode the record that starts at ``buf[pos]``.

    ``base_offset`` is the physical offset of ``buf[0]``, used only in error messages.
    Returns :data:`END_OF_DATA` for zero bytes where a record would start.
    """
    if _decode_fields is not None:
        fields = _decode_fields(buf, pos, read_body or check_crc)
        if fields is not None and (not check_crc or body_crc(fields[14]) == fields[2]):
            record = MessageRecord(*fields)
            if not read_body:
                record.body = b""
            return record
        # Anything else (a marker, a bad record, a CRC mismatch): the reference says what it is.
    return decode_record_pure(buf, pos, check_crc=check_crc, read_body=read_body,
                              base_offset=base_offset)


def decode_record_pure(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    pos: int = 0,
    *,
    check_crc: bool = True,
    read_body: bool = True,
    base_offset: int = 0,
) -> MessageRecord | BlankRecord | _EndOfData:
    """:func:`decode_record` in Python: the reference the compiled decoder agrees with."""
    limit = len(buf)
    where = base_offset + pos
    if pos + 8 > limit:
        if any(buf[pos:limit]):
            raise TornTailError("record header cut off", where)
        return END_OF_DATA
    total, magic = BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total < 8:
            raise CorruptRecordError(f"blank record of impossible size {total}", where)
        return BlankRecord(where, total)
    if total == 0 and magic == 0:
        return END_OF_DATA
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise CorruptRecordError(f"bad magic code 0x{magic:08X}", where)
    if total < 91:
        raise CorruptRecordError(f"record size {total} is too small", where)
    if pos + total > limit:
        raise TornTailError(f"record of {total} bytes runs past the written data", where)
    (
        _,
        _,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
    ) = HEAD.unpack_from(buf, pos)
    end = pos + total
    p = pos + 48
    born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store_len = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    # The fixed fields, then at least a topic length and a properties length must fit.
    if p + born_len + 8 + store_len + 16 + 3 > end:
        raise CorruptRecordError(f"record size {total} is too small for its host fields", where)
    born_raw = bytes(buf[p : p + born_len])
    p += born_len
    (store_ts,) = _I64.unpack_from(buf, p)
    p += 8
    store_raw = bytes(buf[p : p + store_len])
    p += store_len
    reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p)
    p += 16
    topic_prefix = 1 if magic == MESSAGE_MAGIC_CODE else 2
    if body_len < 0 or p + body_len + topic_prefix + 2 > end:
        raise CorruptRecordError(f"body length {body_len} does not fit the record", where)
    body = bytes(buf[p : p + body_len]) if (read_body or check_crc) else b""
    p += body_len
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = buf[p]
        p += 1
        if topic_len > 127:
            raise CorruptRecordError(f"topic length {topic_len} is negative", where)
    else:
        (topic_len,) = _U16.unpack_from(buf, p)
        p += 2
    if p + topic_len + 2 > end:
        raise CorruptRecordError(f"topic length {topic_len} does not fit the record", where)
    topic_raw = bytes(buf[p : p + topic_len])
    p += topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len > end:
        raise CorruptRecordError(f"properties length {props_len} does not fit the record", where)
    props_raw = bytes(buf[p : p + props_len])
    p += props_len
    if p - pos != total:
        raise CorruptRecordError(
            f"TOTALSIZE {total} does not match the field lengths ({p - pos})", where
        )
    if check_crc and body_crc(body) != crc:
        raise CorruptRecordError("body CRC mismatch", where)
    try:
        topic = topic_raw.decode("utf-8")
        props = props_raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"topic or properties are not UTF-8 ({exc.reason})", where) from exc
    return MessageRecord(
        total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
        born_raw, store_ts, store_raw, reconsume, prepared, body if read_body else b"", topic,
        props,
    )


_decode_fields = None if speedups.store_core is None else speedups.store_core.decode_record_fields


def iter_records(buf: bytes | bytearray | memoryview, *, check_crc: bool = False):
    """Records back to back, as in a pull or query body; stops at the first that won't decode."""
    pos = 0
    while pos < len(buf):
        try:
            record = decode_record(buf, pos, check_crc=check_crc)
        except (TornTailError, CorruptRecordError):
            return
        if not isinstance(record, MessageRecord):
            return
        yield record
        pos += record.total_size


# --- batch bodies (SEND_BATCH_MESSAGE, MessageDecoder.encodeMessages) -----------------------
# | TOTALSIZE i32 | MAGICCODE i32 (0) | BODYCRC i32 (0) | FLAG i32 | BODYLEN i32 | BODY |
# | PROPERTIESLEN i16 | PROPERTIES |
BATCH_ENTRY_HEAD = struct.Struct(">iiiii")


@dataclass(slots=True, frozen=True)
class BatchEntry:
    flag: int
    body: bytes
    properties_string: str


def encode_batch_body(entries: list[BatchEntry]) -> bytes:
    """The body of a SEND_BATCH_MESSAGE request."""
    return encode_batch_parts([(e.flag, e.body, e.properties_string) for e in entries])


def encode_batch_parts(entries: Iterable[tuple[int, bytes, str]]) -> bytes:
    """:func:`encode_batch_body` of (flag, body, properties string) triples, with no object per
    message (a producer's batch path)."""
    parts: list[bytes] = []
    append = parts.append
    pack = BATCH_ENTRY_HEAD.pack
    for flag, body, properties in entries:
        props = properties.encode("utf-8")
        body_length = len(body)
        append(pack(22 + body_length + len(props), 0, 0, flag, body_length))
        append(body)
        append(len(props).to_bytes(2, "big"))
        append(props)
    return b"".join(parts)


def decode_batch_body(body: bytes) -> list[BatchEntry]:
    """Split a batch body into its messages; raises MessageIllegalError when malformed."""
    entries = []
    pos = 0
    while pos < len(body):
        if pos + 20 > len(body):
            raise MessageIllegalError("batch body ends inside an entry header")
        size, _, _, flag, body_len = BATCH_ENTRY_HEAD.unpack_from(body, pos)
        if size < 22 or pos + size > len(body) or body_len < 0 or 20 + body_len + 2 > size:
            raise MessageIllegalError(f"batch entry at byte {pos} has inconsistent sizes")
        p = pos + 20
        inner_body = body[p : p + body_len]
        p += body_len
        (props_len,) = _I16.unpack_from(body, p)
        p += 2
        if props_len < 0 or p + props_len != pos + size:
            raise MessageIllegalError(f"batch entry at byte {pos} has inconsistent sizes")
        try:
            props = body[p : p + props_len].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageIllegalError(f"batch entry at byte {pos}: properties not UTF-8") from exc
        entries.append(BatchEntry(flag, inner_body, props))
        pos += size
    if not entries:
        raise MessageIllegalError("batch body holds no message")
    return entries
