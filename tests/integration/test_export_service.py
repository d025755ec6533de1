"""The warm export service with real Spark and a real cluster: started by the first export that
asks for it, later exports run on the same Spark application at once; exports as jobs
(`rocketdesk export list|show|cancel`); the service ends when asked and when its console goes."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("pyspark")
pa_parquet = pytest.importorskip("pyarrow.parquet")

from cluster.client.admin import AdminClient  # noqa: E402
from cluster.supervisor.spec import ClusterSpec, GroupSpec  # noqa: E402
from cluster.supervisor.supervisor import Supervisor  # noqa: E402
from rocketdesk.export_service import wait_gone  # noqa: E402
from tests.integration.test_export import parquet_rows, send  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = str(Path(__file__).resolve().parents[2])
TOTAL = 20_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(name="warm", groups=[GroupSpec("broker-a", commitlog_file_size=64 << 20)])
    supervisor = Supervisor.create(spec, root=tmp_path_factory.mktemp("clusters"))
    asyncio.run(supervisor.start())
    namesrv = supervisor.state.namesrv_addr

    async def prepare():
        async with AdminClient(namesrv) as admin:
            await admin.create_topic("Warm", 4, 4)
            await admin.create_topic("Live", 4, 4)
        await send(namesrv, "Warm", range(TOTAL))
        await send(namesrv, "Live", range(3000))

    asyncio.run(prepare())
    yield supervisor
    asyncio.run(supervisor.stop())


def rocketdesk(home: Path, *args, timeout=240, env=None):
    return subprocess.run([sys.executable, "-m", "rocketdesk.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False,
                          env=dict(os.environ, PYTHONPATH=ROOT, ROCKETDESK_HOME=str(home),
                                   **(env or {})))


def service_pid(home: Path) -> int | None:
    state = home / "exports" / "service.json"
    return json.loads(state.read_text())["pid"] if state.exists() else None


def test_exports_on_the_warm_service_share_one_spark_and_are_listed_as_jobs(cluster, tmp_path):
    home = tmp_path / "home"
    namesrv = cluster.state.namesrv_addr
    try:
        # (The service runs in a zone with daylight saving: partition folders stay UTC.)
        first = rocketdesk(home, "export", "-n", namesrv, "-t", "Warm", "--out",
                           str(tmp_path / "first"), "--warm", "--json",
                           env={"TZ": "America/New_York"})
        assert first.returncode == 0, first.stderr[-3000:]
        assert "started the warm export service" in first.stderr
        pid = service_pid(home)
        assert pid is not None
        # Its JVM's temporary files go in a folder of its own, not /tmp (removed by a starter
        # once the service is gone).
        jvms = [c for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
        assert jvms
        temp = f"-Djava.io.tmpdir={home / 'exports' / 'service-tmp'}{os.sep}"
        assert all(any(a.startswith(temp) for a in c.cmdline()) for c in jvms), [c.cmdline() for c in jvms]
        # The next export finds the service by itself and runs on the same Spark application.
        events = tmp_path / "second.jsonl"
        second = rocketdesk(home, "export", "-n", namesrv, "-t", "Warm", "--out",
                            str(tmp_path / "second"), "--json", "--events", str(events))
        assert second.returncode == 0, second.stderr[-3000:]
        one, two = json.loads(first.stdout), json.loads(second.stdout)
        assert one["sparkApplication"] == two["sparkApplication"]
        said = [json.loads(line) for line in events.read_text().splitlines()]
        assert said[0]["event"] == "launched"
        assert (said[1]["event"], said[1]["warm"]) == ("started", True)
        for summary, folder in ((one, "first"), (two, "second")):
            assert summary["planned"] == summary["exported"] == TOTAL
            assert summary["verified"] is True
            rows = parquet_rows(tmp_path / folder)  # read back by pyarrow: each message once
            assert sorted(int(dict(r["properties"])["seq"]) for r in rows) == list(range(TOTAL))

        # Partitioned as a data lake expects: Hive-style folders by the store time's UTC date
        # and hour and by tag, read back by pyarrow with every message once in its folder.
        lake = tmp_path / "lake"
        parted = rocketdesk(home, "export", "-n", namesrv, "-t", "Warm", "--out", str(lake),
                            "--partition-by", "date,hour,tag", "--json")
        assert parted.returncode == 0, parted.stderr[-3000:]
        assert json.loads(parted.stdout)["verified"] is True
        table = pa_parquet.ParquetDataset(str(lake), partitioning="hive").read()
        assert table.num_rows == TOTAL
        folders = {p.relative_to(lake).parts[:3] for p in lake.rglob("*.parquet")}
        assert {f[2] for f in folders} == {"tag=TagA", "tag=TagB"}
        for row in table.select(["storeTimestamp", "date", "hour", "tag", "tags"]).to_pylist()[::997]:
            stored = row["storeTimestamp"].astimezone(datetime.UTC)
            assert (str(row["date"]), int(row["hour"])) == (stored.strftime("%Y-%m-%d"), stored.hour)
            assert row["tag"] == row["tags"]

        # --cold still runs in a Spark of its own.
        cold = rocketdesk(home, "export", "-n", namesrv, "-t", "Warm", "--out",
                          str(tmp_path / "cold"), "--json", "--cold")
        assert cold.returncode == 0, cold.stderr[-3000:]
        assert json.loads(cold.stdout)["sparkApplication"] != one["sparkApplication"]

        # Exports as jobs: listed newest first, one shown with the offsets it covered.
        listed = json.loads(rocketdesk(home, "export", "list", "--json").stdout)
        assert [(r["state"], bool(r.get("service"))) for r in listed] == [
            ("finished", False), ("finished", True), ("finished", True), ("finished", True)]
        shown = rocketdesk(home, "export", "show", listed[2]["id"])
        assert shown.returncode == 0, shown.stderr
        assert "each message once" in shown.stdout
        assert '"broker-a": {"0":' in shown.stdout  # the manifest's ending offsets

        # A cancelled export on the service: cancelled, no output, no staging folder.
        out = tmp_path / "cancelled"
        running = subprocess.Popen(
            # (small partitions: a few seconds of tasks, so the cancel lands while it runs)
            [sys.executable, "-m", "rocketdesk.cli", "export", "-n", namesrv, "-t", "Warm",
             "--out", str(out), "--partition-size", "100"], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=ROOT, ROCKETDESK_HOME=str(home)))
        jobs = home / "exports" / "jobs"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(list(jobs.glob("*.json"))) < 5:
            time.sleep(0.05)
        cancel = rocketdesk(home, "export", "cancel", "last")
        _, err = running.communicate(timeout=60)
        assert cancel.returncode == 0, (cancel.stdout, cancel.stderr)
        assert "cancelled" in cancel.stdout
        assert running.returncode == 130, err[-2000:]
        assert not out.exists()
        assert not list(tmp_path.glob(".staging-*"))
        assert json.loads(rocketdesk(home, "export", "list", "--json").stdout)[0]["state"] == "cancelled"

        stopped = rocketdesk(home, "export", "service", "stop")
        assert "stopped" in stopped.stdout
        assert wait_gone(pid, 30)
        assert service_pid(home) is None
        assert rocketdesk(home, "export", "service", "status").returncode == 3
    finally:
        rocketdesk(home, "export", "service", "stop")


def test_a_service_started_for_a_console_ends_with_it_once_the_export_it_left_running_is_done(
        cluster, tmp_path):
    """A console closing with "Keep it running" leaves its export's launcher to submit the
    export to the service the console started, maybe seconds later: the service waits for it
    (it ends only once no request has come for a while), runs it to the end, then ends."""
    home = tmp_path / "home"
    console = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    parent = {"ROCKETDESK_EXPORT_SERVICE_PARENT": str(console.pid)}
    try:
        started = rocketdesk(home, "export", "service", "start", env=parent)
        assert started.returncode == 0, started.stderr[-3000:]
        pid = service_pid(home)
        assert pid is not None
    finally:
        console.kill()
        console.wait()
    time.sleep(3)  # a launcher slow to start: the service looks for its console every 2 s
    kept = rocketdesk(home, "export", "-n", cluster.state.namesrv_addr, "-t", "Warm", "--out",
                      str(tmp_path / "kept"), "--warm", env=parent)
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert "started the warm export service" not in kept.stderr  # the console's, still there
    record = json.loads(rocketdesk(home, "export", "list", "--json").stdout)[0]
    assert (record["state"], record["exported"], record["service"]) == ("finished", TOTAL, True), record
    assert wait_gone(pid, 45), "the service outlived the console that started it"
    assert service_pid(home) is None


def committed_files(out: Path) -> list[str]:
    """The Parquet files Spark's file sink committed (its _spark_metadata log): a batch cut
    short by a stop leaves files that are not part of the output."""
    files: set[str] = set()
    for log in sorted((out / "_spark_metadata").iterdir()):
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:  # after the version line
            entry = json.loads(line)
            path = entry["path"].removeprefix("file://")
            (files.add if entry.get("action", "add") == "add" else files.discard)(path)
    return sorted(files)


def wait_exported(home: Path, count: int, jobs: int = 1, seconds: float = 90) -> dict:
    """The newest export's record once it has exported ``count`` (and ``jobs`` exist)."""
    deadline = time.monotonic() + seconds
    record: dict = {}
    while time.monotonic() < deadline:
        records = json.loads(rocketdesk(home, "export", "list", "--json").stdout)
        record = records[0] if len(records) >= jobs else {}
        if (record.get("exported") or 0) >= count:
            return record
        time.sleep(0.5)
    raise AssertionError(f"the continuous export reached {record.get('exported')}, not {count}")


def test_a_continuous_export_stopped_and_resumed_has_every_message_once(cluster, tmp_path):
    home = tmp_path / "home"
    namesrv = cluster.state.namesrv_addr
    out = tmp_path / "live"
    command = [sys.executable, "-m", "rocketdesk.cli", "export", "-n", namesrv, "-t", "Live",
               "--out", str(out), "--continuous", "--trigger-seconds", "1"]
    env = dict(os.environ, PYTHONPATH=ROOT, ROCKETDESK_HOME=str(home))
    try:
        assert rocketdesk(home, "export", "service", "start").returncode == 0
        first = subprocess.Popen([*command, "--json"], cwd=ROOT, text=True, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_exported(home, 3000)
        asyncio.run(send(namesrv, "Live", range(3000, 4000)))  # arrives while it runs
        record = wait_exported(home, 4000)
        assert record["state"] == "running"
        assert record["lag"] == 0  # caught up with the topic
        stop = rocketdesk(home, "export", "cancel", "last")  # a stop: what it wrote stays
        out_text, err = first.communicate(timeout=60)
        assert first.returncode == 0, err[-2000:]
        assert stop.returncode == 0, (stop.stdout, stop.stderr)
        assert stop.stdout.strip().endswith(": stopped")
        summary = json.loads(out_text)
        assert (summary["continuous"], summary["exported"], summary["totalInOutput"]) == (True, 4000, 4000)

        asyncio.run(send(namesrv, "Live", range(4000, 4500)))  # arrives while it is stopped
        second = subprocess.Popen(command, cwd=ROOT, text=True, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_exported(home, 500, jobs=2)  # resumed where it stopped: only what is new
        rocketdesk(home, "export", "cancel", "last")
        said, err = second.communicate(timeout=60)
        assert second.returncode == 0, err[-2000:]
        assert "500 messages exported while it ran, 4,500 there in all, each once" in said
        rows = pa_parquet.ParquetDataset(committed_files(out)).read().to_pylist()
        assert sorted(int(dict(r["properties"])["seq"]) for r in rows) == list(range(4500))
    finally:
        rocketdesk(home, "export", "service", "stop")
