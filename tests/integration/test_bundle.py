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
    built = subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                            "--distpath", str(work / "dist"), "--workpath", str(work / "build"),
                            os.path.join(ROOT, "packaging", "rocketdesk.spec")], timeout=600,
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return str(work / "dist" / "rocketdesk")


def test_the_command_line_runs_from_the_bundle_with_the_compiled_core(bundle):
    env = dict(os.environ)
    env.pop("ROCKETDESK_PURE", None)  # (the suite may run under it: the bundle's core is asked)
    said = subprocess.run([os.path.join(bundle, "rocketdesk"), "--version"], capture_output=True,
                          text=True, timeout=60, check=True, env=env).stdout
    assert "compiled core" in said
    said = subprocess.run([os.path.join(bundle, "rocketdesk"), "-m", "cluster.namesrv", "--help"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "name server" in said


def test_the_windowed_console_starts_a_cluster_whose_nodes_run_the_command_line(bundle, tmp_path):
    cli = os.path.join(bundle, "rocketdesk")
    windowed = os.path.join(bundle, "rocketdesk-console")
    env = dict(os.environ, ROCKETDESK_HOME=str(tmp_path), QT_QPA_PLATFORM="offscreen",
               ROCKETDESK_EXPORT_WARM="0")
    env.pop("PYTHONPATH", None)  # the bundle's own modules, nothing of the checkout
    console = subprocess.Popen([windowed], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        nodes: list[psutil.Process] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_modules(nodes)) < 2:
            nodes = [p for p in psutil.Process(console.pid).children() if _cmdline(p)[1:2] == ["-m"]]
            time.sleep(0.5)
        assert _modules(nodes) >= {"cluster.namesrv", "cluster.broker"}, nodes
        # They run the command line's program, not the windowed one (no streams on Windows).
        assert {_cmdline(p)[0] for p in nodes} == {cli}
        assert console.poll() is None  # the console is still up
    finally:
        console.kill()
        console.wait(30)
        for cluster in (tmp_path / "clusters").glob("*"):
            subprocess.run([cli, "down", "--name", cluster.name], env=env, capture_output=True,
                           timeout=120, check=False)
    assert not [p for p in psutil.process_iter() if _cmdline(p)[:1] in ([cli], [windowed])]


def _modules(nodes: list[psutil.Process]) -> set[str]:
    return {line[2] for line in map(_cmdline, nodes) if len(line) > 2}


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
