"""common/platform/allocator.py: glibc keeps big freed buffers for reuse once a process asks.

What the settings do is read back from glibc itself (mallinfo2: bytes in mmapped blocks, free
bytes kept on the heap) in a fresh interpreter each, so one test's allocations never blur
another's and the process's first allocations start from glibc's defaults.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import types

import pytest

from common.platform import allocator

# mallinfo2 (what the probe reads back) is glibc 2.33's and later.
GLIBC_2_33 = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallinfo2")

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
tuned = sys.argv[1] != "default" and allocator.keep_big_buffers()
block = bytearray(20 << 20)
mapped = libc.mallinfo2().hblkhd
del block
kept = libc.mallinfo2().fordblks
if sys.argv[1] == "released":
    allocator.release_free_memory()
elif sys.argv[1] in ("idle", "held"):
    import time
    allocator.release_free_memory_when_idle(0.3)
    assert libc.mallinfo2().fordblks >= 20 << 20  # (not yet: the next piece of work may come)
    if sys.argv[1] == "held":
        time.sleep(0.1)
        allocator.hold_free_memory()  # (it came)
    time.sleep(1.0)
print(tuned, mapped, kept, libc.mallinfo2().fordblks)
"""


def _probe(mode: str, **environ: str) -> tuple[bool, int, int, int]:
    """(tuned, bytes in mappings with the block alive, free heap after it was freed, free heap
    at the end), from a fresh interpreter whose environment has no malloc tuning of its own."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("MALLOC_", "GLIBC_TUNABLES", "ROCKETDESK_MALLOC"))}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          check=True, timeout=60, env={**env, **environ})
    tuned, mapped, kept, free = done.stdout.split()
    return tuned == "True", int(mapped), int(kept), int(free)


needs_glibc = pytest.mark.skipif(not GLIBC_2_33, reason="reads glibc's counts (mallinfo2, 2.33+)")


@needs_glibc
def test_a_big_buffer_comes_from_the_heap_and_stays_there_once_freed():
    tuned, mapped, kept, _free = _probe("tuned")
    assert tuned
    assert mapped < 20 << 20  # not a mapping of its own, made and unmade for each buffer
    assert kept >= 20 << 20  # kept for the next buffer, not handed back to the kernel


@needs_glibc
def test_glibcs_defaults_map_each_big_buffer_afresh():
    # What the module changes: without it the same block is a fresh mapping (page faults and
    # zeroed pages every 4 KiB, each time a pull's answer is built).
    tuned, mapped, _kept, _free = _probe("default")
    assert not tuned
    assert mapped >= 20 << 20


@needs_glibc
def test_the_free_heap_goes_back_when_asked():
    # The export's readers do this when a partition is done: Spark reuses its workers.
    _tuned, _mapped, kept, free = _probe("released")
    assert kept >= 20 << 20
    assert free < 4 << 20


@needs_glibc
def test_the_free_heap_goes_back_once_no_work_came_for_a_while():
    # The export's readers, at the end of a partition: the worker's next partition often
    # follows at once and reuses the heap; an idle worker hands it back.
    _tuned, _mapped, kept, free = _probe("idle")
    assert kept >= 20 << 20
    assert free < 4 << 20


@needs_glibc
def test_work_that_comes_before_the_idle_release_keeps_the_free_heap():
    _tuned, _mapped, kept, free = _probe("held")
    assert kept >= 20 << 20
    assert free >= 20 << 20


@needs_glibc
@pytest.mark.parametrize("environ", [
    {"ROCKETDESK_MALLOC_TUNING": "0"},
    {"MALLOC_TRIM_THRESHOLD_": "131072"},
    {"MALLOC_ARENA_MAX": "2"},
    {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=262144"},
])
def test_the_operators_own_malloc_tuning_is_left_alone(environ):
    tuned, mapped, _kept, _free = _probe("tuned", **environ)
    assert not tuned
    assert mapped >= 20 << 20  # glibc's own way (or the operator's) stands


def test_tunables_for_something_else_do_not_stop_it():
    assert allocator._ours_to_tune({"GLIBC_TUNABLES": "glibc.rtld.nns=2"})
    assert not allocator._ours_to_tune({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"})


def test_nothing_is_set_off_linux(monkeypatch):
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator._mallopt({allocator.M_MMAP_THRESHOLD: 1 << 20}) is False


def test_nothing_is_set_where_the_c_library_is_not_glibc(monkeypatch):
    # musl has mallopt but ignores these options; it has no gnu_get_libc_version.
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda _name: types.SimpleNamespace(
        mallopt=lambda *_args: 1))
    assert allocator._mallopt({allocator.M_MMAP_THRESHOLD: 1 << 20}) is False


@pytest.mark.parametrize("refused", [allocator.M_MMAP_THRESHOLD, allocator.M_TRIM_THRESHOLD])
def test_a_refused_value_is_reported_and_the_others_still_set(monkeypatch, refused):
    calls = []

    def mallopt(option, value):
        calls.append((option, value))
        return 0 if option == refused else 1

    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda _name: types.SimpleNamespace(
        gnu_get_libc_version=object(), mallopt=mallopt))
    assert allocator._mallopt({allocator.M_MMAP_THRESHOLD: 32 << 20,
                               allocator.M_TRIM_THRESHOLD: 64 << 20}) is False
    assert calls == [(allocator.M_MMAP_THRESHOLD, 32 << 20), (allocator.M_TRIM_THRESHOLD, 64 << 20)]
