"""common/platform/allocator.py: glibc keeps big freed buffers for reuse once a process asks.

What the settings do is read back from glibc itself (mallinfo2: bytes in mmapped blocks, free
bytes kept on the heap) in a fresh interpreter each, so one test's allocations never blur
another's and the process's first allocations start from glibc's defaults.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import types

import pytest

from common.platform import allocator

GLIBC = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallinfo2")

# A 20 MiB block, then freed: where it came from and what was kept, as glibc counts them.
PROBE = """
import ctypes, sys
from common.platform import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    assert allocator.keep_big_buffers()
block = bytearray(20 << 20)
mapped = libc.mallinfo2().hblkhd
del block
print(mapped, libc.mallinfo2().fordblks)
"""


def _probe(mode: str) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          check=True, timeout=60)
    mapped, free = done.stdout.split()
    return int(mapped), int(free)


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_big_buffer_comes_from_the_heap_and_stays_there_once_freed():
    mapped, free = _probe("tuned")
    assert mapped < 20 << 20  # not a mapping of its own, made and unmade for each buffer
    assert free >= 20 << 20  # kept for the next buffer, not handed back to the kernel


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_glibcs_defaults_map_each_big_buffer_afresh():
    # What the module changes: without it the same block is a fresh mapping (page faults and
    # zeroed pages every 4 KiB, each time a pull's answer is built).
    mapped, _free = _probe("default")
    assert mapped >= 20 << 20


def test_nothing_is_set_off_linux(monkeypatch):
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator._mallopt({allocator.M_MMAP_THRESHOLD: 1 << 20}) is False


def test_nothing_is_set_where_the_c_library_is_not_glibc(monkeypatch):
    # musl has mallopt but ignores these options; it has no gnu_get_libc_version.
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda _name: types.SimpleNamespace(
        mallopt=lambda *_args: 1))
    assert allocator._mallopt({allocator.M_MMAP_THRESHOLD: 1 << 20}) is False


def test_a_refused_value_is_reported(monkeypatch):
    calls = []

    def mallopt(option, value):
        calls.append((option, value))
        return 0 if option == allocator.M_TRIM_THRESHOLD else 1

    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda _name: types.SimpleNamespace(
        gnu_get_libc_version=object(), mallopt=mallopt))
    assert allocator._mallopt({allocator.M_MMAP_THRESHOLD: 32 << 20,
                               allocator.M_TRIM_THRESHOLD: 64 << 20}) is False
    assert calls == [(allocator.M_MMAP_THRESHOLD, 32 << 20), (allocator.M_TRIM_THRESHOLD, 64 << 20)]
