"""Stop requests as files (common/platform/stop_requests.py): Windows' only way to ask a process
without a console to stop, run here with real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from common.platform import processes, stop_requests
from tests.conftest import ROOT


@pytest.fixture
def own_folder(monkeypatch, tmp_path):
    """Requests in this test's own folder (in this process only)."""
    monkeypatch.setattr(stop_requests, "_base", lambda: tmp_path)
    return tmp_path


def test_a_request_is_taken_once_by_the_process_it_names(own_folder):
    watch = stop_requests.StopRequestWatch()
    assert not watch.asked()
    assert stop_requests.ask(psutil.Process())
    assert watch.asked()
    assert not watch.asked()  # taken away
    assert not list(stop_requests.request_folder().iterdir())


def test_a_request_for_an_earlier_process_with_the_same_pid_is_not_taken(own_folder):
    created = round(psutil.Process().create_time() * 1000)
    (stop_requests.request_folder() / f"{os.getpid()}-{created - 5000}").touch()
    assert not stop_requests.StopRequestWatch().asked()


def test_an_ended_process_cannot_be_asked_and_its_old_requests_are_forgotten(own_folder):
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as child:
        held = psutil.Process(child.pid)
        child.kill()
        child.wait()
    folder = stop_requests.request_folder()
    (folder / f"{child.pid}-123").touch()  # asked before it ended, never seen
    (folder / "99999999999999999999-1").touch()  # a pid no system has
    assert not stop_requests.ask(held)  # gone (or its pid someone else's): nothing asked
    assert stop_requests.ask(psutil.Process())
    assert [p.name for p in folder.iterdir()] == [stop_requests.request_name(psutil.Process())]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_folder_others_can_write_is_not_used(own_folder):
    folder = stop_requests.request_folder()
    folder.chmod(0o777)  # anyone could plant a request there
    with pytest.raises(stop_requests.RequestFolderError):
        stop_requests.request_folder()
    assert not stop_requests.ask(psutil.Process())
    watch = stop_requests.StopRequestWatch()
    assert watch.folder is None
    assert not watch.asked()


def test_a_request_that_cannot_be_removed_yet_is_acted_on_once(own_folder, monkeypatch):
    watch = stop_requests.StopRequestWatch()
    assert stop_requests.ask(psutil.Process())
    real_unlink = Path.unlink

    def in_use(self, missing_ok=False):  # Windows, while an antivirus reads the new file
        raise PermissionError(13, "in use", str(self))

    monkeypatch.setattr(Path, "unlink", in_use)
    assert watch.asked()
    assert not watch.asked()  # the same request: not again
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert not watch.asked()  # removed now
    assert not list(stop_requests.request_folder().iterdir())


@pytest.mark.skipif(sys.platform == "win32", reason="loop signal handlers are POSIX only")
def test_the_loop_watch_calls_back_on_the_loop(own_folder):
    async def main() -> float:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        watch = processes.on_stop_request(loop, stopped.set)
        try:
            assert stop_requests.ask(psutil.Process())
            began = time.monotonic()
            await asyncio.wait_for(stopped.wait(), 5)
            return time.monotonic() - began
        finally:
            watch.close()
            loop.remove_signal_handler(signal.SIGTERM)
            loop.remove_signal_handler(signal.SIGINT)

    assert asyncio.run(main()) < 2


def test_the_thread_watch_calls_back_survives_its_callback_and_stops_when_closed(own_folder):
    called = threading.Event()
    calls = []

    def callback() -> None:
        calls.append(1)
        called.set()
        if len(calls) == 1:
            raise RuntimeError("the first one fails")

    watch = processes.watch_stop_requests(callback)
    for _ in range(2):
        called.clear()
        assert stop_requests.ask(psutil.Process())
        assert called.wait(5)
    assert len(calls) == 2  # the failure did not end the watch
    watch.close()
    called.clear()
    assert stop_requests.ask(psutil.Process())
    assert not called.wait(3 * stop_requests.POLL_SECONDS)  # closed: not looked for any more


WATCHER = """
import asyncio, sys
from common.platform import processes
async def main():
    stopped = asyncio.Event()
    processes.on_stop_request(asyncio.get_running_loop(), stopped.set)
    print("ready", flush=True)
    await stopped.wait()
    print("stopping in order", flush=True)
asyncio.run(main())
"""


def test_a_stop_by_request_ends_another_process_in_order(monkeypatch):
    # The real request folder: the child looks there. Without the request the child would
    # never end: a stop by request sends no signal (and the test lets none be sent).
    monkeypatch.setattr(processes, "STOP_BY_REQUEST", True)  # Windows' stop, here
    monkeypatch.setattr(psutil.Process, "terminate", _no_signal)  # (the child takes SIGTERM too)
    with subprocess.Popen([sys.executable, "-c", WATCHER], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))) as child:
        try:
            assert child.stdout.readline().strip() == "ready"
            processes.terminate(child.pid)
            assert child.wait(10) == 0
            assert child.stdout.read().strip() == "stopping in order"
        finally:
            if child.poll() is None:
                child.kill()


def _no_signal(self) -> None:
    raise AssertionError("a stop by request sent a signal")
