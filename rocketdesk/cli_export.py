"""``rocketdesk export``: a topic to Parquet, JSON or CSV through Spark, locally or on a cluster.

The job runs in its own process (``python -m export.job`` for ``local[*]``, ``spark-submit``
for ``spark://…``), so Spark's JVM, its output and its memory stay out of this one. Progress
comes back as JSON lines on a pipe; this command prints it as a line on stderr and, with
``--events FILE``, copies the JSON lines there for the console. SIGINT, SIGTERM or a stop
request file (how the console cancels on Windows) cancel the job.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil

from common.platform import processes
from common.platform.files import BINARY
from export.errors import ExportError
from export.job_record import JobRecord, jobs_dir
from rocketdesk.cli_admin import parse_time
from rocketdesk.cli_cluster import namesrv_of
from rocketdesk.export_service import (
    ServiceClient,
    find_service,
    new_job_id,
    spark_environment,
    start_service,
    wait_gone,
    with_temp_folder,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("export", "cluster", "storage")


def _range_args(value: str | None, which: str) -> list[str]:
    """--from/--to: a time (ms, ISO, now) or offsets (earliest, latest, JSON per broker/queue)."""
    if value is None:
        return []
    text = value.strip()
    if text in ("earliest", "latest") or text.startswith("{"):
        return [f"--{which}-offsets", text]
    return [f"--{which}-timestamp", str(parse_time(text))]


def _code_zip(folder: str) -> str:
    """Our packages as one zip for --py-files: executors import the data source from it."""
    path = os.path.join(folder, "rocketdesk-code.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            for file in (ROOT / package).rglob("*.py"):
                archive.write(file, file.relative_to(ROOT))
    return path


def _spark_submit() -> str:
    try:
        import pyspark
    except ImportError:
        raise ExportError("the export needs pyspark and pyarrow: pip install 'rocketdesk[spark]'") from None
    # (Windows runs the .cmd twin: a file without an extension is not a program there)
    name = "spark-submit.cmd" if os.name == "nt" else "spark-submit"
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", name)


def _check_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ExportError("Spark needs Java 17 or 21 on PATH (or JAVA_HOME); none was found")


def build_command(args, job_args: list[str], scratch: str) -> list[str]:
    if args.master.startswith("local"):
        return [sys.executable, "-m", "export.job", *job_args]
    return [_spark_submit(), "--master", args.master, "--deploy-mode", "client",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--py-files", _code_zip(scratch), str(ROOT / "export" / "job.py"),
            "--args-file", _args_file(job_args, scratch)]


def _args_file(job_args: list[str], scratch: str) -> str:
    """The job's arguments in a JSON file: on Windows spark-submit is a .cmd whose command line
    cmd.exe reads, where a retry topic's ``%`` or a tag filter's ``|`` would be taken as its
    own."""
    path = os.path.join(scratch, "job-args.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(job_args, handle)
    return path


def _human(event: dict) -> str | None:
    kind = event["event"]
    if kind == "started":
        if event.get("warm"):
            return f"on the warm export service's Spark ({event.get('master')})…"
        return f"starting Spark ({event.get('master')})…"
    if kind == "planned":
        return f"{event['total']:,} messages in {event['queues']} queue ranges"
    if kind == "progress":
        total = event.get("total")
        if total:
            eta = event.get("etaSeconds")
            share = event["exported"] * 100 // max(total, 1)
            return (f"exported {event['exported']:,} of {total:,} ({share}%), "
                    f"{event.get('rate', 0):,} msg/s" + (f", ETA {eta:.0f} s" if eta is not None else ""))
        lag = event.get("lag")
        return f"exported {event['exported']:,}" + (f", {lag:,} behind the topic" if lag is not None else "")
    if kind == "verifying":
        return "written; checking the output against the plan…"
    if kind == "failed":
        return f"failed: {event['error']}"
    if kind == "cancelled":
        return "cancelled"
    return None


def job_arguments(args) -> list[str]:
    """``export.job``'s arguments for this command's options."""
    job_args = ["--topic", args.topic, "--format", args.format, "--out", os.path.abspath(args.out),
                "--master", args.master, "--partition-size", str(args.partition_size)]
    if args.path:
        job_args += ["--path", os.path.abspath(args.path)]
    else:
        job_args += ["--name-server", args.namesrv or namesrv_of(args.cluster)]
    job_args += _range_args(getattr(args, "from"), "starting") + _range_args(args.to, "ending")
    if args.tags:
        job_args += ["--tags", args.tags]
    if args.keys:
        job_args += ["--keys", args.keys]
    if args.partition_by:
        job_args += ["--partition-by", args.partition_by]
    if args.skip_lost:
        job_args.append("--skip-lost")
    if args.incremental:
        job_args.append("--incremental")
    if args.continuous:
        job_args += ["--continuous", "--trigger-seconds", str(args.trigger_seconds)]
    return job_args


class Follower:
    """Tails an export's events file: prints progress on stderr, copies the events for
    ``--events``, keeps the summary."""

    def __init__(self, events_path: str, copy) -> None:
        self.stream = open(events_path, encoding="utf-8")  # noqa: SIM115
        self.copy = copy  # (opened by run_export before anything started; not closed here)
        self.summary: dict | None = None
        self.ended: str | None = None  # finished, failed or cancelled, once said
        self.driver: int | None = None
        self.shown = 0.0
        self.partial = ""
        self.next_look = time.monotonic() + UNLINKED_LOOK_SECONDS

    def poll(self) -> bool:
        """Read what has arrived; False when nothing had."""
        line = self.partial + self.stream.readline()
        if not line.endswith("\n"):  # nothing, or a line still being written: the rest later
            self.partial = line
            return False
        self.partial = ""
        if time.monotonic() > self.next_look:
            self._drop_unlinked_outputs()
        if self.copy is not None:
            try:
                self.copy.write(line)
            except OSError as exc:  # (a full disk): the export goes on, unfollowed by the copy
                print(f"no longer copying the events to --events: {exc}", file=sys.stderr)
                self.copy = None
        event = json.loads(line)
        text = _human(event)
        if text and (event["event"] != "progress" or time.monotonic() - self.shown > 1):
            print(text, file=sys.stderr, flush=True)
            self.shown = time.monotonic()
        if event["event"] == "finished":
            self.summary = event
        if event["event"] in ("finished", "failed", "cancelled"):
            self.ended = event["event"]
        elif event["event"] == "started" and event.get("pid"):
            self.driver = int(event["pid"])
        return True

    def _drop_unlinked_outputs(self) -> None:
        # A console that closed and let this export run removed the files it followed it
        # through: this process holds them, deleted, and a continuous export would grow them
        # for as long as it runs, with nobody to read them.
        self.next_look = time.monotonic() + UNLINKED_LOOK_SECONDS
        if self.copy is not None and _unlinked(self.copy):
            with contextlib.suppress(OSError):
                self.copy.close()
            self.copy = None
        if _unlinked(sys.stderr):
            sys.stderr.flush()
            null = os.open(os.devnull, os.O_WRONLY | BINARY)
            os.dup2(null, sys.stderr.fileno())
            os.close(null)

    def drain(self) -> None:
        while self.poll():
            pass

    def close(self) -> None:
        self.stream.close()


UNLINKED_LOOK_SECONDS = 10.0


def _unlinked(stream) -> bool:
    """Whether ``stream`` writes to a regular file no longer in any folder (POSIX; never on
    Windows, which deletes no file in use)."""
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError):  # (no descriptor: captured, closed)
        return False
    return stat.S_ISREG(status.st_mode) and status.st_nlink == 0


def open_events_copy(path: str | None):
    """The ``--events`` file, opened before anything starts: a path that cannot be written is
    an error while there is no job yet, not an export orphaned by its launcher's end. Its first
    line says the launcher holds it (the console may remove the file's folder from then on: on
    POSIX the launcher writes on into the file it holds)."""
    if not path:
        return None
    copy = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    copy.write(json.dumps({"event": "launched", "time": time.time(), "pid": os.getpid()}) + "\n")
    return copy


def run_export(args) -> int:
    copy = open_events_copy(args.events)  # first: the console waits for its line when it closes
    local = args.master.startswith("local")
    if args.warm and not local:
        raise ExportError("--warm runs on the local warm service; --master spark://… runs cold")
    job_id = new_job_id()
    try:
        _check_java()
        _spark_submit()
        return _run_export(args, copy, job_id)
    except (ExportError, OSError) as exc:
        _record_failure(args, job_id, exc, copy)
        raise
    finally:
        if copy is not None:
            with contextlib.suppress(OSError):
                copy.close()


def _record_failure(args, job_id: str, error: Exception, copy) -> None:
    """An export that failed before its job started (no Java, a service that would not start
    or refused it) still gets its job record, failed with the reason: the Exports table is
    where one left running by a closed console is looked for, its launcher's output gone."""
    path = jobs_dir() / f"{job_id}.json"
    if path.exists():  # the job started and keeps its own record
        return
    from export.job import record_fields  # (only here: every other command goes without it)

    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    fields = {**record_fields(args, pid=os.getpid()), "topics": [args.topic]}  # (one, as given)
    with contextlib.suppress(OSError):
        jobs_dir().mkdir(parents=True, exist_ok=True)
        JobRecord(str(path), fields).on_event("failed", {"error": message})
    if copy is not None:
        with contextlib.suppress(OSError):
            copy.write(json.dumps({"event": "failed", "time": time.time(), "error": message}) + "\n")


def _run_export(args, copy, job_id: str) -> int:
    local = args.master.startswith("local")
    service = None
    if local and not args.cold:
        if args.warm:
            service, waited = start_service()
            if waited:
                print(f"started the warm export service in {waited:.1f} s; later exports "
                      "start at once (`rocketdesk export service stop` ends it)", file=sys.stderr)
        else:
            service = find_service()
    jobs_dir().mkdir(parents=True, exist_ok=True)
    job_args = [*job_arguments(args), "--record", str(jobs_dir() / f"{job_id}.json")]
    scratch = tempfile.mkdtemp(prefix="rocketdesk-export-")
    events_path = os.path.join(scratch, "events.jsonl")
    job_args += ["--events-file", events_path]
    Path(events_path).touch()
    code = 1
    try:
        if service is not None:
            code = _run_warm(args, service, job_id, job_args, events_path, copy)
        else:
            code = _run_cold(args, job_args, scratch, events_path, copy)
        return code
    finally:
        if code in (0, 130) or service is not None:  # a failed cold export's Spark log stays
            shutil.rmtree(scratch, ignore_errors=True)


def _run_warm(args, service: ServiceClient, job_id: str, job_args: list[str], events_path: str,
              copy) -> int:
    """On the warm service: submitted, followed through its events, cancelled by a request."""
    cancelled = False

    def cancel(signum, frame):
        nonlocal cancelled
        cancelled = True

    previous = {sig: signal.signal(sig, cancel) for sig in (signal.SIGINT, signal.SIGTERM)}
    watch = processes.watch_stop_requests(lambda: cancel(None, None))  # the console's Cancel on Windows
    follower = Follower(events_path, copy)
    service_pid = int(service.state["pid"])
    try:
        service.ask("submit", id=job_id, args=job_args)
        asked_to_cancel = False
        while follower.ended is None:
            if cancelled and not asked_to_cancel:
                asked_to_cancel = True
                try:
                    service.ask("cancel", id=job_id)
                except (OSError, ExportError):
                    pass  # the service is gone: so is the export
            if not follower.poll():
                if not psutil.pid_exists(service_pid):  # (a slow answer is not a death)
                    follower.drain()
                    if follower.ended is None:
                        print("the export service ended during the export", file=sys.stderr)
                        return 1
                time.sleep(0.1)
    finally:
        watch.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        follower.close()
    return _conclude(args, follower, None)


def _run_cold(args, job_args: list[str], scratch: str, events_path: str, copy) -> int:
    """In a process of its own (``python -m export.job``, or spark-submit for a cluster)."""
    log_path = args.log or os.path.join(scratch, "spark.log")
    env = with_temp_folder(spark_environment(local=args.master.startswith("local")),
                           os.path.join(scratch, "tmp"))
    job: subprocess.Popen | None = None
    follower: Follower | None = None
    cancelled = False

    def cancel(signum, frame):
        # The driver itself cancels its Spark jobs and removes its staging folder; its JVM and
        # Python workers follow it (the group is killed below if anything lingers). Under
        # spark-submit the driver is the JVM's child, so it is signalled itself once known.
        nonlocal cancelled
        cancelled = True
        if job is not None and job.poll() is None:  # (an ended job's pid may be another's now)
            processes.terminate((follower.driver if follower else None) or job.pid)

    # Installed before the job starts: the job runs in its own session, so a SIGTERM that
    # killed this launcher by default between the two would leave it running on its own,
    # finishing the export nobody is waiting for.
    previous = {sig: signal.signal(sig, cancel) for sig in (signal.SIGINT, signal.SIGTERM)}
    watch = processes.watch_stop_requests(lambda: cancel(None, None))  # the console's Cancel on Windows
    if cancelled:
        watch.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("cancelled", file=sys.stderr)
        return 130
    with open(log_path, "ab") as log:
        job = subprocess.Popen(build_command(args, job_args, scratch), stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                               cwd=str(ROOT), **processes.detached())
    job_process = _held(job.pid)  # (what its group is found through, after it ended too)
    if cancelled:  # the signal came while the job was being started, before it had a pid here
        processes.terminate(job.pid)
    follower = Follower(events_path, copy)
    try:
        while True:
            if follower.poll():
                if cancelled and follower.driver and follower.driver != job.pid:
                    processes.terminate(follower.driver)  # the cancel reached spark-submit before it
                continue
            if job.poll() is not None:
                follower.drain()
                break
            time.sleep(0.2)
        try:
            code = job.wait(30)
        except subprocess.TimeoutExpired:
            processes.kill_group(job.pid, job_process)
            code = job.wait()
    finally:
        # Killed before the handlers are restored: a SIGTERM in between must not end this
        # launcher and leave the job running on its own.
        if job.poll() is None:
            processes.kill_group(job.pid, job_process)
            job.wait()
        if follower.driver is not None and follower.driver != job.pid:
            wait_gone(follower.driver, 30)  # a cancelled driver under spark-submit is still cleaning up
        processes.kill_group(job.pid, job_process)  # a JVM or worker left behind by the job
        watch.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        follower.close()
    if follower.summary is None and code != 130 and not cancelled:
        tail = (Path(log_path).read_text(errors="replace").splitlines()[-15:]
                if os.path.exists(log_path) else [])
        print("rocketdesk: the export failed; the last lines of Spark's log (" + log_path + "):\n  "
              + "\n  ".join(tail), file=sys.stderr)
        return 1
    return _conclude(args, follower, code)


def _held(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:  # ended already
        return None


def _conclude(args, follower: Follower, code: int | None) -> int:
    summary = follower.summary
    if summary is not None:
        summary.pop("event", None)
        summary.pop("time", None)
        print(json.dumps(summary, indent=1) if args.json else _summary_text(summary))
        return 0 if summary.get("verified") else 1
    if follower.ended == "cancelled" or code is not None:
        # A job cancelled before it set up its own handler dies of the SIGTERM (-15) without a
        # word: still a cancel, not a failure.
        if follower.ended != "cancelled":
            print("cancelled", file=sys.stderr)
        return 130
    return 1


def _summary_text(summary: dict) -> str:
    if summary.get("continuous"):
        return (f"stopped keeping {summary['out']} up to date: {summary['exported']:,} messages "
                f"exported while it ran, {summary['totalInOutput']:,} there in all, "
                f"{'each once' if summary['verified'] else 'DUPLICATES FOUND'}; the same command "
                "resumes where it stopped")
    if summary.get("incremental"):
        return (f"exported {summary['exported']:,} new messages to {summary['out']} in "
                f"{summary['seconds']:.1f} s ({summary['totalInOutput']:,} there in all, "
                f"{'each once' if summary['verified'] else 'DUPLICATES FOUND'})")
    check = "verified against the brokers' offsets" if summary["verified"] else "NOT VERIFIED"
    return (f"exported {summary['exported']:,} of {summary['planned']:,} planned messages to "
            f"{summary['out']} in {summary['seconds']:.1f} s"
            + (f" ({summary['rate']:,} msg/s)" if summary.get("rate") else "") + f"; {check}")


def add_command(commands) -> None:
    parser = commands.add_parser("export", help="export a topic to Parquet, JSON or CSV with Spark")
    parser.add_argument("--cluster", help="a cluster RocketDesk runs (default: the only one)")
    parser.add_argument("-n", "--namesrv", help="or any name server address")
    parser.add_argument("--path", help="or a store directory on this host (offline read)")
    parser.add_argument("-t", "--topic", required=True, help="topic(s), comma-separated")
    parser.add_argument("--from", help="time (ms, ISO, now) or earliest/latest/JSON offsets")
    parser.add_argument("--to", help="time or offsets where the export ends (default: latest)")
    parser.add_argument("--tags", help="tag expression, e.g. 'TagA || TagB'")
    parser.add_argument("--keys", help="only messages with one of these keys (comma-separated)")
    parser.add_argument("--format", choices=["parquet", "json", "csv"], default="parquet")
    parser.add_argument("--partition-by",
                        help="folders by date, hour (of the store time, UTC), tag or any output "
                             "column, Hive style: e.g. date,hour or tag or brokerName,queueId")
    parser.add_argument("--partition-size", type=int, default=50_000, help="messages per Spark task")
    parser.add_argument("--skip-lost", action="store_true",
                        help="go on past messages deleted before they were read (their CommitLog "
                             "files expired) instead of failing: an export that fell behind the "
                             "brokers' retention resumes at what is left")
    streaming = parser.add_mutually_exclusive_group()
    streaming.add_argument("--incremental", action="store_true",
                           help="only what is new since the last run into the same --out")
    streaming.add_argument("--continuous", action="store_true",
                           help="keep --out up to date with the topic until stopped (Ctrl-C or "
                                "`export cancel`); the same command resumes exactly where it stopped")
    parser.add_argument("--trigger-seconds", type=float, default=5.0,
                        help="--continuous: seconds between batches")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--master", default="local[*]", help="local[*] (default) or spark://HOST:PORT")
    parser.add_argument("--events", help="also append the job's JSON events to this file")
    parser.add_argument("--log", help="where Spark's own output goes (default: a temporary file)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    warmth = parser.add_mutually_exclusive_group()
    warmth.add_argument("--warm", action="store_true",
                        help="run on the warm export service, starting it if it is not running")
    warmth.add_argument("--cold", action="store_true",
                        help="run in a Spark of its own even when the warm service runs")
    parser.set_defaults(func=run_export)
