"""The suite's hang watchdog (tests/conftest.py): a test stuck in C, where pytest-timeout's
signal never runs, still ends the run with every thread's stack and no process left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from tests.conftest import process_gone

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_test_stuck_in_c_ends_the_run_with_its_stack_and_its_children_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    (tmp_path / "test_stuck.py").write_text(textwrap.dedent(f"""
        import ctypes, signal, subprocess

        def test_stuck():
            child = subprocess.Popen(["sleep", "120"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
            # Stuck in C where pytest-timeout's alarm never gets its handler run.
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            ctypes.CDLL(None).sleep(120)
    """))
    env = dict(os.environ, ROCKETDESK_TEST_HANG_MARGIN="1", PYTHONPATH=ROOT)
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                          "conftest", "--rootdir", str(tmp_path), "--timeout", "1",
                          str(tmp_path / "test_stuck.py")],
                         cwd=os.path.join(ROOT, "tests"), env=env, capture_output=True, text=True,
                         timeout=90, check=False)
    assert run.returncode == 3
    assert time.monotonic() - started < 60
    output = run.stdout + run.stderr
    assert "test_stuck.py::test_stuck still running after 2 s" in output
    assert "in test_stuck" in output  # the stuck thread's stack, down to the test
    assert process_gone(int(pid_file.read_text()))
