"""Stop requests as files (common/platform/stop_requests.py): Windows' only way to ask a process
without a console to stop, run here with real processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from common.platform import processes, stop_requests
from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def own_temp(monkeypatch, tmp_path):
    """Requests in this test's own temp folder (children are told through TMPDIR)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def test_a_request_is_taken_once_by_the_process_it_names():
    watch = stop_requests.StopRequestWatch()
    assert not watch.asked()
    assert stop_requests.ask(os.getpid())
    assert watch.asked()
    assert not watch.asked()  # taken away
    assert not list(stop_requests.request_folder().iterdir())


def test_a_request_for_an_earlier_process_with_the_same_pid_is_not_taken():
    folder = stop_requests.request_folder()
    created = round(psutil.Process().create_time() * 1000)
    (folder / f"{os.getpid()}-{created - 5000}").touch()  # an earlier owner of this pid
    assert not stop_requests.StopRequestWatch().asked()


def test_requests_to_ended_processes_are_forgotten_and_a_gone_process_cannot_be_asked():
    with subprocess.Popen([sys.executable, "-c", "pass"]) as child:
        child.wait()
    folder = stop_requests.request_folder()
    (folder / f"{child.pid}-123").touch()
    assert not stop_requests.ask(child.pid)  # gone: nothing to ask
    assert stop_requests.ask(os.getpid())
    assert [p.name for p in folder.iterdir()] == [stop_requests._name(psutil.Process())]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_folder_others_can_write_is_not_used(own_temp):
    folder = stop_requests.request_folder()
    folder.chmod(0o777)  # anyone could plant a request there
    with pytest.raises(stop_requests.RequestFolderError):
        stop_requests.request_folder()
    assert not stop_requests.ask(os.getpid())
    watch = stop_requests.StopRequestWatch()
    assert watch.path is None
    assert not watch.asked()


def test_the_loop_watch_calls_back_on_the_loop():
    async def main() -> int:
        stopped = asyncio.Event()
        watch = processes.on_stop_request(asyncio.get_running_loop(), stopped.set)
        try:
            assert stop_requests.ask(os.getpid())
            began = time.monotonic()
            await asyncio.wait_for(stopped.wait(), 5)
            return time.monotonic() - began
        finally:
            watch.close()
            asyncio.get_running_loop().remove_signal_handler(15)
            asyncio.get_running_loop().remove_signal_handler(2)

    assert asyncio.run(main()) < 2


def test_the_thread_watch_calls_back_and_stops_when_closed():
    called = threading.Event()
    watch = processes.watch_stop_requests(called.set)
    assert stop_requests.ask(os.getpid())
    assert called.wait(5)
    watch.close()
    called.clear()
    assert stop_requests.ask(os.getpid())
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
    monkeypatch.setattr(processes, "STOP_BY_REQUEST", True)  # Windows' stop, here
    with subprocess.Popen([sys.executable, "-c", WATCHER], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))) as child:
        try:
            assert child.stdout.readline().strip() == "ready"
            processes.terminate(child.pid)
            assert child.wait(10) == 0  # it ended on its own, not terminated
            assert child.stdout.read().strip() == "stopping in order"
        finally:
            if child.poll() is None:
                child.kill()
