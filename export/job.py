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

from common.platform import processes
from export.errors import ExportError
from export.job_record import JobRecord
from export.options import SourceOptions
from export.planner import offsets_json, plan

JOB_GROUP = "rocketdesk-export"
MANIFEST = "_rocketmq_export.json"
CHECKPOINT = "_rocketdesk_checkpoint"


class Events:
    """JSON lines appended to a file the launcher tails (a file, not an inherited descriptor:
    under spark-submit the driver is a grandchild started by the JVM, which closes them), and
    the export's job record kept up to date from them."""

    def __init__(self, path: str | None, record: JobRecord | None = None) -> None:
        self.stream = open(path, "a", buffering=1, encoding="utf-8") if path else None  # noqa: SIM115
        self.record = record
        self.lock = threading.Lock()

    def emit(self, event: str, **values) -> None:
        with self.lock:
            # The record first: a reader that sees the event line (the console, which then
            # reads the records) finds the record already saying as much.
            if self.record is not None:
                try:
                    self.record.on_event(event, values)
                except OSError:  # the exports folder went away: the export itself goes on
                    self.record = None
            if self.stream is not None:
                self.stream.write(json.dumps({"event": event, "time": time.time(), **values}) + "\n")

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


def record_fields(args, **more) -> dict:
    """What a job record says was asked."""
    return {"topics": args.topic, "out": os.path.abspath(args.out), "format": args.format,
            "master": args.master, "incremental": args.incremental,
            "continuous": args.continuous, **more}


class JobControl:
    """One export's cancel state and Spark job group. A cancel cancels the group's Spark jobs
    (or stops the incremental export's streaming query); the driver unwinds. Once the output
    has started to move into place the export is complete, and a cancel that comes later is
    ignored rather than reported over a finished output. The staging folder is removed after
    Spark stops: a cancelled task may still be writing into it while the driver unwinds.

    In its own process (``python -m export.job``) SIGTERM, SIGINT or a stop request file cancel;
    in the warm export service (export/service.py) a request does, several exports sharing one
    session, each in its own group."""

    def __init__(self, group: str = JOB_GROUP) -> None:
        self.group = group
        self.requested = False
        self.settled = False
        self.spark = None
        self.query = None  # the incremental export's streaming query, while it runs
        self.out: str | None = None  # (the warm service: one export a folder at a time)
        self.staging: str | None = None
        self.lock = threading.Lock()
        # A continuous export stops rather than being cancelled: its query ends, what it wrote
        # stays, and the export reports how far it got.
        self.graceful = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        # A request file (Windows' stop, honoured everywhere) cancels from a thread of its own:
        # the main thread may be waiting on Spark, where no signal handler would run until the
        # export had finished. The phases between Spark calls look at ``requested``.
        processes.watch_stop_requests(self.cancel)

    def _handle(self, signum, frame) -> None:
        if self.cancel() and not self.graceful:
            raise KeyboardInterrupt

    def cancel(self) -> bool:
        """Ask the export to stop; False when its outcome is decided already (or asked before)."""
        if not self.request():
            return False
        self.interrupt()
        return True

    def request(self) -> bool:
        """Mark the export cancelled (at once, never waiting); False when too late or asked before."""
        with self.lock:
            if self.settled or self.requested:
                return False
            self.requested = True
            return True

    def interrupt(self) -> None:
        """Stop what runs for a requested cancel: the streaming query (which waits for its
        batch) or the group's Spark jobs."""
        with self.lock:
            spark, query = self.spark, self.query
        if query is not None:
            query.stop()
        if spark is not None:
            spark.sparkContext.cancelJobGroup(self.group)

    def wait_for_jobs(self, seconds: float = 30.0) -> None:
        """Until no Spark job of the group is active: cancelled tasks may still be writing into
        the staging folder (in the warm service, where Spark does not stop with the export)."""
        if self.spark is None:
            return
        tracker = self.spark.sparkContext.statusTracker()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not set(tracker.getJobIdsForGroup(self.group)) & set(tracker.getActiveJobsIds()):
                return
            time.sleep(0.1)

    def settle(self) -> bool:
        """From here on the outcome is decided (the output is moving into place, or the driver
        is already unwinding): a cancel can no longer change it. False when a cancel came
        first."""
        with self.lock:
            self.settled = True
            return not self.requested

    def remove_staging(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--args-file"] and len(argv) == 2:
        # The launcher's way past cmd.exe under spark-submit.cmd: a JSON list of arguments.
        with open(argv[1], encoding="utf-8") as handle:
            argv = json.load(handle)
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
            raise SystemExit(f"{argv!r:.80}: an --args-file holds a JSON list of strings")
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
    parser.add_argument("--skip-lost", action="store_true",
                        help="failOnDataLoss=false: skip messages deleted before they were read")
    parser.add_argument("--format", choices=["parquet", "json", "csv"], default="parquet")
    parser.add_argument("--partition-by", default="")
    parser.add_argument("--partition-size", type=int, default=50_000)
    parser.add_argument("--incremental", action="store_true")
    parser.add_argument("--continuous", action="store_true")
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--events-file")
    parser.add_argument("--record", help="keep this export's job record (export/job_record.py) here")
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
    if getattr(args, "skip_lost", False):
        options["failOnDataLoss"] = "false"
    return options


def _jvm_temp_dir(spark) -> str | None:
    """Where the driver's JVM puts its temporary files (the launcher chooses: rocketdesk/
    cli_export.py), for the record."""
    try:
        return spark._jvm.java.lang.System.getProperty("java.io.tmpdir")
    except Exception:  # (a session without a local JVM)
        return None


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


# CSV as RFC 4180 says (a quote in a value doubled, not backslashed: what Excel, pandas and
# Python's csv read), with a header; a value holding a line break is quoted and spans lines,
# so reading it back needs multiLine.
CSV_OPTIONS = {"header": "true", "escape": '"'}
CSV_READ_OPTIONS = {**CSV_OPTIONS, "multiLine": "true"}


def for_format(df, fmt: str):
    """CSV holds neither binary nor maps: the body goes as base64, properties as JSON text."""
    if fmt != "csv":
        return df
    from pyspark.sql import functions as F

    return (df.withColumn("body", F.base64("body"))
              .withColumn("properties", F.to_json("properties")))


# Folders a data lake expects beside the row's own columns: the store time's UTC date and hour
# (Hive's date=2026-11-26/hour=09) and the tag.
DERIVED = ("date", "hour", "tag")


def partitioned(df, partition_by: str | None):
    """The frame with the derived partition columns it is split by, and the columns (in order)
    its output folders are named by (Hive style: ``date=…/hour=…/tag=…``)."""
    from pyspark.sql import functions as F

    names = [c.strip() for c in (partition_by or "").split(",") if c.strip()]
    unknown = [n for n in names if n not in DERIVED and n not in df.columns]
    if unknown:
        raise ExportError(f"cannot partition by {', '.join(unknown)}: give date, hour, tag or "
                          f"columns of the rows ({', '.join(df.columns)})")
    # From the epoch, not through the session's time zone: the same UTC folders wherever the
    # export runs, with no hour lost or doubled where the local clock jumps.
    millis = F.unix_millis(F.col("storeTimestamp"))
    for name in names:
        if name in df.columns:
            continue
        if name == "tag":
            df = df.withColumn("tag", F.col("tags"))
        elif name == "date":
            day = F.floor(millis / 86_400_000).cast("int")
            df = df.withColumn("date", F.date_format(F.date_add(F.lit("1970-01-01").cast("date"), day),
                                                     "yyyy-MM-dd"))
        else:
            hour = F.pmod(F.floor(millis / 3_600_000), F.lit(24)).cast("int")
            df = df.withColumn("hour", F.lpad(hour.cast("string"), 2, "0"))
    return df, names


class Progress(threading.Thread):
    """Tasks done of the job group, turned into messages with the plan's total."""

    def __init__(self, spark, events: Events, total: int, group: str) -> None:
        super().__init__(daemon=True)
        self.spark = spark
        self.group = group
        self.events = events
        self.total = total
        self.stopped = threading.Event()
        self.began = time.monotonic()

    def run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self.stopped.wait(0.5):
            done = tasks = 0
            for job_id in tracker.getJobIdsForGroup(self.group):
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


def run_batch(spark, args, events: Events, control: JobControl) -> dict:
    _check_out_is_free(args.out)  # (again before the move: before Spark's work, not after it)
    options = source_options(args)
    # Empty queues too: the reader resolves these offsets again, and a queue they did not name
    # it would read from its earliest to its latest (rows the plan left out, or read before).
    ranges = plan(SourceOptions.parse(options), keep_empty=True)
    total = sum(r.count for r in ranges)
    events.emit("planned", total=total, queues=sum(1 for r in ranges if r.count),
                startingOffsets=offsets_json(ranges, "start"), endingOffsets=offsets_json(ranges, "end"))
    if control.requested:  # cancelled while planning: no Spark job of the group to cancel yet
        raise KeyboardInterrupt
    # The reader plans again from these fixed offsets: the same ranges, whatever arrived since.
    options["startingOffsets"] = json.dumps(offsets_json(ranges, "start"))
    options["endingOffsets"] = json.dumps(offsets_json(ranges, "end"))
    staging = os.path.join(os.path.dirname(os.path.abspath(args.out)) or ".",
                           f".staging-{os.path.basename(args.out)}-{uuid.uuid4().hex[:8]}")
    control.staging = staging
    began = time.monotonic()
    progress = Progress(spark, events, total, control.group)
    progress.start()
    try:
        # Per thread: the warm service runs several exports at once, each in its own group.
        spark.sparkContext.setJobGroup(control.group, "rocketdesk export", interruptOnCancel=True)
        if control.requested:  # cancelled before the group had a job to cancel
            raise KeyboardInterrupt
        df, folders = partitioned(for_format(spark.read.format("rocketmq").options(**options).load(),
                                             args.format), args.partition_by)
        writer = df.write.format(args.format)
        if folders:
            writer = writer.partitionBy(*folders)
        if args.format == "csv":
            writer = writer.options(**CSV_OPTIONS)
        writer.save(staging)
    finally:
        progress.stopped.set()
    seconds = time.monotonic() - began
    events.emit("verifying")
    check = verify(spark, staging, args.format, total, filtered=_filtered(args))
    _check_out_is_free(args.out)
    if os.path.exists(args.out):
        os.rmdir(args.out)
    if not control.settle():
        raise KeyboardInterrupt  # cancelled while verifying: the staging folder goes
    os.replace(staging, args.out)
    control.staging = None
    manifest = {"topics": args.topic, "format": args.format, "planned": total, **check,
                "startingOffsets": offsets_json(ranges, "start"),
                "endingOffsets": offsets_json(ranges, "end"), "filters": {
                    "tags": args.tags, "keys": args.keys, "startingTimestamp": args.starting_timestamp,
                    "endingTimestamp": args.ending_timestamp}, "seconds": round(seconds, 3),
                "sparkVersion": spark.version, "sparkApplication": spark.sparkContext.applicationId}
    with open(os.path.join(args.out, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return {**manifest, "out": os.path.abspath(args.out),
            "rate": round(check["exported"] / seconds) if seconds else None}


def _check_out_is_free(out: str) -> None:
    if os.path.isdir(out) and os.listdir(out):
        raise ExportError(f"{out} exists and is not empty; choose another --out")


def _filtered(args) -> bool:
    return bool(args.tags not in ("*", "") or args.keys or args.starting_timestamp is not None
                or args.ending_timestamp is not None)


def verify(spark, path: str, fmt: str, planned: int, filtered: bool) -> dict:
    """Count what was written and check each message is there once (and, with no filter, that
    the count is what the brokers' offsets said)."""
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.options(**CSV_READ_OPTIONS)
    df = reader.load(path)
    rows = df.count()
    distinct = df.select("topic", "brokerName", "queueId", "queueOffset").distinct().count()
    ok = rows == distinct and (rows <= planned if filtered else rows == planned)
    return {"exported": rows, "distinct": distinct, "verified": ok}


def _offsets_total(offsets) -> int:
    """Messages up to ``offsets`` ({topic: {broker: {queue: offset}}}, or its JSON) in all."""
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    return sum(int(o) for brokers in (offsets or {}).values() for queues in brokers.values()
               for o in queues.values())


def run_streaming(spark, args, events: Events, control: JobControl) -> dict:
    """A streaming query into the output folder, its checkpoint beside it, so that each message
    lands there once however often the export stops and starts again.

    ``--incremental``: everything new since the last run, then done (Trigger.AvailableNow).
    ``--continuous``: keeps the folder up to date (a batch every ``--trigger-seconds``) until
    stopped; progress then says how far behind the topic the folder is (its lag), and a stop
    is its normal end, not a cancel."""
    options = source_options(args)
    checkpoint = os.path.join(args.out, CHECKPOINT)
    began = time.monotonic()
    reader = spark.readStream.format("rocketmq").options(**options)
    df, folders = partitioned(for_format(reader.load(), args.format), args.partition_by)
    writer = (df.writeStream.format(args.format).option("path", args.out)
              .option("checkpointLocation", checkpoint))
    writer = (writer.trigger(processingTime=f"{args.trigger_seconds} seconds") if args.continuous
              else writer.trigger(availableNow=True))
    if folders:
        writer = writer.partitionBy(*folders)
    if args.format == "csv":
        writer = writer.options(**CSV_OPTIONS)
    query = control.query = writer.start()
    if control.requested:  # cancelled while it was starting
        query.stop()
    exported = 0
    seen: set = set()

    def count_new() -> dict | None:
        nonlocal exported, seen
        newest = None
        current = set()
        for item in query.recentProgress:
            key = (item["batchId"], item["timestamp"])  # idle reports repeat the next batch's id
            current.add(key)
            if key not in seen:
                exported += item["numInputRows"]
                newest = item
        seen = current  # Spark keeps the last 100 reports: older keys never come back
        return newest

    while query.isActive:
        time.sleep(0.5)
        item = count_new()
        if item is not None:
            source = (item.get("sources") or [{}])[0]
            lag = None
            if source.get("latestOffset") and source.get("endOffset"):
                lag = max(0, _offsets_total(source["latestOffset"]) - _offsets_total(source["endOffset"]))
            events.emit("progress", exported=exported, total=None, batch=item["batchId"], lag=lag)
    query.awaitTermination()
    control.query = None
    count_new()
    if control.requested and not args.continuous:
        raise KeyboardInterrupt
    seconds = time.monotonic() - began
    reader = spark.read.format(args.format)
    if args.format == "csv":
        reader = reader.options(**CSV_READ_OPTIONS)
    # Spark reads a streaming output through its commit log: files of a batch cut short by a
    # stop are not part of it (the batch runs again on resume).
    everything = reader.load(args.out) if os.path.exists(args.out) else None
    rows = everything.count() if everything is not None else 0
    distinct = (everything.select("topic", "brokerName", "queueId", "queueOffset").distinct().count()
                if everything is not None else 0)
    return {"incremental": not args.continuous, "continuous": args.continuous,
            "exported": exported, "totalInOutput": rows, "distinctInOutput": distinct,
            "verified": rows == distinct, "out": os.path.abspath(args.out),
            "seconds": round(seconds, 3)}


def run_job(spark, args, events: Events, control: JobControl) -> int:
    """One export on a session that is ready (its own, or the warm service's): the events it
    reports, and the exit code its process would have (0 done and verified, 1 failed or not
    verified, 130 cancelled)."""
    control.spark = spark
    try:
        if control.requested:
            raise KeyboardInterrupt
        summary = (run_streaming(spark, args, events, control)
                   if args.incremental or args.continuous else run_batch(spark, args, events, control))
        events.emit("finished", **summary)
        return 0 if summary.get("verified") else 1
    except KeyboardInterrupt:
        events.emit("cancelled")
        return 130
    except Exception as exc:  # reported to the launcher as a sentence, with the kind of error
        if control.requested:
            events.emit("cancelled")
            return 130
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        events.emit("failed", error=f"{type(exc).__name__}: {message}")
        return 1
    finally:
        control.settle()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record = JobRecord(args.record, record_fields(args, pid=os.getpid())) if args.record else None
    events = Events(args.events_file, record)
    # The pid lets the launcher reach this driver under spark-submit, where it is a grandchild.
    events.emit("started", master=args.master, pid=os.getpid(), warm=False)
    control = JobControl()
    control.graceful = args.continuous
    control.install()
    spark = None
    try:
        spark = control.spark = session(args)
        events.emit("session", sparkVersion=spark.version, tempDir=_jvm_temp_dir(spark))
        return run_job(spark, args, events, control)
    except KeyboardInterrupt:
        events.emit("cancelled")
        return 130
    except Exception as exc:  # the session did not start (no Java, a bad master)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        events.emit("failed", error=f"{type(exc).__name__}: {message}")
        return 1
    finally:
        control.settle()
        if spark is not None:
            try:
                spark.stop()
            except Exception:  # the JVM is already gone (killed with us): nothing to stop
                pass
        control.remove_staging()


if __name__ == "__main__":
    sys.exit(main())
