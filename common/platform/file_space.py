"""Claiming a file's blocks before writing into them (see storage/file_space.py for why).

``posix_fallocate`` where the platform has it (Linux, the BSDs); macOS and Windows have none,
so there the store writes without claiming first, as on a file system that cannot."""

from __future__ import annotations

import errno
import os

# fallocate answers these when the file system cannot do it at all: write without it.
UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.ENODEV})


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Claim ``length`` bytes from ``offset``; False when this platform or file system cannot.
    Raises OSError (ENOSPC, EDQUOT, …) when the space is not there."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:
        return False
    try:
        fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in UNSUPPORTED:
            return False
        raise
    return True
