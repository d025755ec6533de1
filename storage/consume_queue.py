"""ConsumeQueue: the per-topic, per-queue index of CommitLog positions.

Each unit is 20 bytes, big-endian (RocketMQ's ``CQ_STORE_UNIT_SIZE``)::

    | commitlog offset (int64) | message size (int32) | tag hash code (int64) |

Logical offset N lives at byte N*20 of the queue's concatenated files (300,000 units a file by
default). When a queue's first file must start past logical offset 0 (its older files were
deleted, or a slave starts late), the units before the first real one are fillers:
offset 0, size 0x7FFFFFFF, tags 0. Units are only ever written by dispatch (``dispatch.py``).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from typing import NamedTuple

from storage.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE = 20
CQ_UNIT = struct.Struct(">qiq")
FILLER_UNIT = CQ_UNIT.pack(0, 0x7FFFFFFF, 0)
# Blocks claimed ahead of the writer (file_space.py): small, as a broker may hold thousands of queues.
CQ_ALLOCATE_AHEAD = 64 * 1024
# Units read at a time when looking for the first one the CommitLog still holds (20 KiB), and
# when recovering a file's run of valid units (1 MiB).
MIN_OFFSET_SCAN_UNITS = 1024
RECOVER_SCAN_UNITS = 52_428


class ConsumeQueueUnit(NamedTuple):
    commit_log_offset: int
    size: int
    tags_code: int


class ConsumeQueue:
    """One topic queue's units, in a MappedFileQueue under ``consumequeue/<topic>/<queueId>``."""

    def __init__(self, topic: str, queue_id: int, root_dir: str, mapped_file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        size = mapped_file_size - mapped_file_size % CQ_STORE_UNIT_SIZE
        self.mapped_file_size = size
        self.store_path = os.path.join(root_dir, topic, str(queue_id))
        self.mapped_file_queue = MappedFileQueue(self.store_path, size, durable_create=False,
                                                 allocate_ahead=CQ_ALLOCATE_AHEAD)
        # End (offset + size) of the last CommitLog record indexed here: dispatch dedup key.
        self.max_physic_offset = -1
        self.min_logic_offset = 0  # bytes

    # -- lifecycle ---------------------------------------------------------------------------
    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the last valid unit (offset >= 0 and size > 0), from the third-last file on."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        index = max(0, len(files) - 3)
        size = self.mapped_file_size
        process_offset = files[index].file_from_offset
        while index < len(files):
            mapped_file = files[index]
            position = self._valid_end(mapped_file, size)
            process_offset = mapped_file.file_from_offset + position
            if position < size:
                break
            index += 1
        self._truncate_logic_to(process_offset)

    def _valid_end(self, mapped_file, size: int) -> int:
        """Where the file's run of valid units from its start ends (``size``: all valid),
        noting the last unit's record end in max_physic_offset. Only the written part is read,
        a piece at a time: past the file's first hole every unit is zeros, so the run ends
        there. (A start reads the last files of every queue: whole, they were 6 MB each, most
        of it a hole, for a thousand queues 6 GB of zeros.)"""
        written = mapped_file.data_end(0)
        # (a unit across the hole's edge is read whole, the hole's part as zeros)
        limit = min(size, -(-written // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE)
        chunk = RECOVER_SCAN_UNITS * CQ_STORE_UNIT_SIZE
        unpack = CQ_UNIT.unpack_from
        for base in range(0, limit, chunk):
            data = mapped_file.read_raw(base, min(chunk, limit - base))
            for at in range(0, len(data) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                offset, unit_size, _ = unpack(data, at)
                if offset >= 0 and unit_size > 0:
                    if unit_size != 0x7FFFFFFF:
                        self.max_physic_offset = offset + unit_size
                else:
                    return base + at
        return limit

    def _truncate_logic_to(self, logic_offset: int) -> None:
        queue = self.mapped_file_queue
        queue.truncate_dirty_files(logic_offset)
        last = queue.get_last_mapped_file()
        if last is not None and last.wrote_position == 0 and len(queue.mapped_files) > 1:
            queue.delete_last_mapped_file()
        queue.flushed_where = queue.committed_where = logic_offset

    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def shutdown(self) -> None:
        try:
            self.mapped_file_queue.flush_all()
        finally:
            self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    # -- writing (dispatch only) ----------------------------------------------------------------
    def put_message_position_info(
        self, offset: int, size: int, tags_code: int, cq_offset: int
    ) -> None:
        """Append the unit for logical offset ``cq_offset`` (ignored when already present).

        Raises OSError when the file cannot be created or grown (disk full); nothing has
        changed then, and dispatch calls again with the same unit later.
        """
        if offset + size <= self.max_physic_offset:
            return  # dispatched again after recovery: already indexed
        expect_logic = cq_offset * CQ_STORE_UNIT_SIZE
        files = self.mapped_file_queue.mapped_files
        if files:  # the common case, in a few steps: the next unit of the last file, claimed
            tail = files[-1]
            pos = tail.wrote_position
            if (pos > 0 and expect_logic == tail.file_from_offset + pos
                    and pos + CQ_STORE_UNIT_SIZE <= tail.allocated_position
                    and pos + CQ_STORE_UNIT_SIZE <= tail.file_size and tail.write_buffer is None):
                CQ_UNIT.pack_into(tail.mm, pos, offset, size, tags_code)
                tail.wrote_position = pos + CQ_STORE_UNIT_SIZE
                self.max_physic_offset = offset + size
                return
        queue = self.mapped_file_queue
        mapped_file = queue.get_last_mapped_file_or_create(expect_logic)
        if mapped_file.first_create_in_queue and mapped_file.wrote_position == 0 and cq_offset:
            self._fill_pre_blank(mapped_file, expect_logic)
        current = mapped_file.file_from_offset + mapped_file.wrote_position
        if expect_logic < current:
            log.warning("%s-%d: unit %d built twice; keeping the first", self.topic,
                        self.queue_id, cq_offset)
            return
        if expect_logic > current:
            log.error("%s-%d: logic offset gap, expected unit %d, queue ends at %d",
                      self.topic, self.queue_id, cq_offset, current // CQ_STORE_UNIT_SIZE)
        mapped_file.append(CQ_UNIT.pack(offset, size, tags_code))
        # Only once the unit is written: this is what makes a retry skip the record.
        self.max_physic_offset = offset + size

    def put_run(self, run: list, count: int, write_units: Callable) -> bool:
        """Append the units of ``run[:count]``, records of this queue in log order
        (storage/dispatch_runs.py), in one write to the last file, when their queue offsets
        follow on from its last unit without a gap and they all fit it; False, having done
        nothing, for anything else (a new file, a claim to make, a run dispatched before): the
        caller puts them one by one."""
        first, last = run[0], run[count - 1]
        if first[0] + first[1] <= self.max_physic_offset:
            return False  # dispatched again after a failure: one by one, each skipped or put
        if last[3] - first[3] != count - 1:
            return False  # (increasing in log order: so these are consecutive)
        files = self.mapped_file_queue.mapped_files
        if not files:
            return False
        tail = files[-1]
        pos = tail.wrote_position
        end = pos + count * CQ_STORE_UNIT_SIZE
        if (pos == 0 or first[3] * CQ_STORE_UNIT_SIZE != tail.file_from_offset + pos
                or end > tail.allocated_position or end > tail.file_size
                or tail.write_buffer is not None):
            return False
        write_units(tail.mm, pos, run, count)
        tail.wrote_position = end
        # Only once the units are written: this is what makes a retry skip the records.
        self.max_physic_offset = last[0] + last[1]
        return True

    def _fill_pre_blank(self, mapped_file, until: int) -> None:
        position = until % self.mapped_file_size
        mapped_file.append(FILLER_UNIT * (position // CQ_STORE_UNIT_SIZE))
        mapped_file.flushed_position = mapped_file.committed_position = position
        queue = self.mapped_file_queue
        queue.flushed_where = queue.committed_where = until
        self.min_logic_offset = until

    # -- reading ---------------------------------------------------------------------------------
    def get_max_offset_in_queue(self) -> int:
        """The next logical offset to be written."""
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_unit(self, index: int) -> ConsumeQueueUnit | None:
        """The unit at logical offset ``index``, or None outside the queue."""
        if index < self.get_min_offset_in_queue() or index >= self.get_max_offset_in_queue():
            return None
        position = index * CQ_STORE_UNIT_SIZE
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(position)
        if mapped_file is None:
            return None
        raw = mapped_file.read(position - mapped_file.file_from_offset, CQ_STORE_UNIT_SIZE)
        return ConsumeQueueUnit(*CQ_UNIT.unpack(raw))

    def get_units_raw(self, start_index: int, max_count: int) -> bytes:
        """Up to ``max_count`` packed units from ``start_index``, not crossing a file boundary."""
        if start_index < self.get_min_offset_in_queue():
            return b""
        position = start_index * CQ_STORE_UNIT_SIZE
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(position)
        if mapped_file is None:
            return b""
        local = position - mapped_file.file_from_offset
        available = mapped_file.read_position - local
        if available <= 0:
            return b""
        count = min(max_count, available // CQ_STORE_UNIT_SIZE)
        return mapped_file.read(local, count * CQ_STORE_UNIT_SIZE)

    def get_units(self, start_index: int, max_count: int) -> list[ConsumeQueueUnit]:
        """Up to ``max_count`` units from ``start_index``, not crossing a file boundary."""
        if start_index < self.get_min_offset_in_queue():
            return []
        position = start_index * CQ_STORE_UNIT_SIZE
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(position)
        if mapped_file is None:
            return []
        local = position - mapped_file.file_from_offset
        available = mapped_file.read_position - local
        if available <= 0:
            return []
        count = min(max_count, available // CQ_STORE_UNIT_SIZE)
        raw = mapped_file.read(local, count * CQ_STORE_UNIT_SIZE)
        return [ConsumeQueueUnit(*u) for u in CQ_UNIT.iter_unpack(raw)]

    def get_last_offset(self) -> int:
        """CommitLog end of the last unit, or -1 for an empty queue."""
        last = self.get_max_offset_in_queue() - 1
        unit = self.get_unit(last) if last >= self.get_min_offset_in_queue() else None
        return unit.commit_log_offset + unit.size if unit else -1

    def get_offset_in_queue_by_time(
        self, timestamp: int, store_time_of: Callable[[int, int], int | None]
    ) -> int:
        """First logical offset whose message was stored at or after ``timestamp`` (ms).

        Store times never decrease along a queue, so this is a binary search over units;
        ``store_time_of(commit_log_offset, size)`` reads a record's store time (None if gone).
        Past the newest message it answers the max offset.
        """
        low = self.get_min_offset_in_queue()
        high = self.get_max_offset_in_queue()
        while low < high:
            middle = (low + high) // 2
            unit = self.get_unit(middle)
            stored = None if unit is None else store_time_of(unit.commit_log_offset, unit.size)
            if stored is None or stored < timestamp:
                low = middle + 1
            else:
                high = middle
        return low

    # -- maintenance -----------------------------------------------------------------------------
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units whose record does not end before ``phy_offset`` (a cut CommitLog tail)."""
        max_index = self.get_max_offset_in_queue()
        keep = max_index
        low = self.get_min_offset_in_queue()
        while keep > low:
            unit = self.get_unit(keep - 1)
            if unit is None or unit.size == 0x7FFFFFFF or unit.commit_log_offset + unit.size <= phy_offset:
                break
            keep -= 1
        if keep < max_index:
            self._keep_units(keep)

    def drop_last_unit(self) -> None:
        """Forget the last unit (recovery found it torn): dispatch writes it again."""
        if self.get_max_offset_in_queue() > self.get_min_offset_in_queue():
            self._keep_units(self.get_max_offset_in_queue() - 1)

    def _keep_units(self, keep: int) -> None:
        """Cut the queue after its first ``keep`` units (logical offsets below ``keep``)."""
        self._truncate_logic_to(keep * CQ_STORE_UNIT_SIZE)
        unit = self.get_unit(keep - 1) if keep > self.get_min_offset_in_queue() else None
        self.max_physic_offset = unit.commit_log_offset + unit.size if unit else -1

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the min logical offset past units whose record the CommitLog no longer holds.

        Reads the first file from the current minimum on, MIN_OFFSET_SCAN_UNITS at a time: the
        unit looked for is nearly always the first one read. (Each clean round and each start
        runs this for every queue; reading a whole first file each time cost up to 6 MB of
        I/O a queue, 6 GB at a start for a thousand full queues with a cold page cache.)"""
        first = self.mapped_file_queue.get_first_mapped_file()
        if first is None:
            return
        end = min(first.read_position, first.file_size)
        position = max(self.min_logic_offset - first.file_from_offset, 0)
        while position + CQ_STORE_UNIT_SIZE <= end:
            raw = first.read_raw(position, min(MIN_OFFSET_SCAN_UNITS * CQ_STORE_UNIT_SIZE,
                                               end - position))
            whole = len(raw) - len(raw) % CQ_STORE_UNIT_SIZE
            if not whole:
                break
            for at in range(0, whole, CQ_STORE_UNIT_SIZE):
                offset, size, _ = CQ_UNIT.unpack_from(raw, at)
                if size != 0x7FFFFFFF and offset >= phy_min_offset:
                    self.min_logic_offset = first.file_from_offset + position + at
                    return
            position += whole
        self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset + end)

    def delete_expired_file(self, phy_min_offset: int) -> int:
        deleted = self.mapped_file_queue.delete_expired_file_by_offset(
            phy_min_offset, CQ_STORE_UNIT_SIZE
        )
        self.correct_min_offset(phy_min_offset)
        return deleted
