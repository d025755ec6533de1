"""A lock file one process holds while it owns a store.

Linux: ``flock`` stops a second store in this process, and ``lockf`` (a POSIX record lock,
what Java's FileChannel.tryLock takes) stops another process, a Java broker included. macOS:
``flock`` alone (BSD keeps both kinds of lock in one list, so a process's own ``flock`` would
refuse its ``lockf``; not yet tried on a real Mac). Windows: ``msvcrt.locking`` on the first
byte, which every other opener is refused; Windows lets go of a killed process's locks only a
moment after it ended (LockFileEx: "depends upon available system resources"), so a broker
restarted at once asks again for up to two seconds."""

from __future__ import annotations

import sys
import time

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


def try_lock(fd: int) -> None:
    """Take the lock or raise OSError (held elsewhere); at once, but for Windows' moment."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if sys.platform != "darwin":
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        return
    import msvcrt

    deadline = time.monotonic() + WINDOWS_RELEASE_WAIT
    while True:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


WINDOWS_RELEASE_WAIT = 2.0
