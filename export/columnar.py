"""Many records to one Arrow batch at once: columns cut with numpy and pyarrow compute.

Decoding record by record costs ~12 µs of Python per message (docs/benchmarks.md). Here Python
only lists where each record starts. With the compiled core, one call cuts the batch
(common/_record_cut.c: the fixed fields, the message ids, the bodies and property strings
joined into Arrow value buffers, which bodies are text, the hosts); without it, the records'
fixed parts are copied out in one step and their fields read as columns by numpy, the same
columns: that numpy cut is the compiled one's twin. Then the properties are split into the map
column, and searched for TAGS, KEYS and UNIQ_KEY, in one pass (common/_property_split.c;
without the compiled core, by Arrow's string kernels). Records in a form this does not handle
(IPv6 hosts, compressed bodies, an older magic code) send their batch to the record-by-record
:class:`~export.decode.RowBuilder`, which handles everything.

Layout (the IPv4 record, MESSAGE_MAGIC_CODE v1): TOTALSIZE@0, MAGIC@4, BODYCRC@8, QUEUEID@12,
FLAG@16, QUEUEOFFSET@20, PHYSICALOFFSET@28, SYSFLAG@36, BORNTIMESTAMP@40, BORNHOST@48 (ip, port),
STORETIMESTAMP@56, STOREHOST@64, RECONSUMETIMES@72, PREPAREDTRANSACTIONOFFSET@76, BODYLENGTH@84,
BODY@88, then TOPICLENGTH (1 byte), TOPIC, PROPERTIESLENGTH (2 bytes), PROPERTIES.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common import speedups
from export.errors import damaged_record
from export.schema import arrow_schema
from storage.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TIME_RANGE_MS,
)
from storage.record import MESSAGE_MAGIC_CODE

_UNHANDLED_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG | COMPRESSED_FLAG
_BODY = 88
# A byte's two hex digits, as one 16-bit item: one 1-D take a byte (a 2-D row gather of the
# same table took ~10x as long: 115 against 10 µs for a batch of 1,024 message ids).
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint16)
_PICKED = ("UNIQ_KEY", "KEYS", "TAGS")  # the properties with columns of their own
_MSG_ID_BYTES = np.concatenate([np.arange(64, 72), np.arange(28, 36)])  # store host, then offset


@functools.cache
def _schema() -> pa.Schema:
    return arrow_schema()


def _property(properties: pa.MapArray, entry_rows: np.ndarray, name: str) -> pa.Array:
    """One property's value per row (null where absent), picked out of the map column;
    ``entry_rows`` is the row of each map entry."""
    hit = pc.equal(properties.keys, name).to_numpy(zero_copy_only=False)
    rows = entry_rows[hit]
    found = properties.items.filter(pa.array(hit))
    where = np.full(len(properties), -1, np.int64)
    where[rows] = np.arange(len(found))
    return found.take(pa.array(where, mask=where < 0))


class ColumnarDecoder:
    def __init__(self, broker_name: str, topic: str | None = None) -> None:
        self.broker_name = broker_name
        self.topic = topic
        self._hosts: dict[int, str] = {}

    @staticmethod
    def handles(buf: np.ndarray, starts: np.ndarray) -> bool:
        """Whether every record at ``starts`` is in the form this decoder cuts."""
        magic = gather(buf, starts, 4, 4).view(">u4").ravel()
        flags = gather(buf, starts, 36, 4).view(">i4").ravel()
        return bool((magic == MESSAGE_MAGIC_CODE).all() and not (flags & _UNHANDLED_FLAGS).any())

    def decode(self, data, starts: np.ndarray) -> pa.RecordBatch:
        """The records of ``data`` (bytes-like) starting at ``starts``, as one batch."""
        if _cut_records is not None:
            return self._decode_cut(data, starts)
        buf = np.frombuffer(data, np.uint8)
        n = len(starts)
        view = memoryview(data)  # slices of a view copy nothing until joined

        head = gather(buf, starts, 0, _BODY)  # (each record's fixed part: up to the body)

        def fixed(offset: int, width: int, dtype: str) -> np.ndarray:
            field = np.ascontiguousarray(head[:, offset:offset + width])
            return field.view(dtype).ravel().astype("=" + dtype[1:])

        # Each part must lie within its record's TOTALSIZE (and the record within the data):
        # a damaged or hostile record must not hand on the bytes after it as its own.
        record_end = starts + fixed(0, 4, ">i4").astype(np.int64)
        body_len = fixed(84, 4, ">i4").astype(np.int64)
        body_start = starts + _BODY
        topic_at = body_start + body_len
        _within(head, (body_len < 0) | (topic_at + 1 > record_end) | (record_end > len(buf)))
        topic_len = buf[topic_at].astype(np.int64)
        topic_start = topic_at + 1
        props_at = topic_start + topic_len
        _within(head, props_at + 2 > record_end)
        props_len = (buf[props_at].astype(np.int64) << 8) | buf[props_at + 1]
        props_start = props_at + 2
        _within(head, props_start + props_len > record_end)

        body_offsets, body_data = _join(view, body_start, body_len)
        body = pa.Array.from_buffers(pa.binary(), n, [None, body_offsets, body_data])
        topic = self._topic_column(buf, view, topic_start, topic_len)
        props = pa.Array.from_buffers(pa.string(), n, [None, *_join(view, props_start, props_len)])
        props.validate(full=True)  # property strings are UTF-8; refuse to hand on anything else

        properties, (uniq_key, keys, tags) = _properties(props, _PICKED)
        msg_id_raw = np.ascontiguousarray(head[:, _MSG_ID_BYTES])
        msg_id_text = np.take(_HEX, msg_id_raw).view(np.uint8).reshape(n * 32)
        msg_id = pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(np.arange(0, 32 * n + 1, 32, dtype=np.int32)),
                             pa.py_buffer(msg_id_text)])
        ts = _schema().field("storeTimestamp").type
        columns = {
            "topic": topic,
            "brokerName": pa.repeat(pa.scalar(self.broker_name, pa.string()), n),
            "queueId": pa.array(fixed(12, 4, ">i4"), pa.int32()),
            "queueOffset": pa.array(fixed(20, 8, ">i8"), pa.int64()),
            "commitLogOffset": pa.array(fixed(28, 8, ">i8"), pa.int64()),
            "msgId": msg_id,
            "uniqKey": uniq_key,
            "keys": keys,
            "tags": tags,
            "body": body,
            "bodyText": _text(view, body_start, body_len, body_offsets, body_data, n),
            "properties": properties,
            # (a born time is any int64 its producer sent: at the nearest end of what a reader
            # holds, not wrapped around by the * 1000)
            "bornTimestamp": pa.array(np.clip(fixed(40, 8, ">i8"), *TIME_RANGE_MS) * 1000, ts),
            "storeTimestamp": pa.array(np.clip(fixed(56, 8, ">i8"), *TIME_RANGE_MS) * 1000, ts),
            "bornHost": self._host_column(*_packed_hosts(head[:, 48:56])),
            "storeHost": self._host_column(*_packed_hosts(head[:, 64:72])),
            "reconsumeTimes": pa.array(fixed(72, 4, ">i4"), pa.int32()),
            "sysFlag": pa.array(fixed(36, 4, ">i4"), pa.int32()),
        }
        schema = _schema()
        return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)

    def _topic_column(self, buf, view, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """A queue holds one topic: compare the bytes to it rather than cutting n strings."""
        n = len(starts)
        expected = self.topic.encode() if self.topic else b""
        if expected and (lengths == len(expected)).all() and (
                gather(buf, starts, 0, len(expected)) == np.frombuffer(expected, np.uint8)).all():
            return pa.repeat(pa.scalar(self.topic, pa.string()), n)
        return pa.Array.from_buffers(pa.string(), n, [None, *_join(view, starts, lengths)])

    def _decode_cut(self, data, starts: np.ndarray) -> pa.RecordBatch:
        """:meth:`decode` in one compiled pass (common/_record_cut.c): the same batch."""
        n = len(starts)
        cut = _cut_records(data, np.ascontiguousarray(starts, np.int64),
                           self.topic.encode() if self.topic else b"")
        if isinstance(cut, int):  # (the CommitLog offset of a record whose parts overrun it)
            raise damaged_record(cut)

        def numbers(name: str, kind: pa.DataType) -> pa.Array:
            return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(cut[name])])

        body_offsets, body_data = map(pa.py_buffer, cut["body"])
        props = pa.Array.from_buffers(pa.string(), n, [None, *map(pa.py_buffer, cut["properties"])])
        if not cut["propertiesUtf8"]:
            props.validate(full=True)  # (raises, as the pure path does: no property is not UTF-8)
        properties, (uniq_key, keys, tags) = _properties(props, _PICKED)
        if cut["topic"] is None:  # (every record holds the queue's topic)
            topic = pa.repeat(pa.scalar(self.topic, pa.string()), n)
        else:
            topic = pa.Array.from_buffers(pa.string(), n, [None, *map(pa.py_buffer, cut["topic"])])
        ts = _schema().field("storeTimestamp").type
        columns = {
            "topic": topic,
            "brokerName": pa.repeat(pa.scalar(self.broker_name, pa.string()), n),
            "queueId": numbers("queueId", pa.int32()),
            "queueOffset": numbers("queueOffset", pa.int64()),
            "commitLogOffset": numbers("commitLogOffset", pa.int64()),
            "msgId": pa.Array.from_buffers(pa.string(), n, [
                None, pa.py_buffer(np.arange(0, 32 * n + 1, 32, dtype=np.int32)),
                pa.py_buffer(cut["msgId"])]),
            "uniqKey": uniq_key,
            "keys": keys,
            "tags": tags,
            "body": pa.Array.from_buffers(pa.binary(), n, [None, body_offsets, body_data]),
            "bodyText": _text_of(n, *cut["bodyText"], body_offsets, body_data),
            "properties": properties,
            "bornTimestamp": numbers("bornTimestamp", ts),
            "storeTimestamp": numbers("storeTimestamp", ts),
            "bornHost": self._host_column(*_cut_hosts(cut["bornHost"])),
            "storeHost": self._host_column(*_cut_hosts(cut["storeHost"])),
            "reconsumeTimes": numbers("reconsumeTimes", pa.int32()),
            "sysFlag": numbers("sysFlag", pa.int32()),
        }
        schema = _schema()
        return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)

    def _host_column(self, distinct: np.ndarray, which: np.ndarray) -> pa.Array:
        """"ip:port" per row, from the distinct hosts (ip:port words) and each row's index
        among them; a batch holds a handful, formatted once each."""
        names = []
        for value in distinct.tolist():
            name = self._hosts.get(value)
            if name is None:
                ip = value >> 32
                name = self._hosts[value] = (f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}."
                                             f"{ip & 255}:{value & 0xFFFFFFFF}")
            names.append(name)
        if len(names) == 1:
            return pa.repeat(pa.scalar(names[0], pa.string()), len(which))
        return pa.array(names, pa.string()).take(pa.array(which.ravel()))


def _packed_hosts(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct hosts of a batch and each row's index among them, from the rows' 8 bytes
    (IPv4 address, port)."""
    packed = np.ascontiguousarray(raw).view(">u8").ravel()
    return np.unique(packed, return_inverse=True)


def _cut_hosts(cut: tuple) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_packed_hosts` from the compiled cut's (codes or None, distinct, every row's)."""
    codes, distinct, every = cut
    if codes is None:  # (more distinct hosts than the cut's table holds)
        return np.unique(np.frombuffer(every, np.uint64), return_inverse=True)
    return np.frombuffer(distinct, np.uint64), np.frombuffer(codes, np.int32)


def _text_of(n: int, validity: bytes, valid: int, offsets: pa.Buffer,
             data: pa.Buffer) -> pa.Array:
    """The bodies as text from the compiled cut's validity bitmap (which are UTF-8): what
    :func:`_text` makes."""
    if valid == n:
        return pa.Array.from_buffers(pa.string(), n, [None, offsets, data])
    if not valid:
        return pa.nulls(n, pa.string())
    return pa.Array.from_buffers(pa.string(), n, [pa.py_buffer(validity), offsets, data],
                                 null_count=n - valid)


def gather(buf: np.ndarray, starts: np.ndarray, offset: int, width: int) -> np.ndarray:
    """``width`` bytes at ``start + offset`` of every record, one row each: one compiled copy
    when the core is built (numpy's 2-D gather builds an index a byte and took ~4x as long)."""
    n = len(starts)
    if _join_ranges is None or not n:
        # As the compiled join refuses a range outside the data (numpy would wrap a negative
        # index round to the end, and word one past it as an IndexError).
        first = np.asarray(starts, np.int64) + offset
        bad = (first < 0) | (first > len(buf)) | (width > len(buf) - first)
        if bad.any():
            raise ValueError(f"join_ranges(): range {int(np.flatnonzero(bad)[0])} lies outside "
                             "the data")
        return np.ascontiguousarray(buf[first[:, None] + np.arange(width)])
    _, data = _join_ranges(buf, np.ascontiguousarray(starts, np.int64) + offset,
                           np.full(n, width, np.int64))
    return np.frombuffer(data, np.uint8).reshape(n, width)



def _within(head: np.ndarray, bad: np.ndarray) -> None:
    """The first record ``bad`` marks is damaged: its parts run past its size."""
    if bad.any():
        first = int(np.argmax(bad))
        raise damaged_record(int(head[first, 28:36].view(">i8")[0]))


def _join(view, starts: np.ndarray, lengths: np.ndarray) -> tuple[pa.Buffer, pa.Buffer]:
    """(int32 offsets, values) of the slices ``view[start:start + length]``, as Arrow wants a
    variable-width column: in one compiled pass when the core is built."""
    if _join_ranges is None:
        offsets, data = _join_pure(view, starts, lengths)
    else:
        offsets, data = _join_ranges(view, np.ascontiguousarray(starts, np.int64),
                                     np.ascontiguousarray(lengths, np.int64))
    return pa.py_buffer(offsets), pa.py_buffer(data)


def _join_pure(view, starts: np.ndarray, lengths: np.ndarray) -> tuple[bytes, bytes]:
    """(int32 offsets as bytes, the joined values) of the slices; ValueError for a slice
    outside ``view`` (a record whose lengths do not fit it), OverflowError past 2 GiB."""
    size = len(view)
    if len(starts) != len(lengths):
        raise ValueError("join_ranges(): as many lengths as starts")
    bad = (starts < 0) | (lengths < 0) | (starts > size) | (lengths > size - starts)
    if bad.any():
        raise ValueError(f"join_ranges(): range {int(np.flatnonzero(bad)[0])} lies outside the data")
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 1 << 31:
        raise OverflowError("a batch of more than 2 GiB of values")
    ends = (starts + lengths).tolist()
    data = b"".join([view[s:e] for s, e in zip(starts.tolist(), ends, strict=True)])
    return offsets.astype(np.int32).tobytes(), data


def _text(view, starts: np.ndarray, lengths: np.ndarray, offsets: pa.Buffer, data: pa.Buffer,
          n: int) -> pa.Array:
    """The bodies as UTF-8 text, null where a body is not valid UTF-8. Text bodies share the
    body column's buffers; a batch of binary bodies becomes nulls without copying anything."""
    text = pa.Array.from_buffers(pa.string(), n, [None, offsets, data])
    try:
        text.validate(full=True)  # Arrow's vectorised check: the common all-text case
        return text
    except pa.ArrowInvalid:
        pass
    valid = ~_invalid_start(np.frombuffer(view, np.uint8), starts, lengths)
    for row in np.flatnonzero(valid).tolist():  # not refuted by the first 16 bytes: decode
        try:
            str(view[int(starts[row]):int(starts[row] + lengths[row])], "utf-8")
        except UnicodeDecodeError:
            valid[row] = False
    if not valid.any():
        return pa.nulls(n, pa.string())
    return pa.Array.from_buffers(pa.string(), n, [pa.array(valid).buffers()[1], offsets, data])


def _invalid_start(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   steps: int = 16) -> np.ndarray:
    """Rows whose first ``steps`` characters are already not UTF-8, found for all rows at once.

    Binary bodies are refuted within a few bytes; catching a UnicodeDecodeError per row costs
    ~2.5 µs (the error copies the whole body), checking sequences here a fraction of that.
    A row this does not refute may still be invalid further on; the caller decodes those.
    """
    n = len(starts)
    invalid = np.zeros(n, bool)
    pos, end = starts.copy(), starts + lengths
    active = np.arange(n)
    for _ in range(steps):
        active = active[pos[active] < end[active]]
        if not len(active):
            break
        p = pos[active]
        lead = buf[p]
        size = np.select([lead < 0x80, (lead >= 0xC2) & (lead <= 0xDF),
                          (lead >= 0xE0) & (lead <= 0xEF), (lead >= 0xF0) & (lead <= 0xF4)],
                         [1, 2, 3, 4], 0)
        bad = (size == 0) | (p + size > end[active])
        low, high = np.full(len(p), 0x80), np.full(len(p), 0xBF)  # the second byte's range
        low[lead == 0xE0], high[lead == 0xED] = 0xA0, 0x9F  # no overlong forms, no surrogates
        low[lead == 0xF0], high[lead == 0xF4] = 0x90, 0x8F  # nothing past U+10FFFF
        for k in (1, 2, 3):
            check = ~bad & (size > k)
            if not check.any():
                break
            byte = buf[p[check] + k]
            lo, hi = (low[check], high[check]) if k == 1 else (0x80, 0xBF)
            bad[np.flatnonzero(check)[(byte < lo) | (byte > hi)]] = True
        invalid[active[bad]] = True
        pos[active] += np.where(bad, 0, size)
        active = active[~bad]
    return invalid


def _properties(props: pa.Array, names: tuple[str, ...]) -> tuple[pa.Array, list[pa.Array]]:
    """The map column of a string column of property strings, and each named property's
    value a row (null where absent): in one compiled pass when the core is built."""
    n = len(props)
    if _split_properties is None or not n or props.null_count:
        return _properties_pure(props, names)
    _, offsets, data = props.buffers()
    # Exactly this array's n + 1 offsets: a sliced array shares a longer buffer.
    offsets = offsets.slice(4 * props.offset, 4 * (n + 1))
    map_offsets, key_offsets, key_data, value_offsets, value_data, picks = _split_properties(
        offsets, data, tuple(name.encode() for name in names))
    entries = len(key_offsets) // 4 - 1
    keys = pa.Array.from_buffers(pa.string(), entries,
                                 [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)])
    values = pa.Array.from_buffers(pa.string(), entries,
                                   [None, pa.py_buffer(value_offsets), pa.py_buffer(value_data)])
    mapped = pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(map_offsets)]), keys, values)
    where = np.frombuffer(picks, np.int32).reshape(len(names), n)
    return mapped, [values.take(pa.array(row, mask=row < 0)) for row in where]


def _properties_pure(props: pa.Array, names: tuple[str, ...]) -> tuple[pa.Array, list[pa.Array]]:
    properties = _property_map(props)
    entry_rows = np.repeat(np.arange(len(props)), np.diff(properties.offsets.to_numpy()))
    return properties, [_property(properties, entry_rows, name) for name in names]


def _property_map(props: pa.Array) -> pa.Array:
    """RocketMQ's ``k\\x01v\\x02k\\x01v\\x02`` strings as a map<string, string> column."""
    entries = pc.split_pattern(props, "\x02")
    list_offsets = entries.offsets.to_numpy()
    pairs = pc.split_pattern(entries.flatten(), "\x01", max_splits=1)
    complete = pc.list_value_length(pairs).to_numpy(zero_copy_only=False) == 2
    if not complete.all():  # the empty piece after the last separator, stray pieces
        kept = np.concatenate([[0], np.cumsum(complete)])
        list_offsets = kept[list_offsets]
        pairs = pairs.filter(pa.array(complete))
    flat = pairs.flatten()
    count = len(flat) // 2
    keys = flat.take(pa.array(np.arange(0, 2 * count, 2)))
    values = flat.take(pa.array(np.arange(1, 2 * count, 2)))
    last = _last_of_each_key(keys, list_offsets)
    if last is not None:
        keys, values = keys.filter(pa.array(last)), values.filter(pa.array(last))
        list_offsets = np.concatenate([[0], np.cumsum(last)])[list_offsets]
    return pa.MapArray.from_arrays(pa.array(list_offsets.astype(np.int32)), keys, values)


def _last_of_each_key(keys: pa.Array, list_offsets: np.ndarray) -> np.ndarray | None:
    """Which entries to keep when a row names a key twice (the last: RocketMQ's clients read
    properties into a map), or None when no row does."""
    codes = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    rows = np.repeat(np.arange(len(list_offsets) - 1), np.diff(list_offsets))
    ids = rows * (int(codes.max(initial=0)) + 1) + codes
    if len(np.unique(ids)) == len(ids):
        return None
    _, first_from_end = np.unique(ids[::-1], return_index=True)
    keep = np.zeros(len(ids), bool)
    keep[len(ids) - 1 - first_from_end] = True
    return keep


# The compiled join (common/_pull_gather.c) and property split (common/_property_split.c) when
# the core is built; _join_pure and _properties_pure are their twins ...
_join_ranges = None if speedups.store_core is None else speedups.store_core.join_ranges
_split_properties = None if speedups.store_core is None else speedups.store_core.split_properties
# ... and the whole cut (common/_record_cut.c), whose twin is ColumnarDecoder.decode's numpy path
# (getattr: a core built before it still loads).
_cut_records = (None if speedups.store_core is None
                else getattr(speedups.store_core, "cut_records", None))
