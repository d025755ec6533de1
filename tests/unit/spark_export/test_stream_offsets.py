"""A continuous or incremental export's offsets from batch to batch: no message skipped when a
broker group leaves the route a moment, or when queues appear (the queues' bounds here are what
brokers would answer; tests/integration/test_export.py runs the real thing)."""

from __future__ import annotations

from export.datasource import RocketMQStreamReader
from export.options import SourceOptions
from export.planner import QueueBounds


def _reader(monkeypatch, bounds: list) -> RocketMQStreamReader:
    reader = RocketMQStreamReader(SourceOptions.parse({"nameServer": "h:1", "topic": "T"}))
    monkeypatch.setattr(reader, "_bounds", lambda: list(bounds))
    return reader


def _read(reader, start, end) -> list[tuple]:
    return sorted((r.broker_name, r.queue_id, r.start, r.end)
                  for p in reader.partitions(start, end) for r in p.ranges)


def test_a_broker_group_out_of_the_route_a_moment_is_read_on_from_where_it_stood(monkeypatch):
    bounds = [QueueBounds("T", "a", 0, 0, 80, "a:10911")]  # broker b: down, out of the route
    reader = _reader(monkeypatch, bounds)
    start = {"T": {"a": {"0": 50}, "b": {"0": 50}}}
    first = reader.latestOffset(start, None)
    assert first == {"T": {"a": {"0": 80}, "b": {"0": 50}}}
    assert _read(reader, start, first) == [("a", 0, 50, 80)]
    bounds[:] = [QueueBounds("T", "a", 0, 0, 80, "a:10911"),
                 QueueBounds("T", "b", 0, 0, 90, "b:10911")]
    second = reader.latestOffset(first, None)  # back
    assert _read(reader, first, second) == [("b", 0, 50, 90)]  # (its 50..80 were skipped)
    [[back]] = [p.ranges for p in reader.partitions(first, second)]
    assert back.address == "b:10911"  # (looked up again: not in the route at the first look)


def test_a_queue_that_appears_is_read_from_its_earliest(monkeypatch):
    bounds = [QueueBounds("T", "a", 0, 0, 10, "a:10911"), QueueBounds("T", "a", 1, 3, 20, "a:10911")]
    reader = _reader(monkeypatch, bounds)
    start = {"T": {"a": {"0": 10}}}  # queue 1 came since (the topic grew)
    first = reader.latestOffset(start, None)
    assert first["T"]["a"]["1"] == 3  # named at its earliest
    second = reader.latestOffset(first, None)
    assert _read(reader, first, second) == [("a", 1, 3, 20)]


def test_ending_offsets_stop_an_incremental_export_where_they_say(monkeypatch):
    bounds = [QueueBounds("T", "a", 0, 0, 100, "a:1"), QueueBounds("T", "a", 1, 0, 100, "a:1")]
    reader = RocketMQStreamReader(SourceOptions.parse({
        "nameServer": "h:1", "topic": "T", "endingOffsets": '{"T": {"a": {"0": 40, "1": -1}}}'}))
    monkeypatch.setattr(reader, "_bounds", lambda: list(bounds))
    start = {"T": {"a": {"0": 10, "1": 10}}}
    end = reader.latestOffset(start, None)
    assert end == {"T": {"a": {"0": 40, "1": 100}}}
    assert reader.latestOffset(end, None) == end  # nothing new for it: done
