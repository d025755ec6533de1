"""The GUI tests' own harness: a wait on the console's event loop for something that never
happens ends with an error, not a run held until CI's limit."""

from __future__ import annotations

import asyncio
import time

import pytest

pytestmark = pytest.mark.gui


def test_a_wait_for_what_never_happens_ends_at_the_loops_limit(loop):
    never = loop.create_future()  # nothing will ever complete it, and nothing else is scheduled
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        loop.run_until_complete(never, limit=0.3)
    assert time.monotonic() - started < 5
    assert loop.run_until_complete(asyncio.sleep(0, "still usable")) == "still usable"
