"""The read path: records of one queue from a logical offset (``DefaultMessageStore.getMessage``).

Answers with RocketMQ's statuses, so the broker can map them onto pull responses:
NO_MATCHED_LOGIC_QUEUE and NO_MESSAGE_IN_QUEUE for unknown or empty queues; OFFSET_TOO_SMALL,
OFFSET_OVERFLOW_ONE and OFFSET_OVERFLOW_BADLY with the offset to continue from; FOUND,
NO_MATCHED_MESSAGE (all filtered out) or MESSAGE_WAS_REMOVING (its CommitLog file was deleted).

One read stays within one ConsumeQueue file and stops at the transfer limits: 32 messages /
256 KiB when the data is likely in memory, 8 / 64 KiB when it is far behind the write position
(``accessMessageInMemoryMaxRatio`` of RAM), in which case it also suggests pulling from a slave.
"""

from __future__ import annotations

from common import speedups
from storage.consume_queue import CQ_UNIT
from storage.errors import OffsetOutOfRangeError
from storage.results import GetMessageResult, GetMessageStatus, MessageFilter

FILLER_SIZE = 0x7FFFFFFF

# Units a filtered read looks through at most (RocketMQ's maxFilterMessageCount is 16,000).
FILTER_SCAN_UNITS = 16_000


def read_queue(
    store,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    message_filter: MessageFilter | None = None,
    joined: bool = False,
) -> GetMessageResult:
    """Read up to ``max_msg_nums`` records of ``topic``/``queue_id`` from logical ``offset``.
    ``joined``, for a pull's answer: ``messages`` holds the records as chunks of one or more
    records one after another (the compiled gather copies a file's run of them into one
    bytes), their count in ``joined_count``, and no queue offsets; a pull within one file
    (nearly all) is then one chunk, its body never joined again."""
    commit_log = store.commit_log
    max_phy = commit_log.get_max_offset()
    queue = store.find_consume_queue(topic, queue_id, create=False)
    if queue is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset = queue.get_min_offset_in_queue()
    max_offset = queue.get_max_offset_in_queue()
    if max_offset == 0:
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    if offset < min_offset:
        return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        next_offset = 0 if min_offset == 0 else max_offset
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_offset,
                                max_offset)
    # With a filter, look further so that a sparse tag still fills a pull; units are read in
    # growing chunks, so a pull that fills at once does not unpack 16,000 of them.
    max_filter = max(FILTER_SCAN_UNITS, max_msg_nums) if message_filter else max_msg_nums
    requested = min(max_filter, max(4 * max_msg_nums, 64))
    first = queue.get_units_raw(offset, requested)
    if not first:
        units_per_file = queue.mapped_file_size // 20
        next_file = (offset // units_per_file + 1) * units_per_file
        return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset)
    result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    status = GetMessageStatus.NO_MATCHED_MESSAGE
    taken = 0  # records in result.messages (chunks when joined)
    limits = _TransferLimits(store.config)
    memory_limit = store.memory_limit
    total_bytes = 0
    skip_below = -1  # units pointing into a deleted CommitLog file
    max_pulling = max_phy
    consumed = None
    index = -1
    start = 0
    if _gather_records is not None and (
            message_filter is None or getattr(message_filter, "matches_all", False)):
        # Most pulls (no filter, or a subscription to "*"): the units point into one CommitLog
        # file; its records are copied out in one call, and the loop below takes over where
        # that stops (a unit elsewhere, the next chunk of units).
        start, max_pulling, full, taken = _gather_from_file(
            commit_log, first, offset, max_phy, memory_limit, max_msg_nums, limits, result,
            joined)
        if taken:
            status = GetMessageStatus.FOUND
            total_bytes = sum(map(len, result.messages))
        if full:
            consumed = start
        index = start - 1
        if max_pulling < 0:
            max_pulling = max_phy
    units = () if consumed is not None else _units(queue, offset, first, requested, max_filter,
                                                   start)
    for index, (phy, size, tags_code) in enumerate(units, start):
        if size == FILLER_SIZE:
            continue
        max_pulling = phy
        if phy < skip_below:
            continue
        in_disk = max_phy - phy > memory_limit
        if taken and limits.full(size, max_msg_nums, total_bytes, taken, in_disk):
            consumed = index
            break
        if message_filter is not None and not message_filter.is_matched_by_consume_queue(tags_code):
            continue
        try:
            data = commit_log.get_message(phy, size)
        except OffsetOutOfRangeError:
            if not result.messages:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING
            skip_below = commit_log.roll_next_file(phy)
            continue
        if message_filter is not None and not message_filter.is_matched_by_commit_log(data):
            continue
        result.messages.append(data)
        if not joined:
            result.queue_offsets.append(offset + index)
        taken += 1
        total_bytes += size
        status = GetMessageStatus.FOUND
        skip_below = -1
    if consumed is None:
        consumed = index + 1  # every unit read was looked at
    result.status = status
    if joined:
        result.joined_count = taken
    result.next_begin_offset = offset + consumed
    result.suggest_pulling_from_slave = max_phy - max_pulling > memory_limit
    return result


def _gather_from_file(commit_log, first: bytes, offset: int, max_phy: int, memory_limit: int,
                      max_msg_nums: int, limits: _TransferLimits, result: GetMessageResult,
                      joined: bool):
    """The compiled gather over the CommitLog file the first unit points into: (the index of
    the first unit not taken, the last CommitLog offset looked at or -1, whether the pull is
    full, how many records it took); joined, they go into ``result.messages`` as one chunk."""
    assert _gather_records is not None  # (read_queue asks only when the core is built)
    if len(first) < CQ_UNIT.size:
        return 0, -1, False, 0
    mapped_file = commit_log.mapped_file_queue.find_mapped_file_by_offset(
        CQ_UNIT.unpack_from(first)[0])
    if mapped_file is None or not mapped_file.hold():
        return 0, -1, False, 0  # (the loop words what is wrong)
    try:
        args = (first, 0, offset, mapped_file.mm, mapped_file.file_from_offset,
                mapped_file.read_position, max_phy, memory_limit, max_msg_nums, 0, 0,
                limits.as_tuple())
        if joined:
            assert _gather_joined is not None  # (built with _gather_records)
            start, max_pulling, full, taken, records = _gather_joined(*args)
            if taken:
                result.messages.append(records)
            return start, max_pulling, full, taken
        before = len(result.messages)
        start, max_pulling, full = _gather_records(*args, result.messages, result.queue_offsets)
        return start, max_pulling, full, len(result.messages) - before
    finally:
        mapped_file.release()


def gather_records_pure(units: bytes, start: int, base_offset: int, mm, file_from: int,
                        readable: int, max_phy: int, memory_limit: int, max_nums: int,
                        count: int, total: int, limits: tuple[int, int, int, int],
                        records: list, queue_offsets: list) -> tuple[int, int, bool]:
    """The records ``units[start * 20:]`` point at while they lie in ``mm`` (a CommitLog file
    from ``file_from``, readable up to ``file_from + readable``), each appended to ``records``
    and its queue offset (``base_offset`` + unit index) to ``queue_offsets``, as the loop of
    :func:`read_queue` takes them: fillers passed over, stopping before a unit outside the
    file (or of no size) and when the pull is full by ``limits`` (memory bytes, memory count,
    disk bytes, disk count), ``count`` records of ``total`` bytes having been taken before.
    Returns (the index of the first unit not taken, the CommitLog offset of the last unit
    looked at or -1, whether the pull is full)."""
    readable = min(readable, len(mm))
    memory_bytes, memory_count, disk_bytes, disk_count = limits
    max_pulling = -1
    index = max(start, 0)
    for index in range(max(start, 0), len(units) // CQ_UNIT.size):
        phy, size, _ = CQ_UNIT.unpack_from(units, index * CQ_UNIT.size)
        if size == FILLER_SIZE:
            continue
        if size <= 0 or phy < file_from or phy + size > file_from + readable:
            return index, max_pulling, False
        max_pulling = phy
        if count > 0:
            in_disk = max_phy - phy > memory_limit
            if count >= max_nums or (
                    (total + size > disk_bytes or count >= disk_count) if in_disk
                    else (total + size > memory_bytes or count >= memory_count)):
                return index, max_pulling, True
        records.append(bytes(mm[phy - file_from:phy - file_from + size]))
        queue_offsets.append(base_offset + index)
        count += 1
        total += size
    index = max(start, len(units) // CQ_UNIT.size)
    return index, max_pulling, False


def gather_joined_pure(units: bytes, start: int, base_offset: int, mm, file_from: int,
                       readable: int, max_phy: int, memory_limit: int, max_nums: int,
                       count: int, total: int,
                       limits: tuple[int, int, int, int]) -> tuple[int, int, bool, int, bytes]:
    """:func:`gather_records_pure`'s records one after another in one bytes, and how many:
    (the index of the first unit not taken, the last CommitLog offset looked at or -1, whether
    the pull is full, the records taken, those records). The compiled twin copies each once."""
    records: list[bytes] = []
    found = gather_records_pure(units, start, base_offset, mm, file_from, readable, max_phy,
                                memory_limit, max_nums, count, total, limits, records, [])
    return (*found, len(records), b"".join(records))


def _units(queue, offset: int, first: bytes, requested: int, limit: int, skip: int = 0):
    """Units from ``offset`` within one ConsumeQueue file: ``first`` (from its unit ``skip``
    on), then further chunks."""
    raw = first
    read = 0
    chunk = requested
    while raw:
        yield from CQ_UNIT.iter_unpack(raw[skip * CQ_UNIT.size:] if skip and not read else raw)
        count = len(raw) // CQ_UNIT.size
        read += count
        if count < chunk or read >= limit:
            return  # the end of the file, of the queue, or of what one pull may scan
        chunk = min(chunk * 4, limit - read)
        raw = queue.get_units_raw(offset + read, chunk)


class _TransferLimits:
    """maxTransfer{Bytes,Count}OnMessageIn{Memory,Disk}: when one pull has enough."""

    __slots__ = ("disk_bytes", "disk_count", "memory_bytes", "memory_count")

    def __init__(self, config) -> None:
        self.memory_bytes = config.max_transfer_bytes_on_message_in_memory
        self.memory_count = config.max_transfer_count_on_message_in_memory
        self.disk_bytes = config.max_transfer_bytes_on_message_in_disk
        self.disk_count = config.max_transfer_count_on_message_in_disk

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.memory_bytes, self.memory_count, self.disk_bytes, self.disk_count

    def full(self, size: int, max_nums: int, total: int, count: int, in_disk: bool) -> bool:
        if count >= max_nums:
            return True
        if in_disk:
            return total + size > self.disk_bytes or count >= self.disk_count
        return total + size > self.memory_bytes or count >= self.memory_count


# The compiled gather (common/_pull_gather.c) when the core is built; without it the loop of
# read_queue takes every unit itself (gather_records_pure is its twin for the tests).
_gather_records = None if speedups.store_core is None else speedups.store_core.gather_records


def _joined_by_records(*args):
    """gather_joined of a compiled core built before it: its record-by-record gather, joined."""
    records: list[bytes] = []
    assert _gather_records is not None
    found = _gather_records(*args, records, [])
    return (*found, len(records), b"".join(records))


_gather_joined = (None if speedups.store_core is None
                  else getattr(speedups.store_core, "gather_joined", _joined_by_records))
