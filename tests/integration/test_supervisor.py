"""The supervisor and the `rocketdesk` cluster commands, each call a separate process (so every
call reattaches through the state on disk), with real nodes on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import process_gone

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def rd(tmp_path):
    """Run `rocketdesk ...` with its data folder in tmp_path; tear down whatever is left."""
    env = dict(os.environ, ROCKETDESK_HOME=str(tmp_path / "home"), PYTHONPATH=ROOT)
    env.pop("NAMESRV_ADDR", None)

    def run(*args, check=True, timeout=90):
        done = subprocess.run([sys.executable, "-m", "rocketdesk.cli", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    yield run
    clusters = run("clusters", "--json", check=False)
    for cluster in json.loads(clusters.stdout or "[]"):
        run("down", "--name", cluster["name"], "--grace", "5", check=False)
    assert _our_processes(tmp_path) == [], "orphan node processes were left behind"


def _our_processes(tmp_path) -> list[int]:
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(tmp_path) in cmdline and "cluster." in cmdline:
            found.append(process.info["pid"])
    return found


def status(rd, name=None) -> dict:
    args = ["status", "--json"] + (["--name", name] if name else [])
    done = rd(*args, check=False)
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("profile", ["single", "ha", "2m-2s-sync", "2m-2s-async"])
def test_every_profile_comes_up_answers_and_goes_down_without_orphans(rd, tmp_path, profile):
    up = rd("up", "--profile", profile)
    assert "name server:" in up.stdout
    state = status(rd)  # a second process reattaches
    nodes = state["nodes"]
    assert all(n["state"] == "running" and n["health"] == "ok" for n in nodes), nodes
    expected = {"single": 3, "ha": 4, "2m-2s-sync": 7, "2m-2s-async": 7}[profile]
    assert len(nodes) == expected
    # Every cluster has a 5.x endpoint, announced on a line of its own.
    [proxy] = [n for n in nodes if n["kind"] == "proxy"]
    assert f"proxy {proxy['address']}" in up.stdout.splitlines()[1]
    assert all(n["rssBytes"] > 0 and n["openFiles"] > 0 for n in nodes)
    slaves = [n for n in nodes if n["role"] == "SLAVE"]
    assert len(slaves) == {"single": 0, "ha": 1}.get(profile, 2)
    pids = [n["pid"] for n in nodes]
    rd("down")
    assert all(process_gone(p) for p in pids)
    assert all(n["state"] == "stopped" for n in status(rd)["nodes"])
    rd("rm", profile)
    assert json.loads(rd("clusters", "--json").stdout) == []


def test_kill_restart_pause_resume_and_a_node_that_died(rd, tmp_path):
    rd("up", "--profile", "ha")
    rd("kill", "broker-a-0")
    nodes = {n["name"]: n for n in status(rd)["nodes"]}
    assert nodes["broker-a-0"]["state"] == "stopped"
    rd("restart", "broker-a-0")  # ready means registered again and the slave replicating
    nodes = {n["name"]: n for n in status(rd)["nodes"]}
    assert nodes["broker-a-0"]["health"] == "ok"

    rd("pause", "broker-a-1")
    assert {n["name"]: n for n in status(rd)["nodes"]}["broker-a-1"]["state"] == "paused"
    rd("resume", "broker-a-1")
    assert {n["name"]: n for n in status(rd)["nodes"]}["broker-a-1"]["health"] == "ok"

    # A node that dies on its own is noticed, with its last log lines, and status says so.
    victim = {n["name"]: n for n in status(rd)["nodes"]}["broker-a-1"]["pid"]
    os.kill(victim, signal.SIGKILL)
    deadline = time.time() + 10
    while psutil.pid_exists(victim) and time.time() < deadline:
        time.sleep(0.05)
    done = rd("status", check=False)
    assert done.returncode == 3
    assert "broker-a-1 died; its last log lines" in done.stdout
    assert "INFO cluster." in done.stdout.split("its last log lines")[1]
    logs = rd("logs", "broker-a-0", "-n", "5").stdout
    assert "boot success" in logs


def test_a_running_cluster_grows_by_a_group_and_a_slave(rd):
    rd("up", "--profile", "single")
    rd("add-group", "broker-b", "--file-size", str(64 << 20))
    rd("add-slave", "broker-b")
    listing = json.loads(rd("cluster", "list", "--json").stdout)
    assert sorted((r["brokerName"], r["brokerId"]) for r in listing) == [
        ("broker-a", 0), ("broker-b", 0), ("broker-b", 1)]
    assert {r["role"] for r in listing if r["brokerName"] == "broker-b"} == {"ASYNC_MASTER", "SLAVE"}


def test_data_is_deleted_only_when_asked_and_only_when_stopped(rd, tmp_path):
    rd("up", "--profile", "single", "--name", "keep")
    rd("message", "send", "-t", "Kept", "-b", "still here", "-k", "kept-1")
    refused = rd("rm", "keep", check=False)
    assert refused.returncode == 1
    assert "down" in refused.stderr
    assert "Traceback" not in refused.stderr
    rd("down")
    rd("up", "--name", "keep")  # the same cluster again, its store kept
    found = json.loads(rd("message", "query-key", "-t", "Kept", "-k", "kept-1", "--json").stdout)
    assert [m["keys"] for m in found] == ["kept-1"]
    rd("down")
    rd("rm", "keep")
    assert not (tmp_path / "home" / "clusters" / "keep").exists()


def test_mistakes_get_a_sentence_and_an_exit_code(rd):
    missing = rd("status", "--name", "nope", check=False)
    assert missing.returncode == 1
    assert "no cluster named 'nope'" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = rd("up", "--profile", "huge", check=False)
    assert bad.returncode == 1
    assert "no built-in profile 'huge'" in bad.stderr
    rd("up", "--profile", "single")
    wrong_node = rd("kill", "broker-z-0", check=False)
    assert wrong_node.returncode == 1
    assert "has no node 'broker-z-0'" in wrong_node.stderr


def test_a_new_cluster_takes_rocketmqs_default_ports_when_free_unless_told_not_to(tmp_path, monkeypatch):
    """The `single` profile's name server and broker, and a cluster's first proxy, on 9876,
    10911 and 8081 when those are free (a client's defaults then just work); never with
    ROCKETDESK_DEFAULT_PORTS=0, which the rest of the suite runs under."""
    from cluster.supervisor.ports import port_is_free
    from cluster.supervisor.spec import load_profile
    from cluster.supervisor.supervisor import DEFAULT_PORTS_ENV, Supervisor

    defaults = {"namesrv": 9876, "broker": 10911, "proxy": 8081}
    free = {kind: port_is_free(port) for kind, port in defaults.items()}
    monkeypatch.delenv(DEFAULT_PORTS_ENV)
    planned = Supervisor.create(load_profile("single"), "defaults", root=tmp_path)  # (nothing runs)
    ports = {node.kind: node.port for node in planned.state.nodes}
    assert {kind: ports[kind] == port for kind, port in defaults.items()} == free
    monkeypatch.setenv(DEFAULT_PORTS_ENV, "0")
    elsewhere = Supervisor.create(load_profile("single"), "elsewhere", root=tmp_path)
    assert not {node.port for node in elsewhere.state.nodes} & set(defaults.values())
