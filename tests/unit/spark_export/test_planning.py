"""Options, planning, row building and store reading of the export, without Spark."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from export.datasource_math import cap_rows
from export.decode import RowBuilder
from export.errors import DataLossError, OptionError
from export.options import SourceOptions
from export.planner import (
    QueueBounds,
    QueueRange,
    offsets_json,
    pack,
    plan_from_store,
    resolve,
    split,
)
from export.pull_reader import read_store_range
from storage.message_store import DefaultMessageStore
from storage.record import iter_records
from tests.conftest import make_message, small_config


def opts(**extra) -> SourceOptions:
    return SourceOptions.parse({"nameServer": "127.0.0.1:9876", "topic": "T", **extra})


def test_options_are_case_insensitive_and_unknown_ones_fail():
    parsed = SourceOptions.parse({"NAMESERVER": "h:1", "Topic": "A, B", "tags": "x || y",
                                  "partitionsize": "10"})
    assert parsed.topics == ["A", "B"]
    assert parsed.tags == {"x", "y"}
    assert parsed.partition_size == 10
    with pytest.raises(OptionError, match="no option 'startOffset'"):
        SourceOptions.parse({"nameServer": "h:1", "topic": "T", "startOffset": "0"})
    with pytest.raises(OptionError, match="needs a topic"):
        SourceOptions.parse({"nameServer": "h:1"})
    with pytest.raises(OptionError, match="JSON"):
        opts(startingOffsets="{nope")


def test_ranges_resolve_markers_json_and_time_and_refuse_lost_data():
    bounds = [QueueBounds("T", "b", 0, 10, 100), QueueBounds("T", "b", 1, 0, 50)]
    spec = '{"T": {"b": {"0": 20, "1": -2}}}'
    ranges = resolve(bounds, opts(startingOffsets=spec, endingOffsets='{"T": {"b": {"0": -1}}}'))
    assert [(r.queue_id, r.start, r.end) for r in ranges] == [(0, 20, 100), (1, 0, 50)]
    timed = resolve(bounds, opts(startingTimestamp="5", endingTimestamp="9"),
                    by_time=lambda b, ms: {5: 30, 9: 40}[ms])
    assert [(r.queue_id, r.start, r.end) for r in timed] == [(0, 30, 40), (1, 30, 40)]
    with pytest.raises(DataLossError, match="oldest kept is 10"):
        resolve(bounds, opts(startingOffsets='{"T": {"b": {"0": 3}}}'))
    lenient = resolve(bounds, opts(startingOffsets='{"T": {"b": {"0": 3}}}', failOnDataLoss="false"))
    assert lenient[0].start == 10


def test_split_cuts_ranges_into_chunks_largest_first():
    chunks = split([QueueRange("T", "b", 0, 0, 25), QueueRange("T", "b", 1, 5, 12)], 10)
    assert [(c.queue_id, c.start, c.end) for c in chunks] == [
        (0, 0, 10), (0, 10, 20), (1, 5, 12), (0, 20, 25)]
    assert sum(c.count for c in chunks) == 32
    assert offsets_json(chunks[:1], "end") == {"T": {"b": {"0": 10}}}


def test_pack_puts_small_queues_together_and_keeps_every_core_busy():
    # 1,024 queues of 90 messages (a BenchmarkTest-like topic): not 1,024 tasks.
    small = [QueueRange("T", "b", q, 0, 90) for q in range(1024)]
    parts = pack(split(small, 50_000), 50_000, 2)
    assert len(parts) == 2
    assert sorted(sum(r.count for r in p) for p in parts) == [46_080, 46_080]
    # Large queues still cut at partitionSize; never fewer partitions than asked for.
    parts = pack(split([QueueRange("T", "b", 0, 0, 120), QueueRange("T", "b", 1, 0, 30)], 50),
                 50, 4)
    assert sorted(sum(r.count for r in p) for p in parts) == [20, 30, 50, 50]
    assert pack([], 10, 2) == []


def test_the_source_plans_packed_partitions_and_checks_min_partitions():
    from export.datasource import RangePartition, _partitions

    small = [QueueRange("T", "b", q, 0, 90) for q in range(1024)]
    parts = _partitions(small, opts(minPartitions="3"))
    assert len(parts) == 3
    assert all(isinstance(p, RangePartition) for p in parts)
    assert sorted(r.queue_id for p in parts for r in p.ranges) == list(range(1024))
    assert len(_partitions(small, opts(minPartitions="3", partitionSize="10000"))) == 10
    for bad in ("0", "-4", "many", ""):
        with pytest.raises(OptionError, match="minPartitions"):
            opts(minPartitions=bad)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500)), max_size=40),
       st.integers(1, 200), st.integers(1, 8))
def test_pack_reads_every_message_once_within_the_partition_size(queues, size, minimum):
    ranges = [QueueRange("T", f"b{b}", q, 0, n) for q, (b, n) in enumerate(queues) if n]
    chunks = split(ranges, size)
    parts = pack(chunks, size, minimum)
    packed = [r for p in parts for r in p]
    assert sorted(packed, key=lambda r: (r.queue_id, r.start)) == \
        sorted(chunks, key=lambda r: (r.queue_id, r.start))
    assert all(0 < sum(r.count for r in p) <= size for p in parts)
    assert len(parts) >= min(minimum, len(chunks))


def test_read_limits_spread_over_queues_without_starving_any():
    start = {"T": {"b": {"0": 0, "1": 0}}}
    end = {"T": {"b": {"0": 1000, "1": 2}}}
    capped = cap_rows(start, end, 100)
    assert capped["T"]["b"]["1"] >= 1
    assert sum(capped["T"]["b"].values()) <= 102
    assert cap_rows(start, end, 5000) == end


@pytest.fixture
def store(tmp_path):
    store = DefaultMessageStore(small_config(tmp_path / "store"))
    store.load()
    store.start()
    for i in range(30):
        store.put_message(make_message(topic="T", queue_id=i % 2, body=f"body {i}".encode(),
                                       tags="even" if i % 2 == 0 else "odd", keys=f"k{i}"))
    assert store.wait_dispatched()
    yield store
    store.shutdown()


def test_rows_keep_what_the_filters_ask_for(store):
    records = [store.look_message_by_offset(o) for o in _offsets(store)]
    builder = RowBuilder("b", opts(tags="odd", keys="k1,k3,k4"))
    kept = [r.keys for r in records if builder.add(r)]
    assert kept == ["k1", "k3"]
    batch = builder.take_batch()
    row = batch.to_pylist()[0]
    assert row["bodyText"] == "body 1"
    assert row["body"] == b"body 1"
    assert dict(row["properties"])["KEYS"] == "k1"
    assert row["brokerName"] == "b"


def _offsets(store):
    offsets, pos = [], 0
    data = store.get_commit_log_data(0)
    for record in iter_records(data):
        offsets.append(pos)
        pos += record.total_size
    return offsets


def test_a_store_directory_is_planned_and_read_without_a_broker(store, tmp_path):
    options = SourceOptions.parse({"path": str(tmp_path / "store"), "topic": "T"})
    ranges = plan_from_store(options)
    assert [(r.queue_id, r.start, r.end) for r in ranges] == [(0, 0, 15), (1, 0, 15)]
    rows = []
    for r in ranges:
        for batch in read_store_range(r, options):
            rows.extend(batch.to_pylist())
    assert sorted(row["keys"] for row in rows) == sorted(f"k{i}" for i in range(30))
    assert {row["queueOffset"] for row in rows if row["queueId"] == 1} == set(range(15))


@pytest.mark.parametrize("unit", ["a size one more", "a size of 3", "after the last record",
                                  "after the last record, size 0"])
def test_a_unit_that_points_at_no_record_of_its_size_is_data_loss(store, tmp_path, unit):
    # A ConsumeQueue unit whose size does not match the record at its offset, or that points
    # past the last record, stops the read with DataLossError, never a wrong row or another
    # error (the mapped file is still closed).
    end = len(store.get_commit_log_data(0))  # (the records' end: zeros follow)
    store.shutdown()
    queue_file = next((tmp_path / "store" / "consumequeue" / "T" / "0").iterdir())
    data = bytearray(queue_file.read_bytes())
    at = 3 * 20  # (offset i64, size i32, tags code i64)
    offset, real = struct.unpack_from(">qi", data, at)
    offset, size = {"a size one more": (offset, real + 1), "a size of 3": (offset, 3),
                    "after the last record": (end, real),
                    "after the last record, size 0": (end, 0)}[unit]
    struct.pack_into(">qi", data, at, offset, size)
    queue_file.write_bytes(bytes(data))
    options = SourceOptions.parse({"path": str(tmp_path / "store"), "topic": "T"})
    with pytest.raises(DataLossError, match="holds no"):
        list(read_store_range(QueueRange("T", "b", 0, 0, 15), options))


@pytest.mark.parametrize("case", ["a blank", "before its file", "shorter than any record"])
def test_the_unit_check_refuses_what_is_no_message_record(case):
    # (cases a real store does not make on its own: checked on a made-up file)
    from export.pull_reader import _check_units
    from storage.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE

    view = bytearray(400)
    struct.pack_into(">iI", view, 0, 120, MESSAGE_MAGIC_CODE)
    struct.pack_into(">iI", view, 200, 120, BLANK_MAGIC_CODE)
    struct.pack_into(">iI", view, 330, 8, MESSAGE_MAGIC_CODE)  # (its size word says 8)
    _check_units(memoryview(view), np.array([0]), np.array([120]), 0)  # (a record: fine)
    positions, lengths = {"a blank": ([200], [120]), "before its file": ([-8], [120]),
                          "shorter than any record": ([330], [8])}[case]
    with pytest.raises(DataLossError, match="holds no"):
        _check_units(memoryview(view), np.array(positions), np.array(lengths), 1000)


def test_a_plan_handed_on_as_offsets_names_its_empty_queues_and_the_reader_reads_only_it():
    """A job plans, then hands its plan to the reader as offsets JSON; the reader resolves it
    again against what the queues hold by then. A queue with nothing to read at planning (at
    its end already, or empty) is named in the JSON at where it stood: the reader leaves it
    alone, rather than reading it from its earliest (rows read by the export before, or that
    arrived after the plan)."""
    at_planning = [QueueBounds("T", "a", 0, 0, 300), QueueBounds("T", "a", 1, 0, 100),
                   QueueBounds("T", "a", 2, 0, 0)]
    asked = opts(startingOffsets='{"T": {"a": {"0": 200, "1": 100}}}')
    planned = resolve(at_planning, asked, keep_empty=True)
    assert [(r.queue_id, r.start, r.end) for r in planned] == [(0, 200, 300), (1, 100, 100),
                                                                (2, 0, 0)]
    assert resolve(at_planning, asked) == [r for r in planned if r.count]
    handed_on = opts(startingOffsets=json.dumps(offsets_json(planned, "start")),
                     endingOffsets=json.dumps(offsets_json(planned, "end")))
    later = [QueueBounds("T", "a", 0, 0, 320), QueueBounds("T", "a", 1, 0, 130),
             QueueBounds("T", "a", 2, 5, 9)]  # more sent; queue 2's first file expired
    assert [(r.queue_id, r.start, r.end) for r in resolve(later, handed_on)] == [(0, 200, 300)]
