"""Reading a queue range from a broker over PULL_MESSAGE, as a tool does: the TOOLS_CONSUMER
group, no commit-offset flag, so no consumer's offsets move.

Executors run this in Spark's Python workers, one range at a time, over the blocking remoting
client (no event loop to start per partition) and the client's own pull request.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from cluster.client.pull import TOOLS_GROUP, pull_request
from cluster.remoting.blocking import BlockingRemotingClient
from cluster.remoting.codes import ResponseCode
from cluster.remoting.errors import RemotingError
from common import speedups
from common.platform import allocator
from export.decode import BATCH_ROWS, BatchBuilder
from export.errors import DataLossError, ExportError
from export.options import SourceOptions
from export.planner import QueueRange
from storage.record import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MIN_MESSAGE_SIZE


def read_ranges(ranges: list[QueueRange], options: SourceOptions) -> Iterator:
    """Arrow batches of the messages of ``ranges`` (one Spark partition) the filters keep: one
    connection and one batch builder for the ranges of each broker and topic, so many small
    queues make full batches, not a batch each."""
    # In Spark's Python worker: responses and batches of MiBs, their memory reused while the
    # partitions are read and handed back once the worker has read none for a few seconds (it
    # may serve others next; handed back after each partition, the next faulted it in again).
    allocator.keep_big_buffers()
    allocator.hold_free_memory()
    try:
        yield from _read_ranges(ranges, options)
    finally:
        allocator.release_free_memory_when_idle()


def _read_ranges(ranges: list[QueueRange], options: SourceOptions) -> Iterator:
    groups: dict[tuple, list[QueueRange]] = {}
    for rng in ranges:
        groups.setdefault((rng.broker_name, rng.topic, rng.address), []).append(rng)
    for (broker_name, topic, address), group in groups.items():
        builder = BatchBuilder(broker_name, options, topic)
        bodies = PullBodies()
        try:
            remoting = BlockingRemotingClient(address)
        except RemotingError as exc:
            raise ExportError(f"cannot read {topic} from {broker_name}: {exc}") from exc
        try:
            for rng in group:
                yield from _pull_range(remoting, rng, options, builder, bodies)
        finally:
            remoting.close()
        yield from builder.take_batches()


class PullBodies:
    """Where the bodies of one batch's pull responses are read to: side by side in one buffer
    (``BlockingRemotingClient.invoke``'s ``body_into``), so the batch is cut from it as it lies,
    with no copy to join them. A body that does not fit what is left starts a new buffer (the
    batch builder then cuts each buffer by itself). The buffer is not zeroed: every byte the
    cut reads was received into it."""

    SIZE = 16 << 20  # a batch's records of 1 KiB (BATCH_ROWS) and then some; heap-kept (allocator)

    __slots__ = ("buffer", "last", "used")

    def __init__(self) -> None:
        self.buffer: memoryview | None = None
        self.used = 0
        self.last = 0  # where the last body starts

    def __call__(self, length: int) -> memoryview:
        buffer = self.buffer
        if buffer is None or self.used + length > len(buffer):
            import numpy as np

            buffer = self.buffer = memoryview(np.empty(max(self.SIZE, length), np.uint8))
            self.used = 0
        self.last = self.used
        self.used += length
        return buffer[self.last:self.used]

    def room(self) -> int:
        return 0 if self.buffer is None else len(self.buffer) - self.used

    def release(self) -> None:
        """The batch is cut: the next body starts a new buffer (the old one goes with the
        batch builder's references to it)."""
        self.buffer = None
        self.used = self.last = 0


# PULL_RETRY_IMMEDIATELY also says "skip to nextBeginOffset" for records that are gone, not
# only for records no tag matched: the remark (the store's status, as RocketMQ words it) tells
# which. A slave answers so where a master would say PULL_OFFSET_MOVED.
_GONE = frozenset({"MESSAGE_WAS_REMOVING", "OFFSET_TOO_SMALL"})


def _pull_range(remoting, rng: QueueRange, options: SourceOptions, builder,
                bodies: PullBodies) -> Iterator:
    offset = rng.start
    while offset < rng.end:
        try:
            answer = remoting.invoke(pull_request(
                TOOLS_GROUP, rng.topic, rng.queue_id, offset,
                min(options.pull_batch_size, rng.end - offset),
                subscription=options.tag_expression), body_into=bodies)
        except RemotingError as exc:
            raise ExportError(f"reading {rng.topic} queue {rng.queue_id} from "
                              f"{rng.broker_name} failed: {exc}") from exc
        next_offset = int(answer.field("nextBeginOffset") or offset)
        if answer.code == ResponseCode.SUCCESS:
            body = answer.body
            starts, size = _record_starts(body, rng.end)
            if size != len(body) and not _past_the_end(body, size, rng.end):
                # A record running past the answer (never cut past it), or one the walk could
                # not read (cut short, no size) whose records would be skipped unseen.
                raise DataLossError(f"{rng.broker_name} answered a pull of {rng.topic} queue "
                                    f"{rng.queue_id} at offset {offset} with a record cut short")
            if len(starts):
                # (where the records lie in the buffer the body was read into)
                builder.add(bodies.buffer, _shifted(starts, bodies.last), size)
            room = bodies.room() < len(body)
            del answer, body  # (not kept across the yield: the buffer goes with its batch)
            if builder.full() or room:
                yield from builder.take_batches()
                bodies.release()
        elif answer.code == ResponseCode.PULL_OFFSET_MOVED or (
                answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                and (answer.remark or "").strip() in _GONE):
            if options.fail_on_data_loss:
                raise DataLossError(f"{rng.topic} {rng.broker_name} queue {rng.queue_id}: offset "
                                    f"{offset} is gone (moved to {next_offset}); set "
                                    "failOnDataLoss=false (`rocketdesk export --skip-lost`) "
                                    "to go on past it")
        elif answer.code == ResponseCode.PULL_NOT_FOUND and next_offset <= offset:
            return  # nothing more before the end (the queue shrank?)
        elif answer.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            raise ExportError(f"{rng.broker_name} answered a pull of {rng.topic} queue "
                              f"{rng.queue_id} with code {answer.code}: {answer.remark}")
        if next_offset <= offset:
            raise ExportError(f"{rng.broker_name} did not advance past offset {offset} of "
                              f"{rng.topic} queue {rng.queue_id}")
        offset = next_offset


_SIZE_AND_QUEUE_OFFSET = struct.Struct(">i16xq")  # TOTALSIZE .. QUEUEOFFSET


def _record_starts(body: bytes, end: int):
    """Where each record of a pull response starts (a list or an int64 array), up to the first
    at or past queue offset ``end``; and how many bytes those records take. Compiled when the
    core is built (common/_pull_gather.c), a Python step a record otherwise."""
    if _compiled_starts is None:
        return _record_starts_pure(body, end)
    import numpy as np

    starts, size = _compiled_starts(body, end)
    return np.frombuffer(starts, np.int64), size


def _past_the_end(body, stop: int, end: int) -> bool:
    """Whether the walk of a pull answer's records stopped at ``stop`` (short of its end) at a
    whole record's head at or past queue offset ``end``: the range is read, the rest is not
    wanted. Anything else there is damage."""
    if stop > len(body) or len(body) - stop < _SIZE_AND_QUEUE_OFFSET.size:
        return False
    return _SIZE_AND_QUEUE_OFFSET.unpack_from(body, stop)[1] >= end


def _shifted(starts, base: int):
    """Record starts within a body as starts within the buffer holding it at ``base``."""
    if not base:
        return starts
    if isinstance(starts, list):
        return [start + base for start in starts]
    return starts + base


def _record_starts_pure(body: bytes, end: int) -> tuple[list[int], int]:
    starts = []
    pos, limit = 0, len(body) - _SIZE_AND_QUEUE_OFFSET.size
    unpack = _SIZE_AND_QUEUE_OFFSET.unpack_from
    while pos <= limit:
        size, queue_offset = unpack(body, pos)
        if queue_offset >= end or size <= 0:
            break
        starts.append(pos)
        pos += size
    return starts, pos


def read_store_range(rng: QueueRange, options: SourceOptions) -> Iterator:
    """Arrow batches of ``rng`` read from the store directory ``options.path``."""
    import numpy as np

    from export.store_reader import CommitLogReader, StoreQueue

    allocator.keep_big_buffers()
    allocator.hold_free_memory()
    builder = BatchBuilder(rng.broker_name, options, rng.topic)
    log = CommitLogReader(options.path)
    offsets, sizes = StoreQueue(options.path, rng.topic, rng.queue_id).unit_arrays(rng.start, rng.end)
    try:
        i = 0
        while i < len(offsets):
            # The units of one CommitLog file, checked and handed over before it is unmapped.
            base, view = log.view_holding(int(offsets[i]))
            j = int(np.searchsorted(offsets, base + len(view), "left"))
            for k in range(i, j, BATCH_ROWS):
                positions, lengths = offsets[k:min(j, k + BATCH_ROWS)] - base, sizes[k:min(j, k + BATCH_ROWS)]
                _check_units(view, positions, lengths, base)
                builder.add(view, positions, int(lengths.sum()))
                if builder.full():
                    yield from builder.take_batches()
            yield from builder.take_batches()
            i = j
    finally:
        log.close()
        allocator.release_free_memory_when_idle()


def _check_units(view, positions, lengths, base: int) -> None:
    """Every unit must point at a message record of its size: anything else (a blank, the
    zeros after the last record, the middle of a record) is data loss, not data."""
    import numpy as np

    from export.columnar import gather

    bad = (positions < 0) | (lengths < MIN_MESSAGE_SIZE) | (positions + lengths > len(view))
    if not bad.any():
        buf = np.frombuffer(view, np.uint8)
        head = gather(buf, positions, 0, 8).view(">u4")  # (size, magic code) a row
        magic = head[:, 1]
        bad = (head[:, 0] != lengths) | ((magic != MESSAGE_MAGIC_CODE)
                                         & (magic != MESSAGE_MAGIC_CODE_V2))
        del buf, head, magic
    if bad.any():
        first = int(np.argmax(bad))
        raise DataLossError(f"the CommitLog holds no {int(lengths[first])}-byte record at offset "
                            f"{int(positions[first]) + base}")


_compiled_starts = None if speedups.store_core is None else speedups.store_core.record_starts
