"""Reaching the warm export service (export/service.py) from the command line and the console:
where it announces itself, starting it, asking it, stopping it. Exports and their job records
live in ``<RocketDesk home>/exports``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

from common.platform import processes
from common.platform.files import BINARY, read_text
from export.errors import ExportError
from export.job_record import exports_dir

ROOT = Path(__file__).resolve().parents[1]
STATE_FILE = "service.json"  # (export.service.STATE_FILE; that module imports pyspark)
# Set by the console for the exports it runs: a service they start ends with the console.
PARENT_ENV = "ROCKETDESK_EXPORT_SERVICE_PARENT"
STARTING_FILE = "service.starting"


def spark_environment(local: bool) -> dict[str, str]:
    """The environment of a process that runs Spark with our packages on its Python path."""
    pythonpath = str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=pythonpath)
    if local:
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # nothing listens beyond loopback
    return env


def with_temp_folder(env: dict[str, str], folder: str) -> dict[str, str]:
    """``env`` with a Spark process's temporary files in ``folder`` (made here), which its
    caller removes: the driver JVM's (Spark's ``spark-*`` folders, the native libraries lz4 and
    snappy unpack) and its Pythons'. A JVM that ends without its shutdown hooks (killed with its
    job's group, or ended with its Python) leaves its own behind, and /tmp would keep them."""
    os.makedirs(folder, exist_ok=True)
    # (read by Spark's launcher for the driver's JVM; quoted for a path with spaces, and with
    # forward slashes, which Java takes on Windows too, as the quotes make a backslash an escape)
    option = '-Djava.io.tmpdir="' + folder.replace("\\", "/") + '"'
    env = dict(env, TMPDIR=folder, TEMP=folder, TMP=folder)
    env["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [env.get("SPARK_SUBMIT_OPTS"), option]))
    return env


def wait_gone(pid: int, seconds: float) -> bool:
    """Until ``pid`` has exited (a zombie counts: only its reaping is left); False on timeout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            return True
        time.sleep(0.1)
    return False


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class ServiceClient:
    def __init__(self, state: dict) -> None:
        self.state = state

    def ask(self, op: str, timeout: float = 10.0, **values) -> dict:
        request = json.dumps({"token": self.state["token"], "op": op, **values}) + "\n"
        with socket.create_connection(("127.0.0.1", int(self.state["port"])), timeout=timeout) as conn:
            conn.sendall(request.encode())
            answer = conn.makefile("rb").readline(1 << 20)
        if not answer:
            raise ExportError("the export service closed the connection without an answer")
        reply = json.loads(answer)
        if not reply.get("ok"):
            raise ExportError(f"the export service refused: {reply.get('error')}")
        return reply


def find_service() -> ServiceClient | None:
    """The warm service, if one runs for this home and answers; None otherwise."""
    path = exports_dir() / STATE_FILE
    try:
        state = json.loads(read_text(path))  # (the service may be replacing it)
        client = ServiceClient(state)
        client.ask("ping", timeout=3)
        return client
    except (OSError, ValueError, KeyError, ExportError):
        return None


def start_service(idle_minutes: float = 30.0, wait: float = 180.0) -> tuple[ServiceClient, float]:
    """The running service, or a new one started and waited for until warm; (client, seconds
    spent waiting). Its output goes to ``exports/service.log``. For a console
    (``ROCKETDESK_EXPORT_SERVICE_PARENT``) a service that ends with its consoles ends with this
    one too, not with the one that started it while this one still runs."""
    client, waited = _start_or_find(idle_minutes, wait)
    if os.environ.get(PARENT_ENV, "").isdigit():
        try:
            client.ask("adopt", pid=int(os.environ[PARENT_ENV]))
        except (OSError, ExportError):
            pass  # a service from before "adopt" (it ends with the console that started it)
    return client, waited


def _start_or_find(idle_minutes: float, wait: float) -> tuple[ServiceClient, float]:
    running = find_service()
    if running is not None:
        return running, 0.0
    folder = exports_dir()
    folder.mkdir(parents=True, exist_ok=True)
    # One starter at a time: two exports asking for a warm Spark at once get one service. The
    # marker holds the starter's pid: one left by a starter that died does not hold others up.
    marker = folder / STARTING_FILE
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | BINARY, 0o600)
    except FileExistsError:
        starter = 0
        for _ in range(10):  # (its pid is written a moment after the marker is made)
            try:
                starter = int(marker.read_text() or 0)
            except (OSError, ValueError):
                starter = 0
            if starter:
                break
            time.sleep(0.05)
        if starter and psutil.pid_exists(starter):
            return _wait_for_other_starter(starter, wait)
        marker.unlink(missing_ok=True)  # its starter is gone
        return _start_or_find(idle_minutes, wait)
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))
    try:
        return _start(folder, idle_minutes, wait)
    finally:
        marker.unlink(missing_ok=True)


def _wait_for_other_starter(starter: int, wait: float) -> tuple[ServiceClient, float]:
    began = time.monotonic()
    while time.monotonic() - began < wait:
        client = find_service()
        if client is not None:
            return client, time.monotonic() - began
        if not psutil.pid_exists(starter):
            # It finished (then the service answers), gave up, or was ended while the service
            # it started warms up (a console's warm-up, closed with it): then that service.
            warming = _warming_service()
            if warming is None or warming == starter:
                break
            starter = warming
        time.sleep(0.2)
    client = find_service()
    if client is not None:
        return client, time.monotonic() - began
    raise ExportError("another command was starting the export service and it did not become "
                      f"ready; see {exports_dir() / 'service.log'}")


SERVICE_PID_FILE = "service.pid"


def _warming_service() -> int | None:
    """The pid of a service process running but not (yet) answering, if there is one."""
    for folder in (exports_dir() / "service-tmp").glob("*"):
        pid = _service_running(folder)
        if pid is not None:
            return pid
    return None


def _service_running(folder: Path) -> int | None:
    """The pid in a service's temporary folder, if that service still runs. The pid alone
    would do until the system hands it to another process: one started after the file was
    written is not the service (a waiter would wait minutes on it, and its folder would stay)."""
    marker = folder / SERVICE_PID_FILE
    try:
        pid = int(marker.read_text())
        if pid <= 0:  # (0 is the kernel's on Linux: it "exists")
            return None
        written = marker.stat().st_mtime
        started = psutil.Process(pid).create_time()
    except (OSError, ValueError, OverflowError, psutil.Error):
        return None
    # (the service starts just before its starter writes the file; a second for the clocks'
    # resolutions: psutil's start time is in clock ticks)
    return pid if started <= written + 1.0 else None


def _service_temp_folder(parent: Path) -> Path:
    """A new folder for a service's temporary files (its JVM's and its Pythons'), the folders
    of services no longer running removed. A running one's stays: a service that was only too
    busy to answer the starter's ping keeps Spark's local files (shuffle, blocks) there."""
    parent.mkdir(parents=True, exist_ok=True)
    for old in parent.iterdir():
        if _service_running(old) is None:
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(dir=parent))


def _start(folder: Path, idle_minutes: float, wait: float) -> tuple[ServiceClient, float]:
    (folder / STATE_FILE).unlink(missing_ok=True)  # a dead service's
    temp = _service_temp_folder(folder / "service-tmp")
    env = with_temp_folder(spark_environment(local=True), str(temp))
    command = [sys.executable, "-m", "export.service", "--dir", str(folder),
               "--idle-minutes", str(idle_minutes)]
    if os.environ.get(PARENT_ENV, "").isdigit():
        command += ["--parent-pid", os.environ[PARENT_ENV]]
    began = time.monotonic()
    with open(folder / "service.log", "ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=str(ROOT), **processes.detached())  # outlives this command, like a node
    (temp / SERVICE_PID_FILE).write_text(str(process.pid))
    while time.monotonic() - began < wait:
        if process.poll() is not None:
            tail = (folder / "service.log").read_text(errors="replace").splitlines()[-5:]
            raise ExportError("the export service did not start; the end of its log "
                              f"({folder / 'service.log'}):\n  " + "\n  ".join(tail))
        client = find_service()
        if client is not None:
            return client, time.monotonic() - began
        time.sleep(0.2)
    processes.terminate(process.pid)
    raise ExportError(f"the export service was not warm after {wait:.0f} s; see {folder / 'service.log'}")


def stop_service(wait: float = 60.0) -> bool:
    """Stop the running service (its exports are cancelled); False when none runs."""
    client = find_service()
    if client is None:
        return False
    pid = int(client.state["pid"])
    client.ask("stop")
    if not wait_gone(pid, wait):
        raise ExportError(f"the export service (pid {pid}) did not stop within {wait:.0f} s")
    return True
