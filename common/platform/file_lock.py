"""A lock file one process holds while it owns a store.

Linux: ``flock`` stops a second store in this process, and ``lockf`` (a POSIX record lock,
what Java's FileChannel.tryLock takes) stops another process, a Java broker included. macOS:
``flock`` alone (BSD keeps both kinds of lock in one list, so a process's own ``flock`` would
refuse its ``lockf``; not yet tried on a real Mac). Windows: ``msvcrt.locking`` on the first
byte, which every other opener is refused."""

from __future__ import annotations

import sys

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


def try_lock(fd: int) -> None:
    """Take the lock or raise OSError (held elsewhere) at once, never waiting."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if sys.platform != "darwin":
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        return
    import msvcrt

    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
