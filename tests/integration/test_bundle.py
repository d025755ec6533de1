"""The desktop bundle (packaging/rocketdesk.spec) builds, and its two programs work: the command
line, and the windowed console, whose cluster nodes run the command line's program (a windowed
program has no streams to log to on Windows)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> str:
    work = tmp_path_factory.mktemp("bundle")
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                    "--distpath", str(work / "dist"), "--workpath", str(work / "build"),
                    os.path.join(ROOT, "packaging", "rocketdesk.spec")], check=True, timeout=600,
                   capture_output=True)
    return str(work / "dist" / "rocketdesk")


def test_the_command_line_runs_from_the_bundle_with_the_compiled_core(bundle):
    said = subprocess.run([os.path.join(bundle, "rocketdesk"), "--version"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    assert "compiled core" in said
    said = subprocess.run([os.path.join(bundle, "rocketdesk"), "-m", "cluster.namesrv", "--help"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "name server" in said


def test_the_windowed_console_starts_a_cluster_whose_nodes_run_the_command_line(bundle, tmp_path):
    cli = os.path.join(bundle, "rocketdesk")
    env = dict(os.environ, ROCKETDESK_HOME=str(tmp_path), QT_QPA_PLATFORM="offscreen",
               ROCKETDESK_EXPORT_WARM="0")
    env.pop("PYTHONPATH", None)  # the bundle's own modules, nothing of the checkout
    console = subprocess.Popen([os.path.join(bundle, "rocketdesk-console")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        nodes: list[psutil.Process] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(nodes) < 3:
            nodes = [p for p in psutil.process_iter() if _runs_from(p, cli)]
            time.sleep(0.5)
        assert {_module(p) for p in nodes} >= {"cluster.namesrv", "cluster.broker"}, nodes
        assert all(p.cmdline()[0] == cli for p in nodes)  # the console-mode program, not itself
        assert console.poll() is None  # the console is still up
    finally:
        console.terminate()
        console.wait(30)
        subprocess.run([cli, "down", "--name", "single"], env=env, capture_output=True, timeout=120,
                       check=False)
    assert not [p for p in psutil.process_iter() if _runs_from(p, cli)]


def _runs_from(process: psutil.Process, program: str) -> bool:
    try:
        return process.cmdline()[:1] == [program]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _module(process: psutil.Process) -> str:
    line = process.cmdline()
    return line[line.index("-m") + 1]
