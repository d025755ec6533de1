"""A run of the suite interrupted with Ctrl-C (SIGINT) skips the fixtures' teardown; the
processes its tests left under its temporary folder (a cluster's nodes, which their supervisor
detaches from the run) are ended at the run's end all the same (conftest.py
``pytest_sessionfinish``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

# A test that starts a detached process naming its tmp_path (as a node's command line names its
# cluster's folder), says its pid, and waits to be interrupted.
INNER = '''
import os, subprocess, sys, time

def test_leaves_a_process(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                              str(tmp_path / "node.conf")], start_new_session=True)
    (tmp_path.parent / "pid").write_text(str(child.pid))
    time.sleep(120)
'''


def test_an_interrupted_run_ends_the_processes_under_its_folder(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text("from tests.conftest import pytest_sessionfinish  # noqa\n")
    (inner / "test_inner.py").write_text(INNER)
    base = tmp_path / "base"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(base),
         "-o", "timeout=0", str(inner / "test_inner.py")],
        cwd=inner, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pid_file = base / "pid"
    child = None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), run.stdout.read1(8192) if run.poll() is not None else "no pid"
        child = int(pid_file.read_text())
        assert psutil.pid_exists(child)
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.1)
        assert not _alive(child), "the interrupted run left its test's process running"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        run.stdout.close()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
