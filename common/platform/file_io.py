"""Reading and writing at a file position without moving a shared one.

``os.pread``/``os.pwrite`` on POSIX. Windows' Python has neither: there a seek and a read or
write stand in for them, under one lock, so that two threads never interleave a seek with
another's read."""

from __future__ import annotations

import os
import threading

_positioned = threading.Lock()


def pread(fd: int, size: int, offset: int) -> bytes:
    native = getattr(os, "pread", None)
    if native is not None:
        return native(fd, size, offset)
    with _positioned:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)


def pwrite(fd: int, data, offset: int) -> int:
    native = getattr(os, "pwrite", None)
    if native is not None:
        return native(fd, data, offset)
    with _positioned:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)
