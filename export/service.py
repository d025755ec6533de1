"""The warm export service: one long-lived local Spark session that exports run on, so that
only the first export pays for Spark's start (a JVM, the session, the Python workers, the
``rocketmq`` source's first plan: 10-20 s here) and later ones start at once.

    python -m export.service --dir EXPORTS_FOLDER [--idle-minutes 30]

It listens on loopback only, on a port of the system's choosing, and announces itself in
``service.json`` in that folder (pid, port, a token every request must carry, Spark's version
and application id), written once the session is warm and removed when the service ends. A
request is one JSON line, answered by one:

    {"token": T, "op": "ping"}                      -> the session and the exports running
    {"token": T, "op": "submit", "id": I, "args": […export.job's arguments…]}
    {"token": T, "op": "cancel", "id": I}
    {"token": T, "op": "stop"}                      -> cancels what runs, then ends

A submitted export runs in a thread of its own (Spark job group ``rocketdesk-export-I``) and
reports exactly as ``python -m export.job`` does: events in its ``--events-file``, its job
record in ``--record``. The service ends itself after ``--idle-minutes`` without an export, so
a forgotten one does not hold a JVM's memory for good."""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import secrets
import signal
import socketserver
import sys
import tempfile
import threading
import time

import psutil

from common.platform import processes
from common.platform.files import BINARY, replace_file
from export.job import Events, JobControl, parse_args, record_fields, run_job, session
from export.job_record import JobRecord

log = logging.getLogger("export.service")
STATE_FILE = "service.json"
MAX_REQUEST = 1 << 20  # a request line: an export's arguments, never megabytes
PARENT_GRACE = 10.0  # seconds without a request before a service whose console has gone ends


class ExportService:
    def __init__(self, folder: str, master: str = "local[*]", idle_seconds: float = 1800,
                 parent_pid: int | None = None) -> None:
        self.folder = folder
        # The consoles it serves (the one that started it, and those that found it running):
        # it ends once all of them have.
        self.parents: set[int] = {parent_pid} if parent_pid is not None else set()
        self.master = master
        self.idle_seconds = idle_seconds
        self.token = secrets.token_hex(16)
        self.spark = None
        self.jobs: dict[str, JobControl] = {}
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.stopping = threading.Event()
        self.server: socketserver.ThreadingTCPServer | None = None

    # -- start and end ---------------------------------------------------------------------------
    def warm(self) -> float:
        """Start the session and run what every export needs once, so that no export waits for
        it: the source registered, a Python worker started, the source planned once."""
        began = time.monotonic()
        spark = self.spark = session(argparse.Namespace(master=self.master, driver_memory="2g"))
        # Python workers, each with the reader's modules imported (they are reused).
        spark.range(4, numPartitions=4).rdd.mapPartitions(_import_reader).count()
        with tempfile.TemporaryDirectory() as scratch:
            # An export of a tiny store of its own, the whole way (plan, read, Parquet, verify):
            # the JVM loads and compiles all of it now, not in the first export.
            store = os.path.join(scratch, "store")
            _tiny_store(store)
            rows = os.path.join(scratch, "rows")
            spark.read.format("rocketmq").option("path", store).option("topic", WARM_UP_TOPIC) \
                .load().write.parquet(rows)
            spark.read.parquet(rows).select("topic", "brokerName", "queueId", "queueOffset") \
                .distinct().count()
        return time.monotonic() - began

    def serve(self) -> None:
        service = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 10  # a connection that says nothing does not hold a thread for good

            def handle(self) -> None:
                try:
                    line = self.rfile.readline(MAX_REQUEST)
                except OSError:  # (the timeout)
                    return
                try:
                    request = json.loads(line)
                    if not isinstance(request, dict):
                        raise TypeError("a request is a JSON object")
                    answer = service.answer(request)
                except (ValueError, TypeError, KeyError) as exc:
                    answer = {"ok": False, "error": f"bad request: {exc}"}
                self.wfile.write((json.dumps(answer) + "\n").encode())

        if self.stopping.is_set():
            return  # stopped while warming up (SIGTERM): nothing to serve
        socketserver.ThreadingTCPServer.daemon_threads = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._watch_idle, daemon=True).start()
        self._announce()
        try:
            self.server.serve_forever(poll_interval=0.2)
        finally:
            self.server.server_close()

    def _announce(self) -> None:
        state = {"pid": os.getpid(), "port": self.server.server_address[1], "token": self.token,
                 "master": self.master, "sparkVersion": self.spark.version,
                 "sparkApplication": self.spark.sparkContext.applicationId, "started": time.time()}
        path = os.path.join(self.folder, STATE_FILE)
        part = path + ".part"
        # Only its owner reads the token: another user on the machine cannot submit exports.
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | BINARY, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle)
        replace_file(part, path)  # (launchers read it meanwhile)

    def _watch_idle(self) -> None:
        while not self.stopping.wait(2):
            with self.lock:
                idle = not self.jobs and time.monotonic() - self.last_activity > self.idle_seconds
            if idle:
                log.info("no export for %.0f minutes: ending", self.idle_seconds / 60)
                self.stop()
            elif self.consoles_gone():
                log.info("the consoles it served (pids %s) have gone: ending",
                         ", ".join(map(str, sorted(self.parents))))
                self.stop()

    def consoles_gone(self) -> bool:
        """Whether it served consoles and all have ended, with no export running and no request
        for PARENT_GRACE. Exports finish first: from the command line, and the one a closing
        console left running, whose launcher may not have submitted it yet (it asks within a
        second of finding the service)."""
        with self.lock:
            parents, busy = set(self.parents), bool(self.jobs)
            quiet = time.monotonic() - self.last_activity
        return bool(parents) and not busy and quiet > PARENT_GRACE and not any(
            map(psutil.pid_exists, parents))

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        with self.lock:
            running = list(self.jobs.values())
        for control in running:
            if control.request():
                threading.Thread(target=control.interrupt, daemon=True).start()
        if self.server is not None:
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def wait_for_exports(self, seconds: float = 60.0) -> None:
        """Until the exports that were running have unwound (records written, staging gone)."""
        deadline = time.monotonic() + seconds
        for thread in list(self.threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- requests --------------------------------------------------------------------------------
    def answer(self, request: dict) -> dict:
        if not hmac.compare_digest(str(request.get("token", "")), self.token):
            return {"ok": False, "error": "wrong token"}
        op = request.get("op")
        with self.lock:
            self.last_activity = time.monotonic()
        if op == "ping":
            with self.lock:
                running = sorted(self.jobs)
            return {"ok": True, "pid": os.getpid(), "jobs": running,
                    "sparkVersion": self.spark.version,
                    "sparkApplication": self.spark.sparkContext.applicationId}
        if op == "submit":
            return self.submit(str(request["id"]), [str(a) for a in request["args"]])
        if op == "cancel":
            with self.lock:
                control = self.jobs.get(str(request["id"]))
            asked = control is not None and control.request()
            if asked:  # a streaming query's stop waits for its batch: not in this answer
                threading.Thread(target=control.interrupt, daemon=True).start()
            return {"ok": True, "cancelled": asked}
        if op == "adopt":  # a console found it running: it serves that console too
            pid = request.get("pid")
            # (the watch hands every one to psutil, which raises on a pid no C long holds)
            if type(pid) is not int or not 0 < pid < 1 << 31:
                return {"ok": False, "error": f"bad request: a console's pid, not {pid!r}"[:200]}
            with self.lock:
                if self.parents:  # (one started on its own, from the command line, stays so)
                    self.parents.add(pid)
                consoles = sorted(self.parents)
            return {"ok": True, "consoles": consoles}
        if op == "stop":
            self.stop()
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def submit(self, job_id: str, argv: list[str]) -> dict:
        if self.stopping.is_set():
            return {"ok": False, "error": "the export service is stopping"}
        if not job_id.replace("-", "").isalnum() or len(job_id) > 64:
            return {"ok": False, "error": "an export id is letters, digits and dashes"}
        try:
            args = parse_args(argv)
        except SystemExit:  # argparse's way of saying the arguments are wrong
            return {"ok": False, "error": f"bad export arguments: {' '.join(argv)}"}
        if not args.master.startswith("local"):
            return {"ok": False, "error": "the warm service runs local exports only"}
        control = JobControl(group=f"rocketdesk-export-{job_id}")
        control.out = os.path.abspath(args.out)
        with self.lock:
            if job_id in self.jobs:
                return {"ok": False, "error": f"export {job_id} is running already"}
            if any(other.out == control.out for other in self.jobs.values()):
                return {"ok": False, "error": f"another export is writing into {args.out}"}
            self.jobs[job_id] = control
            thread = threading.Thread(target=self._run, args=(job_id, args, control), daemon=True,
                                      name=f"export-{job_id}")
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()
        return {"ok": True}

    def _run(self, job_id: str, args, control: JobControl) -> None:
        events = None
        try:
            record = (JobRecord(args.record, record_fields(args, pid=os.getpid(), service=True))
                      if args.record else None)
            events = Events(args.events_file, record)
            events.emit("started", master=self.master, pid=os.getpid(), warm=True)
            run_job(self.spark, args, events, control)
        except Exception:  # its record or events could not be written: logged, never stuck
            log.exception("export %s could not run", job_id)
        finally:
            if control.staging is not None:
                control.wait_for_jobs()  # Spark goes on here: its cancelled tasks end first
            control.remove_staging()
            if events is not None:
                events.close()
            with self.lock:
                del self.jobs[job_id]
                self.last_activity = time.monotonic()


WARM_UP_TOPIC = "rocketdesk-warm-up"


def _tiny_store(root: str) -> None:
    """A store of a few messages in two queues, dispatched, for the warm-up export."""
    from storage.config import MessageStoreConfig
    from storage.message import MessageExtBrokerInner
    from storage.message_store import DefaultMessageStore

    store = DefaultMessageStore(MessageStoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1024, max_hash_slot_num=64, max_index_num=256))
    store.load()
    store.start()
    try:
        for i in range(64):
            store.put_message(MessageExtBrokerInner(topic=WARM_UP_TOPIC, body=b"warm %d" % i,
                                                    queue_id=i % 2, properties={"KEYS": str(i)}))
        deadline = time.monotonic() + 10
        while store.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        store.shutdown()


def _import_reader(rows):
    import export.columnar
    import export.pull_reader  # noqa: F401

    return rows


def _unannounce(path: str) -> None:
    """Remove service.json if it is still this service's (not a newer one's)."""
    try:
        with open(path, encoding="utf-8") as handle:
            mine = json.load(handle).get("pid") == os.getpid()
        if mine:
            os.unlink(path)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="export-service")
    parser.add_argument("--dir", required=True, help="the exports folder (service.json goes here)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--idle-minutes", type=float, default=30.0)
    parser.add_argument("--parent-pid", type=int, help="end when this process (a console) ends")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.makedirs(args.dir, exist_ok=True)
    service = ExportService(args.dir, args.master, args.idle_minutes * 60, args.parent_pid)
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    processes.watch_stop_requests(service.stop)  # Windows' stop (thread-safe: flags and threads)
    try:
        log.info("Spark warm in %.1f s", service.warm())
        service.serve()
    finally:
        _unannounce(os.path.join(args.dir, STATE_FILE))
        service.wait_for_exports()
        if service.spark is not None:
            service.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
