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

from storage.consume_queue import CQ_UNIT
from storage.errors import OffsetOutOfRangeError
from storage.results import GetMessageResult, GetMessageStatus, MessageFilter

FILLER_SIZE = 0x7FFFFFFF


def read_queue(
    store,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    message_filter: MessageFilter | None = None,
) -> GetMessageResult:
    """Read up to ``max_msg_nums`` records of ``topic``/``queue_id`` from logical ``offset``."""
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
    max_filter = max(16000, max_msg_nums) if message_filter else max_msg_nums
    requested = min(max_filter, max(4 * max_msg_nums, 64))
    first = queue.get_units_raw(offset, requested)
    if not first:
        units_per_file = queue.mapped_file_size // 20
        next_file = (offset // units_per_file + 1) * units_per_file
        return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset)
    result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    status = GetMessageStatus.NO_MATCHED_MESSAGE
    limits = _TransferLimits(store.config)
    memory_limit = store.memory_limit
    total_bytes = 0
    skip_below = -1  # units pointing into a deleted CommitLog file
    max_pulling = max_phy
    consumed = None
    index = -1
    for index, (phy, size, tags_code) in enumerate(_units(queue, offset, first, requested, max_filter)):
        if size == FILLER_SIZE:
            continue
        max_pulling = phy
        if phy < skip_below:
            continue
        in_disk = max_phy - phy > memory_limit
        if result.messages and limits.full(size, max_msg_nums, total_bytes, len(result.messages),
                                           in_disk):
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
        result.queue_offsets.append(offset + index)
        total_bytes += size
        status = GetMessageStatus.FOUND
        skip_below = -1
    if consumed is None:
        consumed = index + 1  # every unit read was looked at
    result.status = status
    result.next_begin_offset = offset + consumed
    result.suggest_pulling_from_slave = max_phy - max_pulling > memory_limit
    return result


def _units(queue, offset: int, first: bytes, requested: int, limit: int):
    """Units from ``offset`` within one ConsumeQueue file: ``first``, then further chunks."""
    raw = first
    read = 0
    chunk = requested
    while raw:
        yield from CQ_UNIT.iter_unpack(raw)
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

    def full(self, size: int, max_nums: int, total: int, count: int, in_disk: bool) -> bool:
        if count >= max_nums:
            return True
        if in_disk:
            return total + size > self.disk_bytes or count >= self.disk_count
        return total + size > self.memory_bytes or count >= self.memory_count
