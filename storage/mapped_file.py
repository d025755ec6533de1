"""MappedFile: a fixed-size mmap segment named by its start offset.

A file's name is its global start offset as 20 digits (``UtilAll.offset2FileName``); a queue of
files (mapped_file_queue.py) is one contiguous log (the CommitLog, or one ConsumeQueue). Each
file keeps three cursors:

* wrote position: bytes appended (into the file, or into the transient pool's buffer);
* committed position: bytes that reached the file (equal to wrote without a transient pool);
* flushed position: bytes known to be on disk (after ``fdatasync``).

Readers see up to the *read position*: wrote without a pool, committed with one.

Reference counting (mirrors RocketMQ's ``ReferenceResource``): a reader ``hold()``s a file while
it copies bytes out, and deletion only unmaps once every holder has ``release()``d, or after
``destroyMapedFileIntervalForcibly`` has passed.

Durability: with the compiled core on Linux a flush syncs just the range written since the
last one (``msync_range``: MS_SYNC over those pages, without the interpreter lock); otherwise
``fdatasync`` on the file descriptor writes back the file's dirty pages (Linux keeps one page
cache for the mapping and the descriptor), and unlike ``mmap.flush`` it lets other threads run.
Why a range: a whole-file sync also wrote back pages ahead of the writer that were dirtied early
(the page warmer populated them for writing until session 12), so the disk wrote those twice. A
failed sync leaves the flushed position where it was and dirties the unflushed pages again
before the next attempt.

Writes: appends go to the file with ``pwrite`` (``write_at``), not through the mapping; readers
read through the mapping.

Space: every write claims its blocks first (``ensure_allocated``, file_space.py), so a full disk
is an ENOSPC the writer can refuse a put with, never a SIGBUS through the mapping.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time

from common import speedups
from common.platform import file_io
from common.platform.durability import sync_mapped
from common.platform.files import BINARY, remove_file, set_modified_time
from storage.errors import OffsetOutOfRangeError, StoreError
from storage.file_space import claim, create_sized_file
from storage.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

_msync_range = getattr(speedups.store_core, "msync_range", None)


def _write_at_pure(fd: int, data, length: int, offset: int) -> None:
    view = memoryview(data)[:length]
    while view:
        done = file_io.pwrite(fd, view, offset)
        if done <= 0:  # no progress on a regular file: never loop on it
            raise OSError(errno.EIO, "pwrite wrote nothing", None)
        view = view[done:]
        offset += done


# How appends reach the file (see MappedFile.write_at): the compiled pwrite, which keeps the
# interpreter lock for small writes, else os.pwrite; None where there is no pwrite (Windows):
# through the mapping then.
_write_at = getattr(speedups.store_core, "write_at", None) or (
    _write_at_pure if hasattr(os, "pwrite") else None)

OS_PAGE_SIZE = 4096
# How far ahead of the writer blocks are claimed (file_space.py): one fallocate per this many
# bytes written, and never more than this much space held but unused per file.
ALLOCATE_AHEAD = 4 << 20
_ZERO_CHUNK = bytes(1 << 20)


def offset_to_file_name(offset: int) -> str:
    """The 20-digit, zero-padded file name of a segment that starts at ``offset``."""
    return f"{offset:020d}"


# Readahead advice (not on Windows, whose mmap has no madvise).
_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", None)
_MADV_NORMAL = getattr(mmap, "MADV_NORMAL", None)


def _advise(mm: mmap.mmap | None, advice: int | None) -> None:
    if mm is None or advice is None or mm.closed:
        return
    try:
        mm.madvise(advice)
    except (OSError, ValueError):  # advice only: a mapping that will not take it works as is
        pass


class MappedFile:
    """One fixed-size segment of a log, mapped into memory."""

    def __init__(
        self, path: str, file_size: int, pool: TransientStorePool | None = None,
        durable_create: bool = True, allocate_ahead: int = ALLOCATE_AHEAD,
    ) -> None:
        self.path = path
        self.file_size = file_size
        self.file_name = os.path.basename(path)
        try:
            self.file_from_offset = int(self.file_name)
        except ValueError as exc:
            raise StoreError(f"{path}: a store file is named by its 20-digit offset") from exc
        exists = os.path.exists(path)
        if not exists:
            create_sized_file(path, file_size, durable_create)
        self._fd = os.open(path, os.O_RDWR | BINARY)
        try:
            actual = os.fstat(self._fd).st_size
            if actual != file_size:
                raise StoreError(f"{path} is {actual} bytes, but its queue's files are {file_size}")
            self.mm = mmap.mmap(self._fd, file_size)
        except BaseException:
            os.close(self._fd)  # no descriptor leaks out of a file that never opened
            raise
        # Blocks before this position are claimed on disk: writes there cannot SIGBUS.
        self.allocated_position = 0
        self.allocate_ahead = allocate_ahead
        self._flush_failed = False
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message appended
        self._pool = pool
        self.write_buffer = pool.borrow_buffer() if pool is not None else None
        self._refs = 1
        self._available = True
        self._cleanup_over = False
        # Unmapped by a store's shutdown (close), not being destroyed: a late flush (a flush
        # thread that outlived the shutdown) must not count its bytes flushed unsynced.
        self._closed = False
        self.left_behind = False  # unmapped, but another process kept it from being deleted
        self._first_shutdown_ts = 0.0
        self._ref_lock = threading.Lock()
        self.first_create_in_queue = False  # set by the queue for its very first file

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position})"

    # -- positions -------------------------------------------------------------------------
    @property
    def read_position(self) -> int:
        """Bytes a reader may see: committed data when a write buffer is in use."""
        return self.wrote_position if self.write_buffer is None else self.committed_position

    def is_full(self) -> bool:
        return self.wrote_position == self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, position: int) -> None:
        """Recovery's verdict: everything before ``position`` is valid and on disk."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    # -- readahead ---------------------------------------------------------------------------
    def advise_random(self) -> None:
        """No readahead for this mapping's faults: for the file being written, and for files
        written at random (an index). A fault on a page not yet in the page cache (a write
        through the mapping, as ConsumeQueues and indexes do; the page warmer's populating)
        reads it first, and the kernel's mmap read-around then reads (for unwritten blocks:
        zeroes) up to ``read_ahead_kb`` around it: 8 MiB on the project's machine, a stall of
        ~18 ms every ~60 ms under batched sends (docs/benchmarks.md, session 11). One page a
        fault is cheaper in total and has no such tail."""
        _advise(self.mm, _MADV_RANDOM)

    def advise_normal(self) -> None:
        """Readahead again (a full file is only read from here on, mostly in order)."""
        _advise(self.mm, _MADV_NORMAL)

    # -- writes ------------------------------------------------------------------------------
    def ensure_allocated(self, end: int) -> None:
        """Claim disk blocks up to ``end`` (and a little ahead) before anything is written there.

        Raises OSError (ENOSPC, EDQUOT, …) with nothing written when the space is not there:
        a write through the mapping would get SIGBUS instead (file_space.py).
        """
        if end > self.allocated_position:
            self.allocated_position = claim(self._fd, self.path, self.allocated_position,
                                            min(end, self.file_size), self.file_size,
                                            self.allocate_ahead)

    def claim_early(self, end: int) -> None:
        """Claim the next step of blocks once a writer at ``end`` is within half a step of the
        claimed end, so that what lies ahead of it is claimed before it gets there (the page
        warmer populates only claimed blocks). A failure here changes nothing: the claim a
        write needs (``ensure_allocated``) raises it when it matters."""
        if end + self.allocate_ahead // 2 > self.allocated_position < self.file_size:
            try:
                self.ensure_allocated(self.allocated_position + 1)
            except OSError:
                pass

    def write_at(self, position: int, data, length: int) -> None:
        """Put ``data[:length]`` at ``position``, blocks claimed (``ensure_allocated``); the
        caller moves the wrote position.

        Through the page cache (``pwrite``), not through the mapping: a page written through a
        shared mapping gets a writable page-table entry, and writing it back (every flush)
        write-protects it again with a TLB flush that interrupts every other CPU running the
        process, a page at a time: 17 % of a batch-writing store's CPU here (docs/benchmarks.md,
        session 12), and the writer's faults on fresh pages besides. Readers keep reading
        through the mapping; Linux has one page cache, so they see these bytes at once. With a
        transient store pool the bytes go to its write buffer (the commit service writes them).
        """
        if self.write_buffer is not None:
            self.write_buffer[position : position + length] = memoryview(data)[:length]
        elif _write_at is not None:
            _write_at(self._fd, data, length, position)
        else:
            self.mm[position : position + length] = memoryview(data)[:length]

    def append(self, data: bytes) -> int:
        """Append ``data`` at the wrote position; returns the position it was written at."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise StoreError(f"{self.path}: {len(data)} bytes do not fit at position {pos}")
        self.ensure_allocated(end)
        self.write_at(pos, data, len(data))
        self.wrote_position = end
        return pos

    def skip_to_end(self) -> None:
        """Count the rest of the file as written: a blank record fills it."""
        self.wrote_position = self.file_size

    def zero_from(self, position: int) -> None:
        """Zero the bytes from ``position`` on, so a cut-off tail can never be read again, and
        make the zeros durable now: flushes sync only what the writer adds from ``position``
        on (``_sync``), so zeros beyond it would reach the disk only with the kernel's own
        write-back, and a crash before that could bring the old tail back."""
        mm = self.mm
        zeroed = False
        for start, stop in self._data_regions(position):
            pos = start
            while pos < stop:
                end = min(pos + len(_ZERO_CHUNK), stop)
                if mm[pos:end] != _ZERO_CHUNK[: end - pos]:
                    mm[pos:end] = _ZERO_CHUNK[: end - pos]
                    zeroed = True
                pos = end
        if self.write_buffer is not None:
            self.write_buffer[position:] = bytes(self.file_size - position)
        if zeroed:
            sync_mapped(mm, self._fd, position)

    def _data_regions(self, position: int) -> list[tuple[int, int]]:
        """Ranges from ``position`` on that may hold data. Holes of a sparse file read as zeros
        already: skipping them spares reading (and caching) a mostly empty 1 GiB file."""
        if not hasattr(os, "SEEK_DATA"):
            return [(position, self.file_size)]
        regions = []
        pos = position
        try:
            while pos < self.file_size:
                start = os.lseek(self._fd, pos, os.SEEK_DATA)
                stop = min(os.lseek(self._fd, start, os.SEEK_HOLE), self.file_size)
                regions.append((start, stop))
                pos = stop
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no data after pos
                return [(position, self.file_size)]
        return regions

    # -- reads -------------------------------------------------------------------------------
    def read(self, pos: int, size: int | None = None) -> bytes:
        """Copy ``size`` bytes (default: up to the read position) starting at ``pos``."""
        read_pos = self.read_position
        end = read_pos if size is None else pos + size
        if pos < 0 or end > read_pos or pos > end:
            raise OffsetOutOfRangeError(
                f"{self.file_name}: bytes {pos}..{end} are beyond the readable {read_pos}"
            )
        if not self.hold():
            raise OffsetOutOfRangeError(f"{self.file_name} is being deleted")
        try:
            return self.mm[pos:end]
        finally:
            self.release()

    def read_raw(self, pos: int, size: int) -> bytes:
        """Copy bytes regardless of cursors (recovery and inspection).

        Read with pread, not through the mapping: on a full tmpfs even *reading* a hole through
        a shared mapping faults in a page and gets SIGBUS; pread reads a hole as zeros.
        """
        size = max(0, min(pos + size, self.file_size) - pos)
        if not self.hold():
            return self.mm[pos : pos + size]
        try:
            parts = []
            while size > 0:
                chunk = file_io.pread(self._fd, size, pos)
                if not chunk:
                    break
                parts.append(chunk)
                pos += len(chunk)
                size -= len(chunk)
            return b"".join(parts)
        finally:
            self.release()

    def data_end(self, start: int = 0) -> int:
        """Where the bytes written from ``start`` on end: the first hole, page-rounded (the file
        size where holes cannot be told). Past it the file reads as zeros; scanning there
        through the mapping would fault pages in (SIGBUS on a full tmpfs) for nothing."""
        if not hasattr(os, "SEEK_HOLE") or start >= self.file_size:
            return self.file_size
        try:
            return min(os.lseek(self._fd, start, os.SEEK_HOLE), self.file_size)
        except OSError:
            return self.file_size

    # -- commit and flush -------------------------------------------------------------------
    def _able_to(self, done: int, least_pages: int) -> bool:
        # mirrors MappedFile.isAbleToCommit: a full file always goes; else enough dirty pages
        wrote = self.wrote_position
        if self.is_full():
            return done < self.file_size
        if least_pages > 0:
            return wrote // OS_PAGE_SIZE - done // OS_PAGE_SIZE >= least_pages
        return wrote > done

    def commit(self, least_pages: int) -> int:
        """Copy buffered appends to the file; returns the committed position."""
        if self.write_buffer is None:
            self.committed_position = self.wrote_position
            return self.committed_position
        wrote = self.wrote_position
        if self._able_to(self.committed_position, least_pages) and self.hold():
            try:
                start = self.committed_position
                file_io.pwrite(self._fd, memoryview(self.write_buffer)[start:wrote], start)
                self.committed_position = wrote
            finally:
                self.release()
        if self.committed_position == self.file_size and self._pool is not None:
            self._pool.return_buffer(self.write_buffer)
            self.write_buffer = None
        return self.committed_position

    def flush(self, least_pages: int) -> int:
        """fdatasync when at least ``least_pages`` pages are dirty (0: any); returns the flushed position."""
        read_pos = self.read_position
        if read_pos <= self.flushed_position:
            return self.flushed_position
        full = read_pos == self.file_size
        if (
            least_pages > 0
            and not full
            and read_pos // OS_PAGE_SIZE - self.flushed_position // OS_PAGE_SIZE < least_pages
        ):
            return self.flushed_position
        if self.hold():
            try:
                if self._flush_failed:
                    self._redirty(self.flushed_position, read_pos)
                try:
                    self._sync(self.flushed_position, read_pos)
                except OSError:
                    # Linux reports a failed write-back once and may then count those pages as
                    # clean: the next fdatasync would succeed without writing them. Remember to
                    # dirty them again before the next attempt.
                    self._flush_failed = True
                    raise
                self._flush_failed = False
                self.flushed_position = read_pos
            finally:
                self.release()
        elif not self._closed:  # being destroyed: nobody will read these bytes again
            self.flushed_position = read_pos
        return self.flushed_position

    def _sync(self, start: int, end: int) -> None:
        """Make [start, end) durable: that range where the compiled core can, else the file."""
        if _msync_range is not None:
            rc = _msync_range(self.mm, start, end)
            if rc == 0:
                return
            if rc != errno.ENOSYS:
                raise OSError(rc, os.strerror(rc))
        sync_mapped(self.mm, self._fd, start, end)

    def _redirty(self, start: int, end: int) -> None:
        """Write the mapped bytes of [start, end) over themselves, so write-back sees them again."""
        pos = start - start % OS_PAGE_SIZE
        while pos < end:
            stop = min(pos + len(_ZERO_CHUNK), end)
            file_io.pwrite(self._fd, self.mm[pos:stop], pos)
            pos = stop

    # -- reference counting and deletion ------------------------------------------------------
    def hold(self) -> bool:
        """Take a reference; False once the file is being shut down."""
        with self._ref_lock:
            if self._available and self._refs > 0:
                self._refs += 1
                return True
            return False

    def release(self) -> None:
        """Drop a reference; the last one unmaps the file."""
        with self._ref_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            self._cleanup_locked()

    @property
    def is_available(self) -> bool:
        return self._available

    @property
    def is_cleanup_over(self) -> bool:
        return self._cleanup_over

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Stop new holds; unmap now if nobody reads, or forcibly after the interval."""
        with self._ref_lock:
            if self._available:
                self._available = False
                self._first_shutdown_ts = time.monotonic()
                self._refs -= 1
                if self._refs <= 0:
                    self._cleanup_locked()
            elif self._refs > 0 and (
                time.monotonic() - self._first_shutdown_ts >= interval_forcibly_ms / 1000
            ):
                log.warning("%s: unmapping with %d readers after the forcible interval",
                            self.path, self._refs)
                self._refs = 0
                self._cleanup_locked()

    def _cleanup_locked(self) -> None:
        if self._cleanup_over:
            return
        if self.write_buffer is not None and self._pool is not None:
            self._pool.return_buffer(self.write_buffer)
        self.write_buffer = None
        self.mm.close()
        os.close(self._fd)
        self._cleanup_over = True

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        """Unmap and delete the file; False while readers still hold it.

        Windows refuses to delete a file another process has open (an inspector, an export
        reading store files). Then the file is emptied instead, so that not a byte of it can be
        read back, by this store or by a file made later under its name, and ``left_behind``
        says its deletion is still owed (MappedFileQueue tries again each round)."""
        self.shutdown(interval_forcibly_ms)
        if not self._cleanup_over:
            return False
        if remove_file(self.path):
            self.left_behind = False
        elif not self.left_behind:
            self.left_behind = True
            try:
                os.truncate(self.path, 0)
            except OSError as exc:  # mapped by that other process too: it keeps its bytes
                log.warning("%s could not be emptied either: %s", self.path, exc)
            log.warning("%s is in use by another process; deleting it later", self.path)
        return True

    def close(self) -> None:
        """Unmap without deleting (store shutdown)."""
        with self._ref_lock:
            self._closed = True
            self._available = False
            self._refs = 0
            self._cleanup_locked()

    def last_modified(self) -> float:
        # The last store time appended as well: Windows may not touch a file's time for
        # writes through its mapping (how the CommitLog is written there), and a file whose
        # time lags would expire before its retention is over.
        return max(os.path.getmtime(self.path), self.store_timestamp / 1000)

    def stamp_store_time(self) -> None:
        """Move the file's own time up to the last store time appended to it, where it lags
        (see :meth:`last_modified`): after a restart the file's time is all expiry has, so a
        file is stamped when the writer leaves it (a roll, a shutdown). Best effort: a file
        that cannot be stamped keeps its own time, as before."""
        stored = self.store_timestamp / 1000
        if stored <= 0:
            return
        try:
            # Under the lock that closes the descriptor (a close, a deletion's last release):
            # a descriptor closed meanwhile could be another file's by now.
            with self._ref_lock:
                if self._cleanup_over:
                    return
                if os.fstat(self._fd).st_mtime < stored:
                    set_modified_time(self._fd, stored)  # (through the open file: files.py)
        except OSError as exc:
            log.warning("%s keeps its own time, which may lag its last message's (expiry after "
                        "a restart goes by it): %s", self.path, exc)
