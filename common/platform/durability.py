"""Data on the disk, as each platform gets it there.

Linux: ``fdatasync`` (the data and what reading it needs, not the access times). macOS has no
``fdatasync``, and its ``fsync`` leaves the data in the drive's cache: ``fcntl(F_FULLFSYNC)``
is what reaches the platter, ``fsync`` where the file system refuses it. Windows: ``os.fsync``
(FlushFileBuffers)."""

from __future__ import annotations

import mmap
import os
import sys

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


def sync_data(fd: int) -> None:
    """A file's data (and its size) on the disk before returning."""
    fdatasync = getattr(os, "fdatasync", None)
    if fdatasync is not None:
        fdatasync(fd)
    else:
        sync_all(fd)


def sync_all(fd: int) -> None:
    """A file's data and metadata on the disk, through the drive's cache where the platform
    can ask for that (macOS)."""
    full_fsync = getattr(fcntl, "F_FULLFSYNC", None) if fcntl is not None else None
    if full_fsync is not None:
        try:
            fcntl.fcntl(fd, full_fsync)
            return
        except OSError:  # a file system that cannot (some network ones): plain fsync
            pass
    os.fsync(fd)


def sync_mapped(mm: mmap.mmap, fd: int, start: int = 0, end: int | None = None) -> None:
    """Bytes written through a shared mapping, [start, end), on the disk. Linux and macOS keep
    mapped pages in the one page cache their file syncs write back (macOS's unified buffer
    cache; not yet tried on a real Mac). Windows does not: FlushViewOfFile (``mmap.flush``)
    first hands a view's dirty pages to the file, then FlushFileBuffers. (``mmap.flush`` keeps
    the interpreter lock while Windows writes: a compiled flush that lets go of it is the
    next step there.)"""
    if sys.platform == "win32":
        end = len(mm) if end is None else end
        begin = start - start % mmap.ALLOCATIONGRANULARITY  # (an offset mmap.flush accepts)
        if end > begin:
            mm.flush(begin, end - begin)
    sync_data(fd)


def sync_directory(path: str) -> None:
    """A directory's entries (a file created or renamed in it) on the disk. POSIX: fsync on
    the directory. Windows cannot open a directory as a file, and NTFS journals its
    metadata: nothing to do there."""
    if os.name == "nt":
        return
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
