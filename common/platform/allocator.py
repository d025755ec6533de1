"""How the C allocator treats big buffers a process frees and soon needs again (glibc only).

A broker answering pulls builds a response of up to 4 MiB a pull and frees it once written; an
exporter's reader receives such responses and joins them into batches of ~10 MiB. glibc's
malloc serves blocks of 128 KiB and more with a fresh mmap each (it raises that threshold as it
sees such blocks freed, but only so far and only sometimes), and hands freed memory at the top
of its heap back to the kernel beyond 128 KiB. Either way the next buffer is new memory: a page
fault and a zeroed page every 4 KiB, for every pull. Measured with scripts/bench_pull_path.py
(one broker, 1,024-message pulls of 1 KiB records): the broker spent 1.5-1.8 µs of CPU a record
for its first ~3 million records, 0.6-0.7 once glibc's thresholds had settled, and 0.6-0.7
from the start with the two settings below; the reader 1.1-1.4 µs, then ~1.0.

So RocketDesk's own processes (nodes, the command line, the export's readers in Spark's
workers) keep blocks up to glibc's ceiling on the heap and up to 64 MiB of free heap before
returning it. The export's readers give the free heap back once their worker has read no
partition for a few seconds (``release_free_memory_when_idle``): Spark reuses its Python
workers for other work, but handing it back at the end of every partition made the next one
fault in its buffers afresh (~0.2 µs of CPU a record over pull, docs/benchmarks.md). macOS's and
Windows's allocators cache big blocks themselves; musl has no such knobs. There, wherever
mallopt is missing, where the operator tuned glibc's malloc (its environment variables), and
with ROCKETDESK_MALLOC_TUNING=0, this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
# glibc's ceiling for M_MMAP_THRESHOLD: HEAP_MAX_SIZE / 2, 32 MiB on 64-bit platforms and
# 512 KiB on 32-bit ones (a bigger value is refused).
HEAP_BLOCKS_UP_TO = 32 << 20 if ctypes.sizeof(ctypes.c_void_p) == 8 else 512 << 10
KEEP_FREE_UP_TO = 64 << 20
# The operator's own tuning of glibc's malloc, which this must not override.
OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                     "MALLOC_ARENA_MAX")


@functools.cache
def keep_big_buffers() -> bool:
    """Have glibc's malloc reuse freed big buffers (see the module's docstring); True when it
    does from now on, False where there is nothing to set. Once a process: later calls return
    the first's answer."""
    if not _ours_to_tune(os.environ):
        return False
    return _mallopt({M_MMAP_THRESHOLD: HEAP_BLOCKS_UP_TO, M_TRIM_THRESHOLD: KEEP_FREE_UP_TO})


def release_free_memory() -> None:
    """Hand the free heap back to the kernel now (glibc's malloc_trim), when this process
    keeps big buffers: the end of a piece of work after which the process may idle, or serve
    others, for long."""
    if not keep_big_buffers():
        return
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


IDLE_SECONDS = 3.0  # no partition read for this long: the worker is idle, or serves others


class _IdleRelease:
    """The one release of the free heap set up for when the process goes idle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def arm(self, after: float) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(after, release_free_memory)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


_idle_release = _IdleRelease()


def release_free_memory_when_idle(after: float = IDLE_SECONDS) -> None:
    """:func:`release_free_memory` ``after`` seconds from now, unless :func:`hold_free_memory`
    calls it off first: at the end of a piece of work that is often followed at once by the
    next (a partition of an export, then the next partition on the same worker)."""
    if keep_big_buffers():
        _idle_release.arm(after)


def hold_free_memory() -> None:
    """Work begins again: a release :func:`release_free_memory_when_idle` set up is off."""
    _idle_release.cancel()


def _ours_to_tune(environ) -> bool:
    if environ.get("ROCKETDESK_MALLOC_TUNING", "").strip() == "0":
        return False
    if any(name in environ for name in OPERATOR_SETTINGS):
        return False
    return "glibc.malloc." not in environ.get("GLIBC_TUNABLES", "")


def _glibc():
    """The C library when it is glibc (not musl, whose mallopt ignores these options)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc's alone)
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def _mallopt(settings: dict[int, int]) -> bool:
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 when it took the value, 0 when it refused it; each is asked, whatever
    # the others answer.
    answers = [mallopt(option, value) for option, value in settings.items()]
    return all(answer == 1 for answer in answers)
