"""Planning: which messages a read covers, fixed before any is read.

A plan is a list of :class:`QueueRange` (topic, broker, queue, ``[start, end)``), resolved once
on the driver: end offsets are snapshotted, so a job reads exactly what existed when it was
planned, however much arrives meanwhile. Large ranges are cut into chunks of ``partitionSize``
messages, and chunks packed into Spark partitions of at most that many (:func:`pack`).
"""

from __future__ import annotations

import asyncio
import heapq
import os
from dataclasses import dataclass

from export.errors import DataLossError, ExportError
from export.options import EARLIEST, LATEST, SourceOptions

LOCAL_BROKER = "local"  # the broker name of rows read from a store directory


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Messages ``[start, end)`` of one queue: plain data, so it pickles to executors."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    address: str | None = None  # where to pull from; None when reading store files

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def split(ranges: list[QueueRange], size: int) -> list[QueueRange]:
    """Chunks of at most ``size`` messages, largest first so long tasks start early."""
    chunks = []
    for r in ranges:
        for start in range(r.start, r.end, size):
            chunks.append(QueueRange(r.topic, r.broker_name, r.queue_id, start,
                                     min(start + size, r.end), r.address))
    return sorted(chunks, key=lambda c: (-c.count, c.topic, c.broker_name, c.queue_id, c.start))


def pack(chunks: list[QueueRange], size: int, min_partitions: int) -> list[list[QueueRange]]:
    """Spark partitions of chunks: at most ``size`` messages each, small queues together.

    A Spark task costs ~50 ms to schedule and run here however little it reads, so a topic of
    1,024 small queues as 1,024 tasks spent 50 s on 93,000 messages. Chunks go, largest first,
    to the partition holding the fewest messages while that stays within ``size``; there are
    at least ``min_partitions`` (as many as there are chunks, if fewer), so every core works.
    """
    if not chunks:
        return []
    total = sum(c.count for c in chunks)
    count = min(len(chunks), max(min_partitions, -(-total // size)))
    bins: list[tuple[int, int]] = [(0, i) for i in range(count)]  # (messages, index): a heap
    parts: list[list[QueueRange]] = [[] for _ in range(count)]
    for chunk in sorted(chunks, key=lambda c: -c.count):
        held, index = bins[0]
        if held and held + chunk.count > size:
            index = len(parts)
            parts.append([chunk])
            heapq.heappush(bins, (chunk.count, index))
            continue
        parts[index].append(chunk)
        heapq.heapreplace(bins, (held + chunk.count, index))
    return sorted(parts, key=lambda p: -sum(c.count for c in p))  # long tasks start first


def offsets_json(ranges: list[QueueRange], which: str = "end") -> dict:
    """``{"topic": {"broker": {"queueId": offset}}}``: the shape of startingOffsets."""
    table: dict = {}
    for r in ranges:
        table.setdefault(r.topic, {}).setdefault(r.broker_name, {})[str(r.queue_id)] = getattr(r, which)
    return table


def _pick(spec, topic: str, broker: str, queue_id: int, default: int) -> int:
    """An offset from a JSON spec, EARLIEST/LATEST markers, or ``default`` when absent."""
    if isinstance(spec, dict):
        return spec.get(topic, {}).get(broker, {}).get(queue_id, default)
    return EARLIEST if spec == "earliest" else LATEST


@dataclass(slots=True)
class QueueBounds:
    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    address: str | None = None


def resolve(bounds: list[QueueBounds], options: SourceOptions,
            by_time=None, keep_empty: bool = False) -> list[QueueRange]:
    """Turn each queue's min/max and the options into ``[start, end)``; ``by_time(bounds, ms)``
    gives the first offset stored at or after ``ms`` (None: time bounds filter rows only).
    ``keep_empty`` keeps queues with nothing to read, as ``[start, start)``: a plan handed on
    as offsets must name them, or a reader that resolves it again reads them whole."""
    ranges = []
    for b in bounds:
        start = _pick(options.starting, b.topic, b.broker_name, b.queue_id, EARLIEST)
        end = _pick(options.ending, b.topic, b.broker_name, b.queue_id, LATEST)
        start = b.min_offset if start == EARLIEST else b.max_offset if start == LATEST else start
        end = b.min_offset if end == EARLIEST else b.max_offset if end == LATEST else end
        if options.starting_timestamp is not None and by_time is not None:
            start = max(start, by_time(b, options.starting_timestamp))
        if options.ending_timestamp is not None and by_time is not None:
            end = min(end, by_time(b, options.ending_timestamp))
        end = min(end, b.max_offset)
        if end <= start:  # nothing asked for here (so nothing lost either)
            if keep_empty:
                ranges.append(QueueRange(b.topic, b.broker_name, b.queue_id, start, start,
                                         b.address))
            continue
        if start < b.min_offset:
            if options.fail_on_data_loss:
                raise DataLossError(
                    f"{b.topic} {b.broker_name} queue {b.queue_id}: offset {start} was asked for but "
                    f"the oldest kept is {b.min_offset} (older files expired); set "
                    "failOnDataLoss=false (`rocketdesk export --skip-lost`) to start at the oldest")
            start = b.min_offset
        if end > start:
            ranges.append(QueueRange(b.topic, b.broker_name, b.queue_id, start, end, b.address))
        elif keep_empty:
            ranges.append(QueueRange(b.topic, b.broker_name, b.queue_id, start, start, b.address))
    return ranges


# -- from brokers -----------------------------------------------------------------------------------
def plan_from_brokers(options: SourceOptions, keep_empty: bool = False) -> list[QueueRange]:
    return asyncio.run(_plan_from_brokers(options, keep_empty))


async def broker_bounds(options: SourceOptions, client) -> list[QueueBounds]:
    """Min and max offsets of every queue of the topics, from the masters (a slave when its
    master is down)."""
    from cluster.remoting.codec import request
    from cluster.remoting.codes import RequestCode, ResponseCode

    bounds = []
    for topic in options.topics:
        route = await client.fetch_route(topic)
        if route is None:
            raise ExportError(f"the name servers know no topic {topic!r}")
        addrs = route.broker_addrs()
        for queue_data in route.queue_datas:
            broker = queue_data["brokerName"]
            if options.broker_names and broker not in options.broker_names:
                continue
            address = addrs.get(broker, {}).get(0) or next(iter(addrs.get(broker, {}).values()), None)
            if address is None:
                raise ExportError(f"no address for broker {broker} of topic {topic}")
            for queue_id in range(queue_data["readQueueNums"]):
                values = []
                for code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET):
                    answer = await client.remoting.invoke(address, request(
                        code, {"topic": topic, "queueId": queue_id}), 5)
                    if answer.code != ResponseCode.SUCCESS:
                        raise ExportError(f"{broker} answered {answer.code} for the offsets of "
                                          f"{topic} queue {queue_id}: {answer.remark}")
                    values.append(int(answer.field("offset") or 0))
                bounds.append(QueueBounds(topic, broker, queue_id, values[0], values[1], address))
    return bounds


async def _plan_from_brokers(options: SourceOptions, keep_empty: bool = False) -> list[QueueRange]:
    from cluster.client.instance import MQClientInstance
    from cluster.remoting.codec import request
    from cluster.remoting.codes import RequestCode

    client = MQClientInstance(options.name_server, "EXPORT")
    try:
        bounds = await broker_bounds(options, client)
        by_time: dict[tuple, int] = {}
        for b in bounds:
            for ms in (options.starting_timestamp, options.ending_timestamp):
                if ms is None:
                    continue
                answer = await client.remoting.invoke(b.address, request(
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                    {"topic": b.topic, "queueId": b.queue_id, "timestamp": ms}), 5)
                by_time[(b.topic, b.broker_name, b.queue_id, ms)] = int(answer.field("offset") or 0)
        return resolve(bounds, options,
                       lambda b, ms: by_time[(b.topic, b.broker_name, b.queue_id, ms)], keep_empty)
    finally:
        await client.shutdown()


# -- from a store directory --------------------------------------------------------------------------
def plan_from_store(options: SourceOptions, keep_empty: bool = False) -> list[QueueRange]:
    from export.store_reader import StoreQueue

    bounds = []
    for topic in options.topics:
        directory = os.path.join(options.path, "consumequeue", topic)
        if not os.path.isdir(directory):
            raise ExportError(f"the store at {options.path} has no topic {topic!r}")
        for name in sorted(os.listdir(directory), key=lambda n: (len(n), n)):
            if not name.isdigit():
                continue
            queue = StoreQueue(options.path, topic, int(name))
            low, high = queue.bounds()
            bounds.append(QueueBounds(topic, LOCAL_BROKER, int(name), low, high))
    # Time bounds filter rows: a store directory has no broker to binary-search for us.
    return resolve(bounds, options, by_time=None, keep_empty=keep_empty)


def plan(options: SourceOptions, keep_empty: bool = False) -> list[QueueRange]:
    """The ranges to read; with ``keep_empty`` also the queues with nothing to read (see
    :func:`resolve`)."""
    if options.path:
        return plan_from_store(options, keep_empty)
    return plan_from_brokers(options, keep_empty)
