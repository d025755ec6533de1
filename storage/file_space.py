"""Disk space for store files: creating them at their size, and claiming blocks before writing.

Store files are created sparse (``ftruncate``) and written through a shared mmap. Writing through
a mapping into a hole the file system cannot fill (the disk or the tmpfs is full, a quota is
reached) is not an error the writer can catch: the kernel sends SIGBUS and the broker dies.
So every writer claims the blocks first with ``posix_fallocate``, a little ahead of where it
writes (``MappedFile.ensure_allocated``): a full disk then shows up as ENOSPC, before a byte is
written, and the put is refused instead of the process killed.

File systems without fallocate (glibc emulates it by writing a byte per block where it can;
EOPNOTSUPP/EINVAL elsewhere) are written as before.
"""

from __future__ import annotations

import errno
import logging
import os

from common.platform.durability import sync_all, sync_directory
from common.platform.file_space import preallocate
from common.platform.files import BINARY, replace_file

log = logging.getLogger(__name__)

def allocate(fd: int, offset: int, length: int) -> bool:
    """Claim ``length`` bytes of blocks from ``offset``; False when the file system cannot
    (the caller then stops asking). Raises OSError (ENOSPC, EDQUOT, …) when the space is not there."""
    if length <= 0:
        return True
    supported = preallocate(fd, offset, length)
    if not supported:
        log.debug("claiming blocks is not supported here; writing without it")
    return supported


def claim(fd: int, path: str, start: int, end: int, file_size: int, ahead: int) -> int:
    """Claim the blocks of [start, end) and up to ``ahead`` bytes more; returns the new claimed
    position (``file_size`` when the file system cannot claim: nothing more to ask).

    When the step ahead does not fit but the write does, the write gets the last bytes of the
    disk. Raises OSError naming ``path`` (the log line is what an operator reads).
    """
    target = min(file_size, max(end, start + ahead))
    try:
        try:
            supported = allocate(fd, start, target - start)
        except OSError as exc:
            if target <= end or exc.errno != errno.ENOSPC:
                raise
            target = end
            supported = allocate(fd, start, target - start)
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise
    return target if supported else file_size


def create_sized_file(path: str, size: int, durable: bool = True) -> None:
    """Create ``path`` at ``size`` bytes, all or nothing.

    Created under a temporary name and renamed, so a crash never leaves a short file behind;
    a failure (no space, read-only) leaves nothing behind either. Files rebuilt from the
    CommitLog anyway (ConsumeQueues) skip the fsyncs: a topic with 1024 queues would otherwise
    pay 2048 of them on its first messages.
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | BINARY, 0o644)
    try:
        try:
            os.ftruncate(fd, size)
            if durable:
                sync_all(fd)
        finally:
            os.close(fd)
        replace_file(tmp, path)  # (an antivirus on Windows may be reading the new file)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(os.path.dirname(path))


def fsync_dir(path: str) -> None:
    sync_directory(path)
