"""The body CRC every put computes (common/_crc32.c): by carry-less multiplication where the CPU
has it, else by tables, and zlib's CRC-32 either way (RocketMQ stores it with the top bit
cleared; a record whose CRC differs is corrupt to every reader, ours and RocketMQ's)."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import speedups
from storage.record import body_crc, body_crc_pure

ROOT = Path(__file__).resolve().parents[3]
core = speedups.store_core
needs_core = pytest.mark.skipif(core is None, reason="no compiled core")


def _zlib(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


@needs_core
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 15))
def test_both_ways_are_zlibs_crc_at_any_length_and_alignment(data, skip):
    view = memoryview(data)[min(skip, len(data)):]  # (start off any 16-byte boundary)
    expected = _zlib(bytes(view))
    assert core.body_crc(view) == expected
    assert core.body_crc_table(view) == expected


@needs_core
@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 144, 191, 1024,
                                  1031, 1071, 4 << 20])
def test_the_folding_edges(size):
    """Below 64 bytes the tables do it all; from 64 the folding takes each 16 bytes it can and
    the tables the rest: every boundary of the two (144, 191, 1071: the 64-byte and the 16-byte
    loops both, and a tail), and a 4 MiB body (the largest message)."""
    data = os.urandom(size)
    assert core.body_crc(data) == _zlib(data) == core.body_crc_table(data)
    assert core.body_crc(b"\xff" * size) == _zlib(b"\xff" * size)


@needs_core
def test_a_record_stores_the_same_crc_both_ways():
    """The pure record writer (zlib) and the compiled put agree on stored bytes."""
    body = bytes(range(256)) * 5
    assert core.body_crc(body) == body_crc(body) == body_crc_pure(body)


@needs_core
@pytest.mark.parametrize("choice", ["table", ""])
def test_the_environment_may_keep_the_tables(choice):
    env = {**os.environ, "ROCKETDESK_CRC": choice}
    env.pop("ROCKETDESK_PURE", None)
    program = ("import os\nfrom common import speedups\n"
               "data = os.urandom(3000)\n"
               "import zlib\n"
               "assert speedups.store_core.body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF\n"
               "print(speedups.store_core.crc_kernel())")
    done = subprocess.run([sys.executable, "-c", program], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=60)
    if choice == "table":
        assert done.stdout.strip() == "table"
    else:  # the CPU decides: this machine's is x86-64 with PCLMULQDQ, or not
        assert done.stdout.strip() in {"pclmul", "table"}
        if sys.platform == "linux" and _cpu_has_pclmul():
            assert done.stdout.strip() == "pclmul"


def _cpu_has_pclmul() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " pclmulqdq" in flags and " sse4_1" in flags and os.uname().machine == "x86_64"
