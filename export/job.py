"""The export job: the Spark driver program behind ``rocketdesk export``.

Run as ``python -m export.job …`` (local) or through ``spark-submit`` (a Spark cluster). It
plans the ranges itself (so it knows the total), reads them through the ``rocketmq`` source,
writes Parquet, JSON or CSV into a staging folder renamed into place on success, checks what
was written against the plan, and reports JSON events (``started``, ``planned``, ``progress``,
``verifying``, ``finished``, ``failed``, ``cancelled``) as JSON lines in a file, never on
stdout, which Spark clutters. SIGTERM cancels the running Spark jobs and removes the staging
folder; a cancel that arrives once the output is moving into place is too late and ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
import uuid

from export.errors import ExportError
from export.options import SourceOptions
from export.planner import offsets_json, plan

JOB_GROUP = "rocketdesk-export"
MANIFEST = "_rocketmq_export.json"
CHECKPOINT = "_rocketdesk_checkpoint"


class Events:
    """JSON lines appended to a file the launcher tails (a file, not an inherited descriptor:
    under spark-submit the driver is a grandchild started by the JVM, which closes them)."""

    def __init__(self, path: str | None) -> None:
        self.stream = open(path, "a", buffering=1, encoding="utf-8") if path else None  # noqa: SIM115
        self.lock = threading.Lock()

    def emit(self, event: str, **values) -> None:
        if self.stream is None:
            return
        with self.lock:
            self.stream.write(json.dumps({"event": event, "time": time.time(), **values}) + "\n")


class Cancellation:
    """SIGTERM or SIGINT cancels the export: Spark's jobs are cancelled and the driver unwinds
    with KeyboardInterrupt. Once the output has started to move into place the export is
    complete, and a cancel that comes later is ignored rather than reported over a finished
    output. The staging folder is removed after Spark stops: a cancelled task may still be
    writing into it while the driver unwinds."""

    def __init__(self) -> None:
        self.requested = False
        self.settled = False
        self.spark = None
        self.staging: str | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.settled or self.requested:
            return  # decided already, or unwinding from the first cancel
        self.requested = True
        if self.spark is not None:
            self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
        raise KeyboardInterrupt

    def settle(self) -> None:
        """From here on the outcome is decided (the output is moving into place, or the driver
        is already unwinding): a cancel can no longer change it."""
        self.settled = True

    def remove_staging(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="export-job")
    parser.add_argument("--name-server")
    parser.add_argument("--path", help="read a store directory instead of brokers")
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--ending-offsets", default="latest")
    parser.add_argument("--starting-timestamp", type=int)
    parser.add_argument("--ending-timestamp", type=int)
    parser.add_argument("--tags", default="*")
    parser.add_argument("--keys")
    parser.add_argument("--format", choices=["parquet", "json", "csv"], default="parquet")
    parser.add_argument("--partition-by", default="")
    parser.add_argument("--partition-size", type=int, default=50_000)
    parser.add_argument("--incremental", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--events-file")
    parser.add_argument("--driver-memory", default="2g")
    return parser.parse_args(argv)


def source_options(args) -> dict[str, str]:
    options = {"topic": ",".join(args.topic), "tags": args.tags,
               "partitionSize": str(args.partition_size),
               "startingOffsets": args.starting_offsets, "endingOffsets": args.ending_offsets}
    if args.path:
        options["path"] = args.path
    else:
        options["nameServer"] = args.name_server
    if args.starting_timestamp is not None:
        options["startingTimestamp"] = str(args.starting_timestamp)
    if args.ending_timestamp is not None:
        options["endingTimestamp"] = str(args.ending_timestamp)
    if args.keys:
        options["keys"] = args.keys
    return options


def session(args):
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(args.master).appName("rocketdesk-export")
               .config("spark.ui.enabled", "false").config("spark.log.level", "WARN")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", args.driver_memory))
    spark = builder.getOrCreate()
    from export.datasource import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    return spark


def for_format(df, fmt: str):
    """CSV holds neither binary nor maps: the body goes as base64, properties as JSON text."""
    if fmt != "csv":
        return df
    from pyspark.sql import functions as F

    return (df.withColumn("body", F.base64("body"))
              .withColumn("properties", F.to_json("properties")))


class Progress(threading.Thread):
    """Tasks done of the job group, turned into messages with the plan's total."""

    def __init__(self, spark, events: Events, total: int) -> None:
        super().__init__(daemon=True)
        self.spark = spark
        self.events = events
        self.total = total
        self.stopped = threading.Event()
        self.began = time.monotonic()

    def run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self.stopped.wait(0.5):
            done = tasks = 0
            for job_id in tracker.getJobIdsForGroup(JOB_GROUP):
                job = tracker.getJobInfo(job_id)
                for stage_id in (job.stageIds if job else []):
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        done += stage.numCompletedTasks
                        tasks += stage.numTasks
            if tasks:
                exported = self.total * done // tasks
                elapsed = time.monotonic() - self.began
                rate = exported / elapsed if elapsed > 0 else 0.0
                eta = (self.total - exported) / rate if rate > 0 else None
                self.events.emit("progress", exported=exported, total=self.total, tasksDone=done,
                                 tasksTotal=tasks, rate=round(rate), etaSeconds=eta and round(eta, 1))


def run_batch(spark, args, events: Events, cancellation: Cancellation) -> dict:
    options = source_options(args)
    ranges = plan(SourceOptions.parse(options))
    total = sum(r.count for r in ranges)
    events.emit("planned", total=total, queues=len(ranges),
                startingOffsets=offsets_json(ranges, "start"), endingOffsets=offsets_json(ranges, "end"))
    # The reader plans again from these fixed offsets: the same ranges, whatever arrived since.
    options["startingOffsets"] = json.dumps(offsets_json(ranges, "start"))
    options["endingOffsets"] = json.dumps(offsets_json(ranges, "end"))
    staging = os.path.join(os.path.dirname(os.path.abspath(args.out)) or ".",
                           f".staging-{os.path.basename(args.out)}-{uuid.uuid4().hex[:8]}")
    cancellation.staging = staging
    began = time.monotonic()
    progress = Progress(spark, events, total)
    progress.start()
    try:
        spark.sparkContext.setJobGroup(JOB_GROUP, "rocketdesk export", interruptOnCancel=True)
        df = for_format(spark.read.format("rocketmq").options(**options).load(), args.format)
        writer = df.write.format(args.format)
        if args.partition_by:
            writer = writer.partitionBy(*[c.strip() for c in args.partition_by.split(",") if c.strip()])
        if args.format == "csv":
            writer = writer.option("header", "true")
        writer.save(staging)
    finally:
        progress.stopped.set()
    seconds = time.monotonic() - began
    events.emit("verifying")
    check = verify(spark, staging, args.format, total, filtered=_filtered(args))
    if os.path.exists(args.out):
        if os.listdir(args.out):
            raise ExportError(f"{args.out} exists and is not empty; choose another --out")
        os.rmdir(args.out)
    cancellation.settle()
    os.replace(staging, args.out)
    cancellation.staging = None
    manifest = {"topics": args.topic, "format": args.format, "planned": total, **check,
                "startingOffsets": offsets_json(ranges, "start"),
                "endingOffsets": offsets_json(ranges, "end"), "filters": {
                    "tags": args.tags, "keys": args.keys, "startingTimestamp": args.starting_timestamp,
                    "endingTimestamp": args.ending_timestamp}, "seconds": round(seconds, 3),
                "sparkVersion": spark.version}
    with open(os.path.join(args.out, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return {**manifest, "out": os.path.abspath(args.out),
            "rate": round(check["exported"] / seconds) if seconds else None}


def _filtered(args) -> bool:
    return bool(args.tags not in ("*", "") or args.keys or args.starting_timestamp is not None
                or args.ending_timestamp is not None)


def verify(spark, path: str, fmt: str, planned: int, filtered: bool) -> dict:
    """Count what was written and check each message is there once (and, with no filter, that
    the count is what the brokers' offsets said)."""
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    df = reader.load(path)
    rows = df.count()
    distinct = df.select("topic", "brokerName", "queueId", "queueOffset").distinct().count()
    ok = rows == distinct and (rows <= planned if filtered else rows == planned)
    return {"exported": rows, "distinct": distinct, "verified": ok}


def run_incremental(spark, args, events: Events) -> dict:
    """Everything new since the last run, exactly once: a streaming query with
    Trigger.AvailableNow whose checkpoint lives beside the output."""
    options = source_options(args)
    checkpoint = os.path.join(args.out, CHECKPOINT)
    began = time.monotonic()
    reader = spark.readStream.format("rocketmq").options(**options)
    df = for_format(reader.load(), args.format)
    writer = (df.writeStream.format(args.format).option("path", args.out)
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    if args.partition_by:
        writer = writer.partitionBy(*[c.strip() for c in args.partition_by.split(",") if c.strip()])
    if args.format == "csv":
        writer = writer.option("header", "true")
    query = writer.start()
    exported = 0
    seen = set()
    while query.isActive:
        time.sleep(0.5)
        for item in query.recentProgress:
            if item["batchId"] not in seen:
                seen.add(item["batchId"])
                exported += item["numInputRows"]
                events.emit("progress", exported=exported, total=None, batch=item["batchId"])
    query.awaitTermination()
    for item in query.recentProgress:
        if item["batchId"] not in seen:
            seen.add(item["batchId"])
            exported += item["numInputRows"]
    seconds = time.monotonic() - began
    reader = spark.read.format(args.format)
    if args.format == "csv":
        reader = reader.option("header", "true")
    everything = reader.load(args.out) if os.path.exists(args.out) else None
    rows = everything.count() if everything is not None else 0
    distinct = (everything.select("topic", "brokerName", "queueId", "queueOffset").distinct().count()
                if everything is not None else 0)
    return {"incremental": True, "exported": exported, "totalInOutput": rows,
            "distinctInOutput": distinct, "verified": rows == distinct,
            "out": os.path.abspath(args.out), "seconds": round(seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    events = Events(args.events_file)
    # The pid lets the launcher reach this driver under spark-submit, where it is a grandchild.
    events.emit("started", master=args.master, pid=os.getpid())
    cancellation = Cancellation()
    cancellation.install()
    spark = None
    try:
        spark = cancellation.spark = session(args)
        events.emit("session", sparkVersion=spark.version)
        summary = (run_incremental(spark, args, events) if args.incremental
                   else run_batch(spark, args, events, cancellation))
        events.emit("finished", **summary)
        return 0 if summary.get("verified") else 1
    except KeyboardInterrupt:
        events.emit("cancelled")
        return 130
    except Exception as exc:  # reported to the launcher as a sentence, with the kind of error
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if cancellation.requested:
            events.emit("cancelled")
            return 130
        events.emit("failed", error=f"{type(exc).__name__}: {message}")
        return 1
    finally:
        cancellation.settle()
        if spark is not None:
            try:
                spark.stop()
            except Exception:  # the JVM is already gone (killed with us): nothing to stop
                pass
        cancellation.remove_staging()

if __name__ == "__main__":
    sys.exit(main())
