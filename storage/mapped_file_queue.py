"""MappedFileQueue: the ordered segments (mapped_file.py) of one contiguous log, the CommitLog or
one ConsumeQueue, with its flushed and committed watermarks: finding the file of an offset or a
time, creating the next file, flushing, truncating a dirty tail and deleting expired files.

The file being written gets no readahead and a full one gets it back (``MappedFile.advise_*``);
files loaded at start keep readahead while recovery reads them, then the last one loses it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

from common.platform.files import remove_file
from storage.errors import StoreError
from storage.mapped_file import ALLOCATE_AHEAD, MappedFile, offset_to_file_name
from storage.owed_deletions import FORCIBLY_MS, OWED
from storage.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10


class MappedFileQueue:
    """The ordered segments of one log, with flushed and committed watermarks."""

    def __init__(
        self, store_path: str, mapped_file_size: int, pool: TransientStorePool | None = None,
        durable_create: bool = True, allocate_ahead: int = ALLOCATE_AHEAD,
    ) -> None:
        self.store_path = store_path
        self.durable_create = durable_create
        self.allocate_ahead = allocate_ahead
        self.mapped_file_size = mapped_file_size
        self.pool = pool
        # Replaced, never mutated in place, so readers can iterate without a lock.
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0
        self._lock = threading.Lock()
        self.flush_count = 0  # fdatasync calls that made progress, for stats and tests

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(self.mapped_files)

    def load(self) -> None:
        """Map every existing segment; recovery sets the real positions afterwards."""
        if not os.path.isdir(self.store_path):
            return
        files = []
        names = []
        for name in sorted(os.listdir(self.store_path)):
            path = os.path.join(self.store_path, name)
            if name.endswith(".tmp"):
                remove_file(path)  # a segment whose creation never finished (later if in use)
                continue
            if name.isdigit() and os.path.isfile(path):
                names.append(name)
        names = _without_emptied_ends(self.store_path, names)
        self._check_sequence(names)
        for name in names:
            path = os.path.join(self.store_path, name)
            mapped_file = MappedFile(path, self.mapped_file_size,
                                     allocate_ahead=self.allocate_ahead)
            mapped_file.set_positions(self.mapped_file_size)
            files.append(mapped_file)
        self.mapped_files = files  # readahead on all: recovery reads them (advise_writing after)

    def _check_sequence(self, names: list[str]) -> None:
        """Refuse to start on files that are not one run of segments: each named by its
        20-digit start offset, a multiple of the file size, each starting where the one before
        ends. A stray all-digit file taken as the last segment would have new records written
        at offsets unrelated to the log's end, which dispatch never reaches."""
        size = self.mapped_file_size
        expected = None
        for name in names:
            # (str.isdigit() is true of "²" too, which int() refuses)
            offset = int(name) if name.isascii() else -1
            if offset < 0 or offset_to_file_name(offset) != name or offset % size:
                raise StoreError(f"{os.path.join(self.store_path, name)} is not a segment of this "
                                 f"store (segments are named by their 20-digit start offset, a "
                                 f"multiple of {size:,}): move it out of the folder")
            if expected is not None and offset != expected:
                raise StoreError(f"{self.store_path} misses the segment at {expected:,} (before "
                                 f"{name}): the files after a gap cannot be read in order")
            expected = offset + size

    # -- finding files -------------------------------------------------------------------------
    def get_first_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def get_last_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[-1] if files else None

    def get_last_mapped_file_or_create(self, start_offset: int = 0) -> MappedFile:
        """The file to write into: the last one, or a new one when there is none or it is full."""
        last = self.get_last_mapped_file()
        if last is not None and not last.is_full():
            return last
        with self._lock:
            last = self.get_last_mapped_file()
            if last is None:
                create_offset = start_offset - start_offset % self.mapped_file_size
            elif last.is_full():
                create_offset = last.file_from_offset + self.mapped_file_size
            else:
                return last
            os.makedirs(self.store_path, exist_ok=True)
            path = os.path.join(self.store_path, offset_to_file_name(create_offset))
            if OWED.still_there(path):  # a cut tail's file, back under the same name
                OWED.settle()
                if OWED.still_there(path):
                    raise StoreError(f"{path} was cut off but is still held (by a reader of this "
                                     "store, or another process has it open); the store writes "
                                     "on once it is let go")
            mapped_file = MappedFile(path, self.mapped_file_size, self.pool, self.durable_create,
                                     self.allocate_ahead)
            if not self.mapped_files:
                mapped_file.first_create_in_queue = True
                self.flushed_where = self.committed_where = create_offset
            mapped_file.advise_random()
            if last is not None:
                last.advise_normal()
                last.stamp_store_time()  # (the writer leaves it: its time for expiry)
            self.mapped_files = [*self.mapped_files, mapped_file]
            return mapped_file

    def find_mapped_file_by_offset(
        self, offset: int, return_first_on_not_found: bool = False
    ) -> MappedFile | None:
        """The file holding ``offset``, or None when no file does."""
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        index = offset // self.mapped_file_size - first.file_from_offset // self.mapped_file_size
        if 0 <= index < len(files):
            candidate = files[index]
            if candidate.file_from_offset <= offset < candidate.file_from_offset + self.mapped_file_size:
                return candidate
        for mapped_file in files:
            if mapped_file.file_from_offset <= offset < mapped_file.file_from_offset + self.mapped_file_size:
                return mapped_file
        return first if return_first_on_not_found else None

    def get_mapped_file_by_time(self, timestamp_ms: int) -> MappedFile | None:
        """The first file modified at or after the time (RocketMQ's rough time lookup)."""
        files = self.mapped_files
        for mapped_file in files:
            if mapped_file.last_modified() * 1000 >= timestamp_ms:
                return mapped_file
        return files[-1] if files else None

    # -- positions ------------------------------------------------------------------------------
    def get_min_offset(self) -> int:
        files = self.mapped_files
        return files[0].file_from_offset if files else 0

    def get_max_offset(self) -> int:
        """End of readable data (``get_last_mapped_file`` and ``read_position`` inlined:
        dispatch asks twice a send, and the two frames less took 0.3 µs off a lone record's
        dispatch of 4.0)."""
        files = self.mapped_files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + (last.wrote_position if last.write_buffer is None
                                        else last.committed_position)

    def get_max_wrote_position(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.wrote_position if last else 0

    def remain_how_many_data_to_flush(self) -> int:
        return self.get_max_offset() - self.flushed_where

    # -- commit and flush --------------------------------------------------------------------
    def commit(self, least_pages: int) -> bool:
        """Commit the file holding ``committed_where``; True when nothing moved."""
        mapped_file = self.find_mapped_file_by_offset(
            self.committed_where, self.committed_where == 0
        )
        if mapped_file is None:
            return True
        where = mapped_file.file_from_offset + mapped_file.commit(least_pages)
        result = where == self.committed_where
        self.committed_where = where
        return result

    def flush(self, least_pages: int) -> bool:
        """Flush the file holding ``flushed_where``; True when nothing moved."""
        mapped_file = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mapped_file is None:
            return True
        timestamp = mapped_file.store_timestamp
        where = mapped_file.file_from_offset + mapped_file.flush(least_pages)
        result = where == self.flushed_where
        if not result:
            self.flush_count += 1
        self.flushed_where = where
        if least_pages == 0:
            self.store_timestamp = timestamp
        return result

    def flush_all(self) -> None:
        """Flush until every readable byte is on disk (a file boundary may need two rounds)."""
        for _ in range(len(self.mapped_files) + 1):
            if self.flush(0) and self.flushed_where >= self.get_max_offset():
                return

    # -- truncation and deletion ---------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log at ``offset``: later files are deleted, the file holding it is zeroed past it."""
        OWED.settle()
        keep = []
        for mapped_file in self.mapped_files:
            tail = mapped_file.file_from_offset + self.mapped_file_size
            if tail <= offset:
                keep.append(mapped_file)
            elif offset >= mapped_file.file_from_offset:
                position = offset % self.mapped_file_size
                mapped_file.set_positions(position)
                mapped_file.zero_from(position)
                keep.append(mapped_file)
            else:  # out of the log now, whoever still holds it (deleted once let go)
                OWED.leave(mapped_file, mapped_file.destroy(FORCIBLY_MS))
        self.mapped_files = keep
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)
        self.advise_writing()

    def advise_writing(self) -> None:
        """The last file is the one written next: no readahead for it (``advise_random``).
        Called after recovery and after a cut, which can make an older file the last one."""
        last = self.get_last_mapped_file()
        if last is not None:
            last.advise_random()

    def delete_last_mapped_file(self) -> None:
        last = self.get_last_mapped_file()
        if last is not None:
            OWED.leave(last, last.destroy(FORCIBLY_MS))
            self.mapped_files = self.mapped_files[:-1]
            self.advise_writing()

    def delete_expired_file_by_time(
        self,
        expired_ms: int,
        delete_files_interval_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
    ) -> int:
        """Delete files (never the last) untouched for ``expired_ms``; returns how many went."""
        OWED.settle()
        files = self.mapped_files[:-1]
        now = time.time() * 1000
        deleted: list[MappedFile] = []
        for mapped_file in files:
            if not (clean_immediately or now >= mapped_file.last_modified() * 1000 + expired_ms):
                break
            if not mapped_file.destroy(interval_forcibly_ms):
                break  # a reader holds it: try again next round
            deleted.append(mapped_file)
            if len(deleted) >= DELETE_FILES_BATCH_MAX:
                break
            if delete_files_interval_ms > 0:
                time.sleep(delete_files_interval_ms / 1000)
        self._remove(deleted)
        return len(deleted)

    def delete_expired_file_by_offset(self, offset: int, unit_size: int) -> int:
        """Delete ConsumeQueue files whose last unit points below CommitLog offset ``offset``."""
        OWED.settle()
        deleted = []
        for mapped_file in self.mapped_files[:-1]:
            last_unit = mapped_file.read_raw(self.mapped_file_size - unit_size, 8)
            max_offset = int.from_bytes(last_unit, "big", signed=True)
            if max_offset >= offset or not mapped_file.destroy(60_000):
                break
            deleted.append(mapped_file)
        self._remove(deleted)
        return len(deleted)

    def _remove(self, gone: list[MappedFile]) -> None:
        if gone:
            with self._lock:
                ids = {id(f) for f in gone}
                self.mapped_files = [f for f in self.mapped_files if id(f) not in ids]
            for mapped_file in gone:
                OWED.leave(mapped_file, True)  # (deleted, or emptied and owed)

    def shutdown(self, stamp: bool = True) -> None:
        """Unmap every file (data stays on disk), each with its last store time for expiry
        unless ``stamp`` is False (a disk that hangs: see storage/store_shutdown.py)."""
        for mapped_file in self.mapped_files:
            if stamp:
                mapped_file.stamp_store_time()
            mapped_file.close()

    def destroy(self) -> None:
        """Delete every file of this queue."""
        for mapped_file in self.mapped_files:
            OWED.leave(mapped_file, mapped_file.destroy(0))
        self.mapped_files = []
        self.flushed_where = self.committed_where = 0


def _without_emptied_ends(folder: str, names: list[str]) -> list[str]:
    """``names`` less the empty files before the first and after the last file with data: what
    a deletion another process refused leaves (MappedFile.destroy empties it). They are deleted
    now, or owed. An empty file between two with data is damage, not that: it stays, and the
    queue refuses to load it (a file of the wrong size)."""
    sizes = [os.path.getsize(os.path.join(folder, n)) for n in names]
    full = [i for i, size in enumerate(sizes) if size]
    first, last = (full[0], full[-1]) if full else (len(names), -1)
    for i, name in enumerate(names):
        if sizes[i] == 0 and not first <= i <= last:
            OWED.remove_or_owe(os.path.join(folder, name))
    return [n for i, n in enumerate(names) if sizes[i] or first <= i <= last]
