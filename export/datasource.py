"""The ``rocketmq`` PySpark data source: batch reads and streaming (with Trigger.AvailableNow).

Planning happens on the driver (``export.planner``); each Spark partition is one
:class:`QueueRange` read on an executor over the pull protocol, or from store files with the
``path`` option, and yields Arrow batches. Filters come from options only: ``pushFilters`` is
left undefined on purpose (in PySpark 4.3 defining it breaks reads, and enabling it leaked a
filter into later queries; spark.md §2.4).
"""

from __future__ import annotations

import os

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from export.datasource_math import cap_rows
from export.errors import ExportError
from export.options import SourceOptions
from export.planner import QueueBounds, QueueRange, pack, plan, resolve, split
from export.schema import SCHEMA_DDL


class RangePartition(InputPartition):
    """The ranges one Spark task reads: a chunk of a large queue, or many small queues."""

    def __init__(self, ranges: list[QueueRange]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


def _partitions(ranges: list[QueueRange], options: SourceOptions) -> list[RangePartition]:
    minimum = options.min_partitions or os.cpu_count() or 1
    return [RangePartition(p) for p in pack(split(ranges, options.partition_size),
                                           options.partition_size, minimum)]


def _read(partition, options: SourceOptions):
    from export.pull_reader import read_ranges, read_store_range

    ranges = getattr(partition, "value", None)
    if not isinstance(ranges, list) or not ranges:
        return iter(())  # Spark's stand-in partition when a plan has no range: nothing to read
    if options.path:
        return (batch for rng in ranges for batch in read_store_range(rng, options))
    return read_ranges(ranges, options)


class RocketMQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema):
        return RocketMQBatchReader(SourceOptions.parse(dict(self.options)))

    def streamReader(self, schema):
        return RocketMQStreamReader(SourceOptions.parse(dict(self.options)))


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.source_options = options
        self.ranges: list[QueueRange] | None = None

    def partitions(self):
        # End offsets are fixed here, once: the job reads what existed when it was planned.
        self.ranges = plan(self.source_options)
        return _partitions(self.ranges, self.source_options)

    def read(self, partition):
        yield from _read(partition, self.source_options)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic": {"broker": {"queueId": next}}}`` (the startingOffsets shape), kept
    only in Spark's checkpoint: with a file sink, each message lands exactly once."""

    def __init__(self, options: SourceOptions) -> None:
        self.source_options = options
        self._target: tuple[dict, dict] | None = None

    def _bounds(self) -> list[QueueBounds]:
        if self.source_options.path:
            ranges = plan(_all(self.source_options))
            return [QueueBounds(r.topic, r.broker_name, r.queue_id, r.start, r.end, r.address)
                    for r in ranges]
        import asyncio

        from cluster.client.instance import MQClientInstance
        from export.planner import broker_bounds

        async def fetch():
            client = MQClientInstance(self.source_options.name_server, "EXPORT")
            try:
                return await broker_bounds(self.source_options, client)
            finally:
                await client.shutdown()

        return asyncio.run(fetch())

    def initialOffset(self) -> dict:
        options = self.source_options
        bounds = self._bounds()
        ranges = resolve(bounds, _only_start(options))
        offsets = _table(bounds, lambda b: b.min_offset if options.starting == "earliest" else b.max_offset)
        for r in ranges:
            offsets[r.topic][r.broker_name][str(r.queue_id)] = r.start
        return offsets

    def _latest(self) -> tuple[dict, dict]:
        """Each queue's end and its earliest kept offset, as the brokers (or files) say now."""
        bounds = self._bounds()
        return _table(bounds, lambda b: b.max_offset), _table(bounds, lambda b: b.min_offset)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self):
        limit = self.source_options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else super().getDefaultReadLimit()

    def latestOffset(self, start: dict, limit) -> dict:
        latest, earliest = self._target if self._target is not None else self._latest()
        # Every queue the start names keeps its place, those the route leaves out for now
        # too (a broker group down a moment, dropped from the route): the ones after it begin
        # where it stood when it comes back, not at its end then.
        end = {t: {b: dict(q) for b, q in brokers.items()} for t, brokers in start.items()}
        for topic, brokers in latest.items():
            for broker, queues in brokers.items():
                for queue_id, newest in queues.items():
                    begin = start.get(topic, {}).get(broker, {}).get(queue_id)
                    if begin is None:
                        # A queue first seen since the start (more queues, a new broker group):
                        # from its earliest, as Kafka's source reads a new partition, never
                        # from its end (what it holds already would be skipped). This batch
                        # names it there; the next one reads it.
                        stop = earliest[topic][broker][queue_id]
                    else:
                        stop = max(begin, min(newest, self._ending(topic, broker, queue_id)))
                    end.setdefault(topic, {}).setdefault(broker, {})[queue_id] = stop
        if isinstance(limit, ReadMaxRows):
            end = cap_rows(start, end, limit.max_rows)
        return end

    def _ending(self, topic: str, broker: str, queue_id: str) -> float:
        """Where endingOffsets (JSON) stops a queue: its offset, or no limit (latest, -1, or a
        queue it does not name). An incremental or continuous export with ``--to`` offsets
        reads up to them, then has nothing new."""
        ending = self.source_options.ending
        if not isinstance(ending, dict):
            return float("inf")
        offset = ending.get(topic, {}).get(broker, {}).get(int(queue_id))
        return float("inf") if offset is None or offset < 0 else offset

    def partitions(self, start: dict, end: dict):
        ranges = []
        for topic, brokers in end.items():
            for broker, queues in brokers.items():
                for queue_id, stop in queues.items():
                    begin = start.get(topic, {}).get(broker, {}).get(queue_id, stop)
                    if stop > begin:
                        ranges.append(QueueRange(topic, broker, int(queue_id), begin, stop,
                                                 self._address(topic, broker)))
        return _partitions(ranges, self.source_options)

    def _address(self, topic: str, broker: str) -> str | None:
        if self.source_options.path:
            return None
        cache = getattr(self, "_addresses", None)
        if cache is None or (topic, broker) not in cache:
            # (again on a miss: a broker group back in the route, or new, since the last look)
            cache = self._addresses = {(b.topic, b.broker_name): b.address for b in self._bounds()}
        address = cache.get((topic, broker))
        if address is None:
            raise ExportError(f"{broker} holds {topic} queues this export must read, and the "
                              "name servers do not route to it now: run the export again "
                              "once it is back (it resumes where it stopped)")
        return address

    def read(self, partition):
        yield from _read(partition, self.source_options)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to brokers."""


def _all(options: SourceOptions) -> SourceOptions:
    copy = SourceOptions(**{f: getattr(options, f) for f in options.__slots__})
    copy.starting, copy.ending = "earliest", "latest"
    copy.starting_timestamp = copy.ending_timestamp = None
    return copy


def _only_start(options: SourceOptions) -> SourceOptions:
    copy = SourceOptions(**{f: getattr(options, f) for f in options.__slots__})
    copy.ending, copy.ending_timestamp = "latest", None
    return copy


def _table(bounds: list[QueueBounds], value) -> dict:
    table: dict = {}
    for b in bounds:
        table.setdefault(b.topic, {}).setdefault(b.broker_name, {})[str(b.queue_id)] = value(b)
    return table
