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


def test_callbacks_qt_runs_between_waits_see_the_running_loop(loop, qapp):
    # As after every wait (qasync's last pass of events) or in a pytest-qt wait: the app's loop
    # never stops, so a client's task run there must find it.
    loop.run_until_complete(asyncio.sleep(0))
    seen = []
    loop.call_soon(lambda: seen.append(asyncio.get_running_loop()))
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        qapp.processEvents()
    assert seen == [loop]
