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
returning it. macOS's and Windows's allocators cache big blocks themselves; musl has no such
knobs. There, and wherever mallopt is missing, this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
HEAP_BLOCKS_UP_TO = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit platforms
KEEP_FREE_UP_TO = 64 << 20


@functools.cache
def keep_big_buffers() -> bool:
    """Have glibc's malloc reuse freed big buffers (see the module's docstring); True when it
    does from now on, False where there is nothing to set. Once a process: later calls return
    the first's answer."""
    return _mallopt({M_MMAP_THRESHOLD: HEAP_BLOCKS_UP_TO, M_TRIM_THRESHOLD: KEEP_FREE_UP_TO})


def _mallopt(settings: dict[int, int]) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc's, not musl's: its mallopt ignores these)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 when it took the value, 0 when it refused it.
    return all(mallopt(option, value) == 1 for option, value in settings.items())
