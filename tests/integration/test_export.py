"""The Spark export against a real cluster (2 brokers x 4 queues) with real Spark: local
sessions, the `rocketdesk export` command, and a standalone Spark master and worker."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pa_parquet = pytest.importorskip("pyarrow.parquet")

from cluster.client.admin import AdminClient  # noqa: E402
from cluster.client.message import Message  # noqa: E402
from cluster.client.producer import Producer  # noqa: E402
from cluster.supervisor.spec import ClusterSpec, GroupSpec  # noqa: E402
from cluster.supervisor.supervisor import Supervisor  # noqa: E402
from tests.integration.procs import free_port  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = str(Path(__file__).resolve().parents[2])
TOTAL = 100_000


def body_of(i: int) -> bytes:
    return f"message {i} ".encode() * 4


async def send(namesrv: str, topic: str, numbers, tags=lambda i: "TagA" if i % 2 else "TagB"):
    async with Producer("pg-export", namesrv) as producer:
        pending = []
        batch: list[Message] = []
        for i in numbers:
            batch.append(Message(topic, body_of(i), tags=tags(i), keys=f"key-{i}",
                                 properties={"seq": str(i)}))
            if len(batch) == 200:
                pending.append(producer.send_batch(batch))
                batch = []
                if len(pending) == 8:
                    await asyncio.gather(*pending)
                    pending = []
        if batch:
            pending.append(producer.send_batch(batch))
        await asyncio.gather(*pending)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("clusters")
    # The exports' job records (and any export service) in a home of this module's own.
    before = os.environ.get("ROCKETDESK_HOME")
    os.environ["ROCKETDESK_HOME"] = str(tmp_path_factory.mktemp("home"))
    spec = ClusterSpec(name="export", groups=[
        GroupSpec("broker-a", commitlog_file_size=64 << 20),
        GroupSpec("broker-b", commitlog_file_size=64 << 20)])
    supervisor = Supervisor.create(spec, root=root)
    asyncio.run(supervisor.start())
    namesrv = supervisor.state.namesrv_addr

    async def prepare():
        async with AdminClient(namesrv) as admin:
            await admin.create_topic("Orders", 4, 4)
            await admin.create_topic("Incr", 4, 4)
        await send(namesrv, "Orders", range(TOTAL))

    asyncio.run(prepare())
    yield supervisor
    asyncio.run(supervisor.stop())
    if before is None:
        os.environ.pop("ROCKETDESK_HOME", None)
    else:
        os.environ["ROCKETDESK_HOME"] = before


def rocketdesk(*args, timeout=240, env=None):
    return subprocess.run([sys.executable, "-m", "rocketdesk.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})), check=False)


def parquet_rows(path) -> list[dict]:
    files = glob.glob(f"{path}/**/*.parquet", recursive=True)
    table = pa_parquet.ParquetDataset(files).read() if files else None
    return table.to_pylist() if table is not None else []


def test_100k_messages_from_2_brokers_x_4_queues_to_parquet_each_exactly_once(cluster, tmp_path):
    out = tmp_path / "orders"
    events = tmp_path / "events.jsonl"
    done = rocketdesk("export", "-n", cluster.state.namesrv_addr, "-t", "Orders", "--out", str(out),
                      "--events", str(events), "--json", "--partition-size", "20000")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["planned"] == summary["exported"] == TOTAL
    assert summary["verified"] is True
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert kinds[:2] == ["launched", "started"]  # the launcher's own line first, then the job's
    assert "planned" in kinds
    assert kinds[-1] == "finished"
    rows = parquet_rows(out)
    assert len(rows) == TOTAL
    assert {(r["brokerName"], r["queueId"]) for r in rows} == {
        (b, q) for b in ("broker-a", "broker-b") for q in range(4)}
    by_seq = {int(dict(r["properties"])["seq"]): r for r in rows}
    assert sorted(by_seq) == list(range(TOTAL))  # each message once
    for i in (0, 1, 4242, TOTAL - 1):
        row = by_seq[i]
        assert row["body"] == body_of(i)
        assert row["keys"] == f"key-{i}"
        assert row["tags"] == ("TagA" if i % 2 else "TagB")
        assert dict(row["properties"])["UNIQ_KEY"] == row["uniqKey"]
    manifest = json.loads((out / "_rocketmq_export.json").read_text())
    assert sum(q for b in manifest["endingOffsets"]["Orders"].values() for q in b.values()) == TOTAL
    assert not list(tmp_path.glob(".staging-*"))


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from rocketdesk.export_service import with_temp_folder

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as patch:  # (the JVM's temporary files with the test's)
        for key, value in with_temp_folder({}, str(tmp_path_factory.mktemp("spark-tmp"))).items():
            patch.setenv(key, value)
        session = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                   .config("spark.log.level", "WARN").getOrCreate())
    from export.datasource import RocketMQDataSource

    session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()


def test_tag_and_time_filters_and_an_offline_store_read(cluster, spark, tmp_path):
    namesrv = cluster.state.namesrv_addr
    def base():  # a DataFrameReader keeps every option set on it: a new one per read
        return spark.read.format("rocketmq").option("nameServer", namesrv).option("topic", "Orders")

    tagged = base().option("tags", "TagA").load()
    assert tagged.count() == TOTAL // 2
    assert {r.tags for r in tagged.select("tags").distinct().collect()} == {"TagA"}

    # A time range: the messages stored in the middle third of the load.
    times = sorted(r.storeTimestamp for r in base().load().select("storeTimestamp").collect())
    since, until = times[TOTAL // 3], times[2 * TOTAL // 3]
    ms = lambda t: int(t.timestamp() * 1000)  # noqa: E731
    window = (base().option("startingTimestamp", str(ms(since))).option("endingTimestamp", str(ms(until)))
              .load())
    inside = [t for t in times if ms(since) <= ms(t) < ms(until)]
    assert window.count() == len(inside)
    assert 0 < len(inside) < TOTAL

    # The store directory of broker-a, read from its files without asking the broker.
    store = next(n for n in cluster.state.nodes if n.name == "broker-a-0").store_dir
    offline = spark.read.format("rocketmq").option("path", store).option("topic", "Orders").load()
    online = base().option("brokerName", "broker-a").load()
    assert offline.count() == online.count() > 0
    assert offline.select("queueOffset", "keys").exceptAll(online.select("queueOffset", "keys")).count() == 0


def test_the_benchs_floor_replays_exactly_the_rows_an_export_wrote(cluster, spark, tmp_path):
    """`bench export` holds the export to Spark writing the export's own rows from a source that
    decodes nothing: those rows must come back from it unchanged, through a real Spark."""
    from rocketdesk.bench.spark_floor import ReplaySource, stage_rows

    exported = tmp_path / "exported"
    (spark.read.format("rocketmq").option("nameServer", cluster.state.namesrv_addr)
     .option("topic", "Orders").option("brokerName", "broker-a").load().write.parquet(str(exported)))
    rows = stage_rows(exported, tmp_path / "staged")
    assert rows > 0
    spark.dataSource.register(ReplaySource)
    replayed = spark.read.format("rocketdesk_replay").option("path", str(tmp_path / "staged")).load()
    replayed.write.parquet(str(tmp_path / "floor"))
    import pyarrow.parquet as pq

    def written(folder):  # (Spark's set operations refuse map columns: compared here)
        return pq.read_table(folder).sort_by("commitLogOffset").to_pylist()

    original = written(exported)
    assert len(original) == rows
    assert written(tmp_path / "floor") == original


def test_incremental_export_picks_up_only_new_messages_exactly_once(cluster, tmp_path):
    namesrv = cluster.state.namesrv_addr
    out = tmp_path / "incr"
    asyncio.run(send(namesrv, "Incr", range(3000)))
    first = rocketdesk("export", "-n", namesrv, "-t", "Incr", "--out", str(out), "--incremental", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout)["exported"] == 3000
    asyncio.run(send(namesrv, "Incr", range(3000, 4500)))
    second = rocketdesk("export", "-n", namesrv, "-t", "Incr", "--out", str(out), "--incremental", "--json")
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout)
    assert summary["exported"] == 1500
    assert summary["totalInOutput"] == summary["distinctInOutput"] == 4500
    rows = parquet_rows(out)
    seqs = sorted(int(dict(r["properties"])["seq"]) for r in rows)
    assert seqs == list(range(4500))


def _cancel_point(events: Path, when: str) -> bool:
    text = events.read_text() if events.exists() else ""
    if when == "verifying":
        return '"verifying"' in text
    # while tasks are writing into the staging folder
    return any(json.loads(line).get("tasksDone", 0) >= 1 for line in text.splitlines()
               if '"progress"' in line)


@pytest.mark.parametrize("when", ["starting", "writing", "verifying"])
def test_a_cancelled_export_leaves_nothing_behind(cluster, tmp_path, when):
    # "starting": around when the launcher starts the job (several moments, each a new
    # export): neither may be left running on its own, and it is a cancel, not a failure.
    for delay in ((0.2, 0.4, 0.6, 0.8, 1.2) if when == "starting" else (None,)):
        _cancel_and_check(cluster, tmp_path / f"run-{delay}", when, delay)


def test_a_cold_export_cancelled_as_on_windows_leaves_nothing_behind(cluster, tmp_path):
    # Windows' cancel: no signal reaches the launcher (the console's QProcess) or its job (no
    # console), so each is asked by a request file and the launcher asks its job the same way.
    _cancel_and_check(cluster, tmp_path / "run", "writing", None, as_on_windows=True)


def _cancel_and_check(cluster, folder: Path, when: str, delay: float | None,
                      master: str = "local[2]", as_on_windows: bool = False) -> None:
    import psutil

    from common.platform import stop_requests

    folder.mkdir()
    out = folder / "cancelled"
    events = folder / "events.jsonl"
    path = str(ROOT)
    if as_on_windows:  # every Python of the export (launcher, job) stops others by request
        site = folder / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "from common.platform import processes\nprocesses.STOP_BY_REQUEST = True\n")
        path = os.pathsep.join([str(site), str(ROOT)])
    temp = folder / "tmp"  # the launcher's temporary folder, its JVM's and its Pythons' within
    temp.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "rocketdesk.cli", "export", "-n", cluster.state.namesrv_addr, "-t", "Orders",
         "--out", str(out), "--events", str(events), "--partition-size", "2000", "--master", master],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=path, SPARK_LOCAL_IP="127.0.0.1", TMPDIR=str(temp)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if delay is not None:
        time.sleep(delay)
    else:
        deadline = time.time() + 120
        while time.time() < deadline and not _cancel_point(events, when):
            time.sleep(0.1)
        assert _cancel_point(events, when), f"the export never reached {when}"
    if as_on_windows:
        assert stop_requests.ask(psutil.Process(process.pid))
    else:
        process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # no launcher, job or JVM left running after the test
        for left in psutil.process_iter(["cmdline"]):
            if str(out) in " ".join(left.info["cmdline"] or []):
                left.kill()
        process.kill()
        process.communicate()
        raise
    time.sleep(1.0)
    assert not list(folder.glob(".staging-*"))
    if process.returncode == 0 and when == "verifying":
        # The signal came once the output was moving into place: too late, so the export is
        # complete and says so, and nothing claims it was cancelled.
        assert "cancelled" not in err
        assert json.loads((out / "_rocketmq_export.json").read_text())["exported"] == TOTAL
    else:
        # A launcher signalled before it set up its handlers dies of the signal; after, it
        # reports a cancel (130), whatever state its job was in.
        expected = (130, -signal.SIGTERM) if delay is not None else (130,)
        assert process.returncode in expected, (delay, err[-2000:])
        if process.returncode == 130:
            assert "cancelled" in err
        assert not out.exists()
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if str(out) in " ".join(p.info["cmdline"] or [])]
    assert not left, left
    # Spark's temporary files (and the JVM's) went with the export's scratch folder.
    said = events.read_text().splitlines() if events.exists() else []  # (none if killed early)
    sessions = [e for e in map(json.loads, said) if e["event"] == "session"]
    for session in sessions:
        assert session["tempDir"].startswith(str(temp)), session
    assert not list(temp.iterdir())


def test_export_on_a_spark_standalone_master_and_worker(cluster, tmp_path):
    import pyspark

    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               PYSPARK_PYTHON=sys.executable)
    logs = open(tmp_path / "standalone.log", "w")  # noqa: SIM115
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                              env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True)
    worker = None
    try:
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                   f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "2",
                                   "--memory", "1g", "--webui-port", str(free_port())],
                                  env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True)
        out = tmp_path / "standalone"
        done = rocketdesk("export", "-n", cluster.state.namesrv_addr, "-t", "Orders", "--out", str(out),
                          "--master", f"spark://127.0.0.1:{port}", "--json", "--partition-size", "25000",
                          "--tags", "TagB", timeout=300, env={"SPARK_LOCAL_IP": "127.0.0.1"})
        assert done.returncode == 0, (done.stderr[-3000:], (tmp_path / "standalone.log").read_text()[-3000:])
        summary = json.loads(done.stdout)
        assert summary["exported"] == TOTAL // 2
        assert summary["verified"] is True
        assert len(parquet_rows(out)) == TOTAL // 2
        # Cancelled while writing: under spark-submit the driver is the JVM's child, and it is
        # the driver that must hear the cancel to remove its staging folder.
        _cancel_and_check(cluster, tmp_path / "cancel", "writing", None, f"spark://127.0.0.1:{port}")
    finally:
        for process in (worker, master):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        logs.close()


def test_csv_keeps_multi_line_bodies_whole_and_a_plan_reads_only_its_queues(cluster, spark,
                                                                          tmp_path):
    """CSV as RFC 4180 (a body with line breaks, quotes and commas comes back whole, and the
    export verifies what it wrote); an export from a previous one's end offsets reads only what
    came since, queues with nothing new included (the reader, handed the plan, read those from
    their earliest: rows of the previous export again, and a failed verification)."""
    import csv

    from export.job import Events, JobControl, parse_args, run_batch

    namesrv = cluster.state.namesrv_addr
    bodies = [f'line {i}\nsaid "hi", then\r\nleft'.encode() for i in range(40)]

    async def prepare(messages):
        async with AdminClient(namesrv) as admin:
            await admin.create_topic("Lines", 4, 4)
        async with Producer("pg-lines", namesrv) as producer:
            for body in messages:
                await producer.send(Message("Lines", body, tags="T", keys="k",
                                            properties={"note": 'a, "b"\nc'}))

    asyncio.run(prepare(bodies))

    def export(out, *more):
        args = parse_args(["--name-server", namesrv, "--topic", "Lines", "--format", "csv",
                           "--out", str(out), *more])
        return run_batch(spark, args, Events(None), JobControl())

    first = export(tmp_path / "first")
    assert (first["exported"], first["verified"]) == (40, True)
    rows = []
    for part in sorted((tmp_path / "first").glob("part-*.csv")):
        with open(part, newline="", encoding="utf-8") as handle:
            rows.extend(csv.DictReader(handle))
    assert sorted(r["bodyText"] for r in rows) == sorted(b.decode() for b in bodies)
    assert {json.loads(r["properties"])["note"] for r in rows} == {'a, "b"\nc'}
    # Every queue is in the plan's offsets, those it found empty too.
    assert sum(len(q) for q in first["endingOffsets"]["Lines"].values()) == 8

    asyncio.run(prepare([b"one more"]))  # one queue of eight gets something new
    second = export(tmp_path / "second", "--starting-offsets", json.dumps(first["endingOffsets"]))
    assert (second["planned"], second["exported"], second["verified"]) == (1, 1, True)
