"""Records to columns: the rows of the ``rocketmq`` source, built as Arrow batches.

Spark converts Arrow batches far faster than Python tuples (spark.md §2.3), so a reader
decodes records straight into column lists and hands over one ``RecordBatch`` per ~10,000 rows.
Filters that the broker cannot apply exactly (tag strings; it compares hashes), keys and time
bounds are applied here, as is the range end.
"""

from __future__ import annotations

import socket

from export.errors import damaged_record
from export.options import SourceOptions
from export.schema import COLUMNS, arrow_schema
from storage.errors import RecordError
from storage.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TIME_RANGE_MS,
    inflated,
)
from storage.message import string_to_properties as _props
from storage.record import MESSAGE_MAGIC_CODE, PREFIX_V4, MessageRecord, decode_record

_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_PREFIX = PREFIX_V4.size
_unpack_prefix = PREFIX_V4.unpack_from

BATCH_ROWS = 10_000


def _clipped(ms: int) -> int:
    """A stored time (any int64 for a born time) within what readers hold, as the columnar
    decoder clips it: the time the export shows, and the one its time filters compare."""
    return min(max(ms, TIME_RANGE_MS[0]), TIME_RANGE_MS[1])


def _micros(ms: int) -> int:
    """:func:`_clipped`, in microseconds."""
    return _clipped(ms) * 1000


def _bound_micros(ms: int) -> int:
    """A time filter's bound in microseconds, for comparing with shown (clipped) times: held
    just outside what they can be, so that any int64 of milliseconds fits an int64 of
    microseconds and keeps the same rows."""
    return min(max(ms, TIME_RANGE_MS[0] - 1), TIME_RANGE_MS[1] + 1) * 1000


def _inflated(body: bytes) -> bytes:
    """A compressed body as sent, or as stored when it does not inflate (storage/message.py
    ``inflated``): an export does not fail on a message anyone could have flagged."""
    plain = inflated(body)
    return body if plain is None else plain


def _host(raw: tuple[str, int]) -> str:
    ip, port = raw
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class RowBuilder:
    def __init__(self, broker_name: str, options: SourceOptions | None) -> None:
        """``options`` None: keep every record (the caller filters)."""
        self.broker_name = broker_name
        self.tags = options.tags if options else None
        self.keys = options.keys if options else None
        self.since = options.starting_timestamp if options else None
        self.until = options.ending_timestamp if options else None
        self._reset_columns()
        self.filtering = any(v is not None for v in (self.tags, self.keys, self.since, self.until))
        self._hosts: dict[tuple, tuple[str, str]] = {}
        self.rows = 0
        self.skipped = 0

    def _reset_columns(self) -> None:
        self.columns = {name: [] for name in COLUMNS}
        names = [n for n in COLUMNS if n != "properties"]
        self._appends = tuple(self.columns[n].append for n in names)
        self._reset_map()

    def _reset_map(self) -> None:
        # The properties map column is built from flat keys, values and offsets: far cheaper
        # for Arrow than a list of lists of pairs.
        self._map_keys: list[str] = []
        self._map_values: list[str] = []
        self._map_offsets: list[int] = [0]

    def add(self, record: MessageRecord) -> bool:
        """Add one record if the filters keep it; returns whether they did."""
        props = _props(record.properties_string)
        tags = props.get("TAGS")
        if self.tags is not None and tags not in self.tags:
            self.skipped += 1
            return False
        keys = props.get("KEYS")
        if self.keys is not None and not (self.keys & set((keys or "").split(" "))
                                          or props.get("UNIQ_KEY") in self.keys):
            self.skipped += 1
            return False
        stored = record.store_timestamp
        if (self.since is not None and _clipped(stored) < self.since) or (
                self.until is not None and _clipped(stored) >= self.until):
            self.skipped += 1
            return False
        body = record.body
        if record.sys_flag & COMPRESSED_FLAG:  # (as stored when it does not inflate: anyone
            body = _inflated(body)              # may flag anything compressed)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        c = self.columns
        c["topic"].append(record.topic)
        c["brokerName"].append(self.broker_name)
        c["queueId"].append(record.queue_id)
        c["queueOffset"].append(record.queue_offset)
        c["commitLogOffset"].append(record.commit_log_offset)
        c["msgId"].append(record.msg_id)
        c["uniqKey"].append(props.get("UNIQ_KEY"))
        c["keys"].append(keys)
        c["tags"].append(tags)
        c["body"].append(body)
        c["bodyText"].append(text)
        self._map_keys.extend(props)
        self._map_values.extend(props.values())
        self._map_offsets.append(len(self._map_keys))
        c["bornTimestamp"].append(_micros(record.born_timestamp))
        c["storeTimestamp"].append(_micros(stored))
        c["bornHost"].append(_host(record.born_host))
        c["storeHost"].append(_host(record.store_host))
        c["reconsumeTimes"].append(record.reconsume_times)
        c["sysFlag"].append(record.sys_flag)
        self.rows += 1
        return True

    def add_raw(self, buf, pos: int, end_offset: int | None = None) -> int:
        """Decode the record at ``buf[pos]`` straight into the columns (the common v1 IPv4 form;
        anything else goes through the full decoder). Returns the record's size, or 0 when its
        queue offset is at or past ``end_offset``."""
        (total, magic, _crc, queue_id, _flag, queue_offset, phy, sys_flag, born_ts, born_ip,
         born_port, store_ts, store_ip, store_port, reconsume, _prepared, body_len) = _unpack_prefix(buf, pos)
        if end_offset is not None and queue_offset >= end_offset:
            return 0
        if magic != MESSAGE_MAGIC_CODE or sys_flag & _V6:
            try:
                record = decode_record(buf, pos, check_crc=False)
            except RecordError as exc:
                raise damaged_record(phy) from exc
            self.add(record)
            return record.total_size
        p = pos + _PREFIX
        end = pos + total  # (each part within it, as the columnar cut checks)
        if body_len < 0 or p + body_len + 1 > end or end > len(buf):
            raise damaged_record(phy)
        body = bytes(buf[p : p + body_len])
        p += body_len
        topic_len = buf[p]
        topic_at = p + 1
        p += 1 + topic_len
        if p + 2 > end:
            raise damaged_record(phy)
        props_len = (buf[p] << 8) | buf[p + 1]
        if p + 2 + props_len > end:
            raise damaged_record(phy)
        topic = bytes(buf[topic_at : topic_at + topic_len]).decode()
        props_text = bytes(buf[p + 2 : p + 2 + props_len]).decode()
        pairs = [item.split("\x01", 1) for item in props_text.split("\x02") if "\x01" in item]
        props = dict(pairs)
        tags = props.get("TAGS")
        keys = props.get("KEYS")
        if self.filtering and ((self.tags is not None and tags not in self.tags) or (
                self.keys is not None and not (self.keys & set((keys or "").split(" "))
                                               or props.get("UNIQ_KEY") in self.keys)) or (
                self.since is not None and _clipped(store_ts) < self.since) or (
                self.until is not None and _clipped(store_ts) >= self.until)):
            self.skipped += 1
            return total
        if sys_flag & COMPRESSED_FLAG:
            body = _inflated(body)
        if body.isascii():
            text = body.decode("ascii")
        else:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        hosts = self._hosts
        store = hosts.get((store_ip, store_port))
        if store is None:
            store = hosts[(store_ip, store_port)] = (
                f"{socket.inet_ntoa(store_ip)}:{store_port}",
                (store_ip + store_port.to_bytes(4, "big")).hex().upper())
        born = hosts.get((born_ip, born_port))
        if born is None:
            born = hosts[(born_ip, born_port)] = (f"{socket.inet_ntoa(born_ip)}:{born_port}", "")
        (a_topic, a_broker, a_queue, a_offset, a_phy, a_msg_id, a_uniq, a_keys, a_tags, a_body,
         a_text, a_born_ts, a_store_ts, a_born, a_store, a_reconsume, a_sys) = self._appends
        a_topic(topic)
        a_broker(self.broker_name)
        a_queue(queue_id)
        a_offset(queue_offset)
        a_phy(phy)
        a_msg_id(store[1] + f"{phy:016X}")
        a_uniq(props.get("UNIQ_KEY"))
        a_keys(keys)
        a_tags(tags)
        a_body(body)
        a_text(text)
        self._map_keys.extend(props)
        self._map_values.extend(props.values())
        self._map_offsets.append(len(self._map_keys))
        a_born_ts(_micros(born_ts))
        a_store_ts(_micros(store_ts))
        a_born(born[0])
        a_store(store[0])
        a_reconsume(reconsume)
        a_sys(sys_flag)
        self.rows += 1
        return total

    def full(self) -> bool:
        return len(self.columns["topic"]) >= BATCH_ROWS

    def __len__(self) -> int:
        return len(self.columns["topic"])

    def take_batch(self):
        """The rows so far as a ``pyarrow.RecordBatch``; the builder starts empty again."""
        import pyarrow as pa

        schema = arrow_schema()
        arrays = []
        for field in schema:
            if field.name == "properties":
                arrays.append(pa.MapArray.from_arrays(
                    pa.array(self._map_offsets, type=pa.int32()),
                    pa.array(self._map_keys, type=pa.string()),
                    pa.array(self._map_values, type=pa.string())))
            else:
                arrays.append(pa.array(self.columns[field.name], type=field.type))
        self._reset_columns()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


BATCH_BYTES = 64 << 20  # Arrow's 32-bit offsets: keep a batch's bodies far below 2 GiB


class BatchBuilder:
    """Records collected by location and cut into Arrow batches many at a time.

    Readers add runs of records as (buffer, start positions); a batch is decoded when ~10,000
    records or 64 MiB are waiting. Runs in one buffer (a mapped CommitLog file, or the bodies
    of a batch's pull responses read side by side: export.pull_reader.PullBodies) are cut
    together, each buffer apart, nothing joined. The filters the options ask for are applied
    to each decoded batch as a whole.
    """

    def __init__(self, broker_name: str, options: SourceOptions, topic: str | None = None) -> None:
        from export.columnar import ColumnarDecoder

        self.broker_name = broker_name
        self.options = options
        self.decoder = ColumnarDecoder(broker_name, topic)
        self._runs: list[tuple[object, list]] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self.rows = 0
        self.skipped = 0
        self.filtering = any(v is not None for v in (options.tags, options.keys,
                                                    options.starting_timestamp,
                                                    options.ending_timestamp))

    def add(self, data, starts, size: int) -> None:
        """Records of ``data`` at ``starts`` (a list or numpy array), ``size`` bytes in all."""
        if not len(starts):
            return
        if self._runs and self._runs[-1][0] is data:
            self._runs[-1][1].append(starts)
        else:
            self._runs.append((data, [starts]))
        self._pending_rows += len(starts)
        self._pending_bytes += size

    def full(self) -> bool:
        return self._pending_rows >= BATCH_ROWS or self._pending_bytes >= BATCH_BYTES

    def __len__(self) -> int:
        return self._pending_rows

    def take_batches(self) -> list:
        """The waiting records as Arrow batches (usually one), filtered."""
        import numpy as np

        runs, self._runs = self._runs, []
        self._pending_rows = self._pending_bytes = 0
        groups = [(data, np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]))
                  for data, parts in runs]
        batches = []
        for data, positions in groups:
            buf = np.frombuffer(data, np.uint8)
            if self.decoder.handles(buf, positions):
                batch = self.decoder.decode(data, positions)
            else:
                batch = self._row_by_row(data, positions.tolist())
            del buf
            batch = self._filter(batch)
            self.rows += batch.num_rows
            if batch.num_rows:
                batches.append(batch)
        return batches

    def _row_by_row(self, data, starts: list[int]):
        builder = RowBuilder(self.broker_name, None)  # _filter applies the filters after
        for pos in starts:
            builder.add_raw(data, pos)
        return builder.take_batch()

    def _filter(self, batch):
        if not self.filtering or not batch.num_rows:
            return batch
        import pyarrow as pa
        import pyarrow.compute as pc

        options = self.options
        keep = pa.array([True] * batch.num_rows)
        if options.tags is not None:
            keep = pc.and_(keep, pc.fill_null(pc.is_in(batch["tags"], value_set=pa.array(
                sorted(options.tags), pa.string())), False))
        stored = pc.cast(batch["storeTimestamp"], pa.int64())
        if options.starting_timestamp is not None:
            keep = pc.and_(keep, pc.greater_equal(stored, _bound_micros(options.starting_timestamp)))
        if options.ending_timestamp is not None:
            keep = pc.and_(keep, pc.less(stored, _bound_micros(options.ending_timestamp)))
        if options.keys is not None:
            wanted = options.keys
            keys_match = [bool(wanted & set((k or "").split(" "))) or u in wanted
                          for k, u in zip(batch["keys"].to_pylist(), batch["uniqKey"].to_pylist(),
                                              strict=True)]
            keep = pc.and_(keep, pa.array(keys_match))
        kept = batch.filter(keep)
        self.skipped += batch.num_rows - kept.num_rows
        return kept
