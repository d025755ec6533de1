"""``rocketdesk bench export``: Spark start-up and export throughput, reported apart.

First, end to end as a user runs it: ``rocketdesk export`` of a small topic (20,000 messages)
in a Spark of its own (cold), then on the warm export service (its own start timed apart, then
two exports on it): the whole command's seconds and its start-up (launch to the export's plan).

Then a scratch cluster (two brokers x 4 queues) is loaded with N messages of S bytes, then one
local Spark session (``local[2]``) exports them to Parquet, over the pull protocol and from the
store files (after one small read over pull: the first data-source query spins up Spark's
Python planning workers): a warm-up round, then ``--rounds`` measured ones (three by default).
Each export round is paired with a round of Spark's own floor on the rows the warm-up round
wrote (rocketdesk/bench/spark_floor.py: the same rows from a source that decodes nothing), the
two in alternating order. A round's share is the export's rate over the floor's beside it; the
figure is the median share (best round against best round is printed too). Each round also
says how much CPU the brokers spent serving it (next to nothing over store files): they share
the machine's cores with Spark.
Brokers are configured to hand out up to 1,024 messages / 4 MiB per pull (RocketMQ's defaults
are 32 / 256 KiB, meant for consumers, not bulk readers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from cluster.client.admin import AdminClient
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.supervisor.spec import ClusterSpec, GroupSpec
from cluster.supervisor.supervisor import Supervisor
from rocketdesk.cli_numbers import positive
from rocketdesk.export_service import with_temp_folder

BULK_READS = {"maxTransferCountOnMessageInMemory": "1024", "maxTransferBytesOnMessageInMemory": "4194304",
              "maxTransferCountOnMessageInDisk": "1024", "maxTransferBytesOnMessageInDisk": "4194304"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive, default=400_000,
                        help="messages loaded into the scratch cluster and exported each round "
                             "(default 400,000; a million makes rounds of ~8 s, steadier)")
    parser.add_argument("-s", "--size", type=positive, default=1024,
                        help="body size in bytes (default 1024)")
    parser.add_argument("--master", default="local[2]",
                        help="the Spark master to export on (default local[2])")
    parser.add_argument("--rounds", type=int, default=3,
                        help="measured exports per mode, each beside a round of Spark's floor "
                             "(after a warm-up round of each)")
    parser.add_argument("--e2e-messages", type=int, default=20_000,
                        help="messages of the end-to-end (cold and warm) part")
    parser.add_argument("--e2e-only", action="store_true",
                        help="only the end-to-end part: cold and warm `rocketdesk export`")
    parser.set_defaults(func=run_export_bench)


async def _load(namesrv: str, count: int, size: int, topic: str = "BenchExport") -> float:
    body = os.urandom(size)
    began = time.perf_counter()
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, 4, 4)
    async with Producer("bench-export", namesrv) as producer:
        sent = 0
        while sent < count:
            waves = []
            for _ in range(8):
                n = min(256, count - sent)
                if n <= 0:
                    break
                waves.append(producer.send_batch([Message(topic, body, keys=f"k{sent + i}")
                                                  for i in range(n)]))
                sent += n
            await asyncio.gather(*waves)
    return time.perf_counter() - began


def _export_command(namesrv: str, out: Path, home: Path, *flags: str) -> tuple[float, float, int]:
    """One ``rocketdesk export`` of BenchE2E: (whole command s, start-up s, messages)."""
    events = out.with_suffix(".jsonl")
    env = dict(os.environ, ROCKETDESK_HOME=str(home))
    began = time.time()
    done = subprocess.run([sys.executable, "-m", "rocketdesk.cli", "export", "-n", namesrv,
                           "-t", "BenchE2E", "--out", str(out), "--events", str(events), "--json",
                           *flags], capture_output=True, text=True, env=env, check=False)
    took = time.time() - began
    if done.returncode != 0:
        raise SystemExit(f"rocketdesk export failed: {done.stderr[-2000:]}")
    planned = next(json.loads(line)["time"] for line in events.read_text().splitlines()
                   if '"planned"' in line)
    return took, planned - began, json.loads(done.stdout)["exported"]


def _end_to_end(namesrv: str, count: int, size: int, scratch: Path) -> None:
    asyncio.run(_load(namesrv, count, size, "BenchE2E"))
    home = scratch / "home"
    took, startup, rows = _export_command(namesrv, scratch / "e2e-cold", home, "--cold")
    print(f"cold `rocketdesk export` of {rows:,} messages: {took:.2f} s end to end, "
          f"start-up {startup:.2f} s (a Spark of its own)")
    env = dict(os.environ, ROCKETDESK_HOME=str(home))
    began = time.time()
    subprocess.run([sys.executable, "-m", "rocketdesk.cli", "export", "service", "start"],
                   capture_output=True, env=env, check=True)
    print(f"the warm export service started in {time.time() - began:.2f} s (once)")
    try:
        for round_ in (1, 2):
            took, startup, rows = _export_command(namesrv, scratch / f"e2e-warm-{round_}", home)
            print(f"warm `rocketdesk export` of {rows:,} messages, round {round_}: {took:.2f} s "
                  f"end to end, start-up {startup:.2f} s")
    finally:
        subprocess.run([sys.executable, "-m", "rocketdesk.cli", "export", "service", "stop"],
                       capture_output=True, env=env, check=False)


def _slug(mode: str) -> str:
    return mode.replace(" ", "-")


def _write_parquet(df, out: Path, keep: bool = False) -> tuple[int, float]:
    """Write ``df`` to Parquet at ``out``: (rows written, rows a second). The output is
    deleted once counted unless ``keep``: rounds must not pile up gigabytes that later rounds
    run beside."""
    began = time.perf_counter()
    df.write.parquet(str(out))
    took = time.perf_counter() - began
    rows = df.sparkSession.read.parquet(str(out)).count()
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return rows, rows / took


def _floor_source(spark, scratch: Path, mode: str, exported: Path):
    """Spark's floor on the rows one export wrote: a frame of the same rows from a source that
    decodes nothing (rocketdesk/bench/spark_floor.py), its planning workers started. Returns
    (the frame, its staged folder, how many rows)."""
    from rocketdesk.bench.spark_floor import ReplaySource, stage_rows

    staged = scratch / f"floor-rows-{_slug(mode)}"
    rows = stage_rows(exported, staged)
    shutil.rmtree(exported, ignore_errors=True)
    spark.dataSource.register(ReplaySource)
    df = spark.read.format("rocketdesk_replay").option("path", str(staged)).load()
    df.count()  # the replay source's planning workers start, as the export's warm-up query
    return df, staged, rows


def _cpu_seconds(processes) -> float:
    """User and system CPU the processes have used: what serving the export cost the brokers
    (which share the machine's cores with Spark here)."""
    return sum(sum(process.cpu_times()[:2]) for process in processes)


def _python_workers_cpu() -> float:
    """User and system CPU of Spark's Python workers so far (the daemon, the workers it
    forked, those it has reaped): where the export's readers decode, and where the floor's
    replay only hands batches on. Beside the rates, which swing with the VM by ±10 %, this
    shows what the reader costs a row."""
    total = 0.0
    for process in psutil.Process().children(recursive=True):
        try:
            command = process.cmdline()
            if command[1:3] != ["-m", "pyspark.daemon"]:  # (not the JVM: "pyspark-shell")
                continue
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:  # (a worker that ended meanwhile)
            continue
    return total


def _export_against_floor(spark, scratch: Path, mode: str, options: dict, brokers,
                          args: argparse.Namespace) -> tuple[float, float]:
    """Rounds of the export over ``mode``, each paired with a round of Spark's floor on the
    same rows: (the median of the pairs' shares, best round against best round).

    Each share is taken against the floor's round beside it, not the best of a separate series:
    on a shared VM the rate of both drifts by 10-15 % over minutes, and a floor measured apart
    (or the best of N, an extreme) moved the share as much as any change to the export did.
    The pairs alternate which runs first, so a drift within a pair does not favour one side."""
    df = spark.read.format("rocketmq").options(topic="BenchExport", partitionSize="50000",
                                               **options).load()
    floor_df = staged = None
    rows = 0

    def export(round_: int, name: str) -> float:
        nonlocal floor_df, staged, rows
        out = scratch / f"out-{_slug(mode)}-{round_}"
        served, read = _cpu_seconds(brokers), _python_workers_cpu()
        written, rate = _write_parquet(df, out, keep=floor_df is None)
        served, read = _cpu_seconds(brokers) - served, _python_workers_cpu() - read
        print(f"export over {mode}, {name}: {written:,} messages to Parquet at "
              f"{rate:,.0f} msg/s ({args.master}); CPU a message: the brokers' "
              f"{served / max(written, 1) * 1e6:.2f} µs, Spark's Python workers' "
              f"{read / max(written, 1) * 1e6:.2f} µs")
        if floor_df is None:  # (the warm-up round's rows are the floor's)
            floor_df, staged, rows = _floor_source(spark, scratch, mode, out)
        elif written != rows:
            raise SystemExit(f"the export's {name} wrote {written:,} rows, not {rows:,}")
        return rate

    def floor(round_: int, name: str) -> float:
        read = _python_workers_cpu()
        written, rate = _write_parquet(floor_df, scratch / f"out-floor-{_slug(mode)}-{round_}")
        read = _python_workers_cpu() - read
        if written != rows:
            raise SystemExit(f"the floor's {name} wrote {written:,} rows of {rows:,} staged")
        print(f"Spark's floor on the same {written:,} rows, {name}: {rate:,.0f} rows/s to "
              f"Parquet (a source that decodes nothing); Spark's Python workers' CPU "
              f"{read / max(written, 1) * 1e6:.2f} µs a row")
        return rate

    shares: list[float] = []
    best_export = best_floor = 0.0
    # Round 0 warms both up (the JVM compiles the write path in its first rounds: a first
    # round ran at a third to a half of the later ones) and gives the floor its rows; it is
    # not counted.
    for round_ in range(args.rounds + 1):
        name = f"round {round_}" if round_ else "warm-up round"
        if round_ % 2 == 0 and round_:
            floor_rate = floor(round_, name)
            export_rate = export(round_, name)
        else:
            export_rate = export(round_, name)
            floor_rate = floor(round_, name)
        print(f"{name}: the export's share of the floor {export_rate / floor_rate:.0%}")
        if round_:
            shares.append(export_rate / floor_rate)
            best_export, best_floor = max(best_export, export_rate), max(best_floor, floor_rate)
    for name, frame in ((f"the export over {mode}", df), ("the floor", floor_df)):
        began = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        print(f"{name}, read only (Spark's noop sink): "
              f"{rows / (time.perf_counter() - began):,.0f} rows/s")
    shutil.rmtree(staged, ignore_errors=True)
    return statistics.median(shares), best_export / best_floor


def run_export_bench(args: argparse.Namespace) -> int:
    if args.rounds < 1:
        raise SystemExit("rocketdesk bench export: --rounds must be at least 1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    scratch = Path(tempfile.mkdtemp(prefix="rocketdesk-bench-export-"))
    spec = ClusterSpec(name="bench-export", groups=[
        GroupSpec(name, commitlog_file_size=1 << 30, conf=dict(BULK_READS))
        for name in ("broker-a", "broker-b")])
    supervisor = Supervisor.create(spec, root=scratch)
    asyncio.run(supervisor.start())
    try:
        namesrv = supervisor.state.namesrv_addr
        _end_to_end(namesrv, args.e2e_messages, args.size, scratch)
        if args.e2e_only:
            return 0
        seconds = asyncio.run(_load(namesrv, args.messages, args.size))
        print(f"loaded {args.messages:,} x {args.size} B messages in {seconds:.1f} s")
        began = time.perf_counter()
        # (this process's JVM keeps its temporary files in the scratch folder, removed below)
        os.environ.update(with_temp_folder(dict(os.environ), str(scratch / "tmp")))
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                 .config("spark.log.level", "ERROR").config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
        from export.datasource import RocketMQDataSource

        spark.dataSource.register(RocketMQDataSource)
        session = time.perf_counter() - began
        stores = ",".join(n.store_dir for n in supervisor.state.nodes if n.kind == "broker")
        brokers = [psutil.Process(n.pid) for n in supervisor.state.nodes if n.kind == "broker"]
        modes = {"pull": {"nameServer": namesrv}, "store files": {"path": stores.split(",")[0]}}
        warm = time.perf_counter()
        spark.read.format("rocketmq").options(nameServer=namesrv, topic="BenchExport",
                                               endingOffsets="earliest").load().count()
        warmup = time.perf_counter() - warm
        print(f"start-up: Spark session {session:.1f} s, first data-source query {warmup:.1f} s")
        shares: dict[str, tuple[float, float]] = {}
        for mode, options in modes.items():
            shares[mode] = _export_against_floor(spark, scratch, mode, options, brokers, args)
        for mode, (median, best) in shares.items():
            rounds = f"{args.rounds} rounds" if args.rounds != 1 else "1 round"
            print(f"export over {mode}: {median:.0%} of Spark's floor on its rows (the median of "
                  f"{rounds}, each against the floor's round run beside it); "
                  f"best round against best round {best:.0%}")
        spark.stop()
    finally:
        asyncio.run(supervisor.stop())
        shutil.rmtree(scratch, ignore_errors=True)
    return 0
