"""Records to columns: the rows of the ``rocketmq`` source, built as Arrow batches.

Spark converts Arrow batches far faster than Python tuples (spark.md §2.3), so a reader
decodes records straight into column lists and hands over one ``RecordBatch`` per ~10,000 rows.
Filters that the broker cannot apply exactly (tag strings; it compares hashes), keys and time
bounds are applied here, as is the range end.
"""

from __future__ import annotations

import zlib

from export.options import SourceOptions
from export.schema import COLUMNS, arrow_schema
from storage.message import COMPRESSED_FLAG
from storage.message import string_to_properties as _props
from storage.record import MessageRecord

BATCH_ROWS = 10_000


def _host(raw: tuple[str, int]) -> str:
    ip, port = raw
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class RowBuilder:
    def __init__(self, broker_name: str, options: SourceOptions) -> None:
        self.broker_name = broker_name
        self.tags = options.tags
        self.keys = options.keys
        self.since = options.starting_timestamp
        self.until = options.ending_timestamp
        self.columns: dict[str, list] = {name: [] for name in COLUMNS}
        self.rows = 0
        self.skipped = 0

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
        if (self.since is not None and stored < self.since) or (
                self.until is not None and stored >= self.until):
            self.skipped += 1
            return False
        body = record.body
        if record.sys_flag & COMPRESSED_FLAG:
            body = zlib.decompress(body)
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
        c["properties"].append(list(props.items()))
        c["bornTimestamp"].append(record.born_timestamp * 1000)
        c["storeTimestamp"].append(stored * 1000)
        c["bornHost"].append(_host(record.born_host))
        c["storeHost"].append(_host(record.store_host))
        c["reconsumeTimes"].append(record.reconsume_times)
        c["sysFlag"].append(record.sys_flag)
        self.rows += 1
        return True

    def full(self) -> bool:
        return len(self.columns["topic"]) >= BATCH_ROWS

    def __len__(self) -> int:
        return len(self.columns["topic"])

    def take_batch(self):
        """The rows so far as a ``pyarrow.RecordBatch``; the builder starts empty again."""
        import pyarrow as pa

        schema = arrow_schema()
        arrays = [pa.array(self.columns[field.name], type=field.type) for field in schema]
        self.columns = {name: [] for name in COLUMNS}
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
