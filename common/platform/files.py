"""Deleting and replacing files another process may have open; setting an open file's time.

POSIX lets a file be deleted or renamed over while others have it open (they keep reading the
old one). Windows refuses both while any handle is open (another process reading the store,
the console reading a job record): there a delete waits for a later round, and a replace is
tried again a few times. A file's time is set through the descriptor already open:
Windows' ``os.utime`` opens the file again by name, sharing nothing, which a file this process
has open or mapped refuses."""

from __future__ import annotations

import functools
import os
import sys
import time

from common.platform.durability import sync_all

# os.open flags for a file read and written as bytes: Windows' C runtime opens a descriptor in
# text mode unless told (os.write would turn every 0x0A into 0x0D 0x0A, os.read stop at 0x1A).
BINARY = getattr(os, "O_BINARY", 0)

SHARING_VIOLATION = 32  # Windows: "the process cannot access the file: it is being used"
# Windows says "access is denied" too for a file another process has mapped, one already
# waiting for deletion, and a rename over a file open elsewhere. It cannot be told from a
# permission really missing; both are tried again (a delete waits for a later round, a replace
# fails after about a second), which costs a missing permission nothing but time.
ACCESS_DENIED = 5


def in_use_elsewhere(exc: OSError) -> bool:
    """Windows refusing because another process has the file open or mapped (POSIX never
    refuses for that: an error there is an error)."""
    return getattr(exc, "winerror", None) in (SHARING_VIOLATION, ACCESS_DENIED)


def remove_file(path: str) -> bool:
    """Delete ``path`` (gone already counts); False when Windows refuses because the file is in
    use elsewhere, so the caller tries again later. Any other failure raises, as before."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except PermissionError as exc:
        if in_use_elsewhere(exc):
            return False
        raise
    return True


def replace_file(source: str, target: str, attempts: int = 20, pause: float = 0.05) -> None:
    """``os.replace``, tried again while the target is in use (Windows), for about a second."""
    for attempt in range(attempts):
        try:
            os.replace(source, target)
            return
        except PermissionError as exc:
            if attempt == attempts - 1 or not in_use_elsewhere(exc):
                raise
            time.sleep(pause)


def write_config_file(path: str, text: str) -> None:
    """Replace a config file's content so that a crash leaves the old or the new one, never
    half of either: a temporary file, synced, renamed over the file; the previous content is
    kept as ``.bak`` (what a reader falls back to if the new one does not parse). Raises
    OSError (ENOSPC, EROFS…) with the file and its backup untouched."""
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            sync_all(handle.fileno())
        if os.path.exists(path):
            replace_file(path, path + ".bak")
        replace_file(tmp, path)  # (an inspector may be reading it: Windows refuses a while)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_text(path, attempts: int = 20, pause: float = 0.05) -> str:
    """A UTF-8 file's text, tried again while Windows refuses it (being replaced that moment)."""
    for _ in range(attempts - 1):
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except PermissionError as exc:
            if not in_use_elsewhere(exc):
                raise
            time.sleep(pause)
    with open(path, encoding="utf-8") as handle:  # the last try: whatever it meets, raises
        return handle.read()


def set_modified_time(fd: int, seconds: float) -> None:
    """Set the modification time of the open file ``fd`` to ``seconds`` since the epoch, to the
    millisecond (a store time's precision), its access time kept (``fd`` must be open for
    writing on Windows)."""
    ms = round(seconds * 1000)
    if sys.platform == "win32":
        import ctypes
        import msvcrt
        from ctypes import wintypes

        ticks = ms * 10_000 + _FILETIME_UNIX_EPOCH
        written = wintypes.FILETIME(ticks & 0xFFFFFFFF, ticks >> 32)
        # Creation and access times None: left as they are.
        if not _kernel32().SetFileTime(wintypes.HANDLE(msvcrt.get_osfhandle(fd)), None, None,
                                       ctypes.byref(written)):
            raise ctypes.WinError(ctypes.get_last_error())
        return
    os.utime(fd, ns=(os.fstat(fd).st_atime_ns, ms * 1_000_000))


# 100-nanosecond intervals between Windows' epoch (1601-01-01) and the Unix one.
_FILETIME_UNIX_EPOCH = 116_444_736_000_000_000


@functools.cache
def _kernel32():
    """Windows' kernel32, through ctypes (tests put a fake in its place)."""
    import ctypes

    return ctypes.WinDLL("kernel32", use_last_error=True)
