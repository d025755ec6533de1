"""GUI tests: offscreen Qt, one qasync loop shared with Qt's, a data folder per test."""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
qasync = pytest.importorskip("qasync")


# The longest a test may wait on the console's event loop in one call.
LOOP_WAIT_LIMIT = 120.0


class BoundedEventLoop(qasync.QEventLoop):
    """A qasync loop for tests: the running loop all test long, as in the app, and every
    run_until_complete with a time limit.

    Between a test's waits Qt still runs the loop's callbacks (qasync's last pass of events
    after each wait, pytest-qt's waits and teardown), but qasync has unset the running loop by
    then: a client's task that asked for it there died (a consumer that never rebalanced, under
    a loaded CPU). In the app the loop never stops, so the tests keep it set.

    pytest-timeout's signal cannot end a wait inside Qt's event loop: its handler runs only
    when Python does, and then inside a callback, where asyncio logs the exception and goes on.
    A wait for something that never happens would hold CI until its own limit; this one fails
    with TimeoutError instead."""

    def run_forever(self):
        try:
            return super().run_forever()
        finally:
            asyncio._set_running_loop(self)

    def run_until_complete(self, future, limit: float = LOOP_WAIT_LIMIT):
        return super().run_until_complete(asyncio.wait_for(future, limit))


@pytest.fixture(autouse=True)
def _garbage_collected_on_the_gui_thread(qapp):
    """Python's cycle collector runs on whichever thread allocates when a generation fills up,
    and a Qt object it finds in garbage is deleted right there. A pytest-xdist worker runs other
    modules' tests before and after these, and a thread one of them leaves running can be that
    thread (grpc's aio poller, which the proxy's tests leave in the process, makes Python objects). A
    widget deleted there while the GUI thread processes events crashes the process (seen once:
    a worker's segfault inside pytest-qt's processEvents after a test, with such a thread in
    its dump). So while a GUI test runs only explicit collections happen, and what the test
    left (pytest-qt has closed and deleteLater()ed its widgets by now) is deleted here, on the
    GUI thread, before another thread could collect it. (The console process runs no other
    Python thread.)"""
    from PySide6.QtCore import QCoreApplication, QEvent

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        gc.collect()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        if was_enabled:
            gc.enable()


@pytest.fixture
def loop(qapp):
    event_loop = BoundedEventLoop(qapp)
    asyncio.set_event_loop(event_loop)
    asyncio._set_running_loop(event_loop)
    yield event_loop
    try:
        event_loop.run_until_complete(asyncio.sleep(0))
    finally:
        # Whatever happened: a loop left set as running would fail every later asyncio.run().
        asyncio._set_running_loop(None)
        event_loop.close()  # while Qt is alive: at interpreter exit it trips over deleted signals
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


@pytest.fixture(autouse=True)
def _no_warm_export_service(monkeypatch):
    """Console tests run each export in its own Spark: a warm export service (a JVM that
    outlives the test) only where a test asks for one and stops it."""
    monkeypatch.setenv("ROCKETDESK_EXPORT_WARM", "0")


@pytest.fixture(autouse=True)
def _temporary_files_in_the_test_folder(tmp_path, monkeypatch):
    """What a view puts in the temporary folder (an export's events file, even one whose
    process a test only pretends to start) goes with the test's own folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
