"""`rocketdesk bench peers` run as a user runs it: its own RocketDesk cluster, nats-server and
redis-server where they are installed, a table at the end and nothing left running or on disk."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import psutil
import pytest

from rocketdesk.bench.peer_servers import JETSTREAM, REDIS_STREAMS, find_binary
from rocketdesk.bench.peers import COLUMNS, ROCKETDESK, SHAPES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVERS = ("nats-server", "redis-server")


def _available(binary: str, module: str) -> bool:
    return find_binary(binary) is not None and importlib.util.find_spec(module) is not None


def _server_pids() -> set[int]:
    pids = set()
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["name"] in SERVERS:
            pids.add(process.info["pid"])
    return pids


def _ours(tmp_path) -> list[str]:
    """Processes whose command line points into the test's folder: servers and cluster nodes."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(tmp_path) in cmdline and process.info["pid"] != os.getpid():
            found.append(cmdline)
    return found


def _row(stdout: str, shape: str, system: str) -> str:
    (_, shape_width), (_, system_width) = COLUMNS[:2]
    prefix = f"{shape:<{shape_width}}{system:<{system_width}}"
    lines = [line for line in stdout.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, (shape, system, stdout)
    return lines[0][len(prefix):]


def _msg_per_sec(cells: str) -> float:
    return float(cells.split(maxsplit=1)[0].replace(",", ""))


def test_bench_peers_prints_a_table_and_leaves_nothing_running(tmp_path):
    # tempfile puts the bench's scratch folder under TMPDIR: here, where the test can see it.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(scratch),
               ROCKETDESK_HOME=str(tmp_path / "home"))
    env.pop("NAMESRV_ADDR", None)
    servers_before = _server_pids()
    done = subprocess.run(
        [sys.executable, "-m", "rocketdesk.cli", "bench", "peers", "--duration", "1",
         "--warmup", "0.2"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr

    expected = {JETSTREAM: _available("nats-server", "nats"),
                REDIS_STREAMS: _available("redis-server", "redis")}
    for shape in SHAPES:
        assert _msg_per_sec(_row(done.stdout, shape.name, ROCKETDESK)) > 0
        for system, available in expected.items():
            cells = _row(done.stdout, shape.name, system)
            if available:
                assert _msg_per_sec(cells) > 0, cells
            else:
                assert "not installed" in cells, cells

    assert _ours(tmp_path) == [], "the bench left processes running"
    assert _server_pids() - servers_before == set(), "a nats-server or redis-server was left running"
    assert list(scratch.iterdir()) == [], "the bench left its scratch folder behind"
