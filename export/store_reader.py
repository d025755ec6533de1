"""Reading a queue straight from a store directory (the ``path`` option): ConsumeQueue units
give each message's CommitLog offset and size. Read-only, no lock: it works on the store of a
broker that is down, or running."""

from __future__ import annotations

import mmap
import os
import struct

from export.errors import DataLossError
from storage.inspector import segment_files
from storage.record import MessageRecord, decode_record

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
_UNIT_DTYPE = [("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")]


def _segments(directory: str) -> list[tuple[int, str]]:
    return [(int(os.path.basename(path)), path) for path in segment_files(directory)]


class StoreQueue:
    def __init__(self, root: str, topic: str, queue_id: int) -> None:
        self.root = root
        self.directory = os.path.join(root, "consumequeue", topic, str(queue_id))
        self.files = _segments(self.directory)

    def _units_of(self, start: int, path: str):
        with open(path, "rb") as handle:
            data = handle.read()
        for pos in range(0, len(data) - UNIT_SIZE + 1, UNIT_SIZE):
            offset, size, _tags_code = UNIT.unpack_from(data, pos)
            yield (start + pos) // UNIT_SIZE, offset, size

    def unit_arrays(self, start: int, end: int):
        """(CommitLog offsets, sizes) of the units ``start <= logical < end``, as numpy arrays."""
        import numpy as np

        offsets, sizes = [], []
        for file_start, path in self.files:
            first = file_start // UNIT_SIZE
            if first >= end:
                break
            with open(path, "rb") as handle:
                data = handle.read()
            units = np.frombuffer(data, _UNIT_DTYPE, len(data) // UNIT_SIZE)
            low, high = max(start - first, 0), min(end - first, len(units))
            if low < high:
                offsets.append(units["offset"][low:high].astype(np.int64))
                sizes.append(units["size"][low:high].astype(np.int64))
        if not offsets:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(offsets), np.concatenate(sizes)

    def bounds(self) -> tuple[int, int]:
        """(min, max) logical offsets: the first unit that points somewhere, the first empty one."""
        low = high = 0
        for index, (start, path) in enumerate(self.files):
            for logical, offset, size in self._units_of(start, path):
                if index == 0 and low == high and (offset < 0 or size <= 0):
                    low = high = logical + 1  # expired or filler units before the first message
                    continue
                if offset == 0 and size == 0:
                    return low, logical
                high = logical + 1
        return low, high

    def units(self, start: int, end: int):
        """(logical offset, CommitLog offset, size) for ``start <= logical < end``."""
        for file_start, path in self.files:
            first = file_start // UNIT_SIZE
            if first >= end:
                return
            size_bytes = os.path.getsize(path)
            if first + size_bytes // UNIT_SIZE <= start:
                continue
            for logical, offset, size in self._units_of(file_start, path):
                if logical < start:
                    continue
                if logical >= end:
                    return
                yield logical, offset, size


class CommitLogReader:
    """Records by physical offset, one file mapped at a time (read-only: pages are read as
    records are, so a mostly empty 1 GiB file costs what it holds)."""

    def __init__(self, root: str) -> None:
        self.files = _segments(os.path.join(root, "commitlog"))
        self._current: tuple[int, memoryview] | None = None
        self._mapped: mmap.mmap | None = None

    def close(self) -> None:
        if self._current is not None:
            self._current[1].release()
            self._current = None
        if self._mapped is not None:
            mapped, self._mapped = self._mapped, None
            try:
                mapped.close()
            except BufferError:
                # A view of it is still held (say, by the traceback of the error that ended
                # the read): it is unmapped when that goes, and that error stays the one told.
                pass

    def record(self, offset: int, size: int) -> MessageRecord:
        data = self._file_holding(offset)
        record = decode_record(data[1], offset - data[0], check_crc=False, base_offset=data[0])
        if not isinstance(record, MessageRecord) or record.total_size != size:
            raise DataLossError(f"the CommitLog holds no {size}-byte record at offset {offset}")
        return record

    def holds(self, offset: int) -> bool:
        """Whether the file mapped now holds ``offset``."""
        current = self._current
        return current is not None and current[0] <= offset < current[0] + len(current[1])

    def view_holding(self, offset: int) -> tuple[int, memoryview]:
        """(start offset of the file, a view of it) for the file holding ``offset``."""
        return self._file_holding(offset)

    def _file_holding(self, offset: int) -> tuple[int, memoryview]:
        current = self._current
        if current is not None and current[0] <= offset < current[0] + len(current[1]):
            return current
        for start, path in reversed(self.files):
            if start <= offset:
                self.close()
                with open(path, "rb") as handle:
                    self._mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                self._current = (start, memoryview(self._mapped))
                return self._current
        raise DataLossError(f"no CommitLog file holds offset {offset} (expired?)")
