"""Stopping, killing, pausing and detaching processes, the same calls on every platform.

psutil does the work: on POSIX its suspend/resume/kill are SIGSTOP/SIGCONT/SIGKILL, on Windows
it suspends a process's threads and terminates it. A graceful stop is SIGTERM on POSIX (a
paused process is resumed first, or it could not act on it). Windows has no signal that
reaches a process without a console of its own: a stop there is a request file the process
looks for (stop_requests.py), and it stops as it would on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil

from common.platform import stop_requests
from common.platform.stop_requests import StopRequestWatch

# Stops are request files where no signal reaches a process (Windows); the tests set it on
# Linux to run that path with real processes.
STOP_BY_REQUEST = sys.platform == "win32"


def stop(process: psutil.Process) -> None:
    """Ask for an orderly exit (the caller kills it if it does not come)."""
    process.resume()
    if STOP_BY_REQUEST:
        stop_requests.ask(process)  # (TerminateProcess would be a crash: see the note)
        return
    process.terminate()


def kill(process: psutil.Process) -> None:
    """End it at once, as a crash would."""
    process.kill()


def pause(process: psutil.Process) -> None:
    process.suspend()


def resume(process: psutil.Process) -> None:
    process.resume()


def kill_group(pid: int, held: psutil.Process | None = None) -> None:
    """End process ``pid`` and everything it started: its session's group on POSIX (which
    outlives the leader). On Windows, the processes whose parent ``held`` is or was: the
    psutil.Process its starter kept from the start, so that they are found after it ended,
    when Windows leaves them orphans, and a later process given its pid is never taken for it
    (without one, nothing is safe to kill there)."""
    if sys.platform != "win32":
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    if held is None:
        return
    family = _descendants(held)
    if held.is_running():
        family.append(held)
    for member in family:
        try:
            member.kill()
        except psutil.Error:
            pass


def _descendants(held: psutil.Process) -> list[psutil.Process]:
    """Processes started by ``held`` or by those, after it ended too (psutil's own children()
    refuses a process that ended): parents by pid, and no younger than ``held``, so that a
    process given a reused pid is not counted."""
    since = held.create_time()  # (psutil keeps it from when ``held`` was made)
    by_parent: dict[int, list[psutil.Process]] = {}
    for process in psutil.process_iter(["ppid", "create_time"]):
        if process.info["create_time"] is not None and process.info["create_time"] >= since:
            by_parent.setdefault(process.info["ppid"], []).append(process)
    found, pending = [], [held.pid]
    while pending:
        for child in by_parent.pop(pending.pop(), []):
            found.append(child)
            pending.append(child.pid)
    return found


def terminate(pid: int) -> None:
    """Ask ``pid`` for an orderly exit, if it is still there."""
    try:
        stop(psutil.Process(pid))
    except psutil.NoSuchProcess:
        pass


def detached() -> dict:
    """Popen arguments for a process that outlives its starter and its terminal (a node, an
    export): its own session on POSIX; on Windows its own process group, with a console of its
    own that shows no window (so neither it nor what it starts, a JVM, pops one up)."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW}
    return {"start_new_session": True}


def on_stop_request(loop, callback) -> StopRequestWatch:
    """Call ``callback`` on the event loop when this process is asked to stop: a request file
    (what ``stop`` makes on Windows; honoured everywhere), SIGTERM or Ctrl-C on POSIX; on
    Windows, where an event loop takes no signal handlers, Ctrl-C or Ctrl-Break in a console,
    handed over to the loop's thread."""
    if sys.platform != "win32":
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, callback)
    else:
        for sig in (signal.SIGBREAK, signal.SIGINT):
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(callback))
    return stop_requests.watch_on_loop(loop, callback)


def watch_stop_requests(callback) -> StopRequestWatch:
    """For a program without an event loop that installs its own SIGTERM/SIGINT handlers:
    ``callback`` runs in a thread of its own when a request file comes (on Windows the only
    stop request that reaches it). Close the watch when the program stops taking requests."""
    return stop_requests.watch_in_thread(callback)


def become(argv: list[str]) -> int:
    """Run ``argv`` in place of this program (``exec`` on POSIX: its exit status is ours and
    Ctrl-C reaches it alone). Windows has no exec (``os.execv`` there starts the program and
    ends this one at once, so a terminal would get its prompt back with the program still
    running): wait for it instead, leaving Ctrl-C to it, and return its exit code."""
    if sys.platform != "win32":
        os.execv(argv[0], argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return subprocess.call(argv)
