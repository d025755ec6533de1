"""``bench export``'s floor replays exactly the rows an export wrote, in the source's schema."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from export.schema import arrow_schema
from rocketdesk.bench.spark_floor import ReplayReader, stage_rows


def _rows(first: int, n: int) -> pa.RecordBatch:
    at = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
    rows = [{"topic": "T", "brokerName": "broker-a", "queueId": i % 4, "queueOffset": i,
             "commitLogOffset": 1000 * i, "msgId": f"{i:032X}", "uniqKey": f"U{i}",
             "keys": f"k{i}", "tags": None if i % 2 else "TagA", "body": bytes([i % 256]) * 10,
             "bodyText": None, "properties": [("KEYS", f"k{i}"), ("UNIQ_KEY", f"U{i}")],
             "bornTimestamp": at, "storeTimestamp": at + dt.timedelta(microseconds=i),
             "bornHost": "10.0.0.1:50000", "storeHost": "127.0.0.1:10911",
             "reconsumeTimes": 0, "sysFlag": 0} for i in range(first, first + n)]
    return pa.RecordBatch.from_pylist(rows, schema=arrow_schema())


def test_the_staged_rows_replay_as_the_source_would_yield_them(tmp_path):
    exported = tmp_path / "export"
    exported.mkdir()
    parts = [_rows(0, 25_000), _rows(25_000, 7)]
    for i, batch in enumerate(parts):  # as Spark writes them: INT96 timestamps
        pq.write_table(pa.Table.from_batches([batch]), exported / f"part-{i:05d}-x.snappy.parquet",
                       use_deprecated_int96_timestamps=True)
    (exported / "_SUCCESS").touch()

    assert stage_rows(exported, tmp_path / "staged") == 25_007
    reader = ReplayReader(str(tmp_path / "staged"))
    partitions = reader.partitions()
    assert len(partitions) == 2  # one a part, as the export was partitioned
    for partition, want in zip(partitions, parts, strict=True):
        batches = list(reader.read(partition))
        assert all(b.schema == arrow_schema() for b in batches)
        assert max(b.num_rows for b in batches) <= 10_000
        assert pa.Table.from_batches(batches).to_pylist() == pa.Table.from_batches([want]).to_pylist()
