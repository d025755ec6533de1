"""GUI tests: offscreen Qt, one qasync loop shared with Qt's, a data folder per test."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
qasync = pytest.importorskip("qasync")


@pytest.fixture
def loop(qapp):
    event_loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(event_loop)
    yield event_loop
    event_loop.run_until_complete(asyncio.sleep(0))
    event_loop.close()  # while Qt is alive: closing at interpreter exit trips over deleted signals
    asyncio.set_event_loop(None)


@pytest.fixture
def pump(loop):
    """Run Qt and asyncio together until ``predicate()`` holds (or fail after ``timeout``)."""

    def run(predicate, timeout=30.0, what="the console"):
        async def wait():
            deadline = time.monotonic() + timeout
            while not predicate():
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out waiting for {what}")
                await asyncio.sleep(0.05)

        loop.run_until_complete(wait())

    return run


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # QSettings of the test
    return tmp_path / "home"
