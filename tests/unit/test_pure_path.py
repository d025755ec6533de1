"""The pure-Python path stays a whole implementation, not only the twins' reference: the unit
suite (stores, in-process brokers and clients, codecs) passes again with ROCKETDESK_PURE=1.

The choice between the compiled core and the pure code is made once, at import
(common/speedups.py), so the second run is a fresh interpreter. The twins' own tests compare
both paths function by function; this catches what they cannot: a caller that only works with
the compiled core (a C-only argument, a result shape, a fallback that no longer falls back).
Twin comparisons marked ``twins`` load the extension directly and call nothing the mode
selects, so they would only run again exactly as in the first pass: this one leaves them out.
(Those whose pure side calls a mode-selected function, a hash, the CRC, a codec, stay.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from common import speedups
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _workers() -> list[str]:
    """Two pytest processes, a test file each at a time, where there are two cores: this test's
    own process only waits meanwhile, and the unit tests hold each other up in nothing but the
    CPU (their ports are the kernel's picks, their folders their own)."""
    if (os.cpu_count() or 1) < 2 or importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", "2", "--dist", "loadfile"]


@pytest.mark.skipif(speedups.core is None, reason="this is the pure run already (or the core "
                    "is not built: the whole suite is on the pure path)")
@pytest.mark.timeout(1500)
def test_the_unit_suite_passes_on_the_pure_path():
    env = dict(os.environ, ROCKETDESK_PURE="1")
    said = subprocess.run([sys.executable, "-m", "rocketdesk", "--version"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "pure Python (ROCKETDESK_PURE=1)" in said, said
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                          *_workers(), "-m", "not twins", os.path.join("tests", "unit")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1400,
                         check=False)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-2000:]
