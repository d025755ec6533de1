"""Stopping, killing, pausing and detaching processes, the same calls on every platform.

psutil does the work: on POSIX its suspend/resume/kill are SIGSTOP/SIGCONT/SIGKILL, on Windows
it suspends a process's threads and terminates it. A graceful stop is SIGTERM on POSIX (a
paused process is resumed first, or it could not act on it). Windows has no signal that
reaches a process without a console of its own: a stop there terminates it (the store
recovers as after a crash); an orderly stop needs a request over the protocol (not yet)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil


def stop(process: psutil.Process) -> None:
    """Ask for an orderly exit."""
    process.resume()
    if sys.platform == "win32":
        process.terminate()  # TerminateProcess: see the module's note
        return
    process.terminate()


def kill(process: psutil.Process) -> None:
    """End it at once, as a crash would."""
    process.kill()


def pause(process: psutil.Process) -> None:
    process.suspend()


def resume(process: psutil.Process) -> None:
    process.resume()


def kill_group(pid: int) -> None:
    """End a process and everything it started (its session's group on POSIX; its tree
    elsewhere)."""
    if sys.platform != "win32":
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for process in [*parent.children(recursive=True), parent]:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


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


def on_stop_request(loop, callback) -> None:
    """Call ``callback`` on the event loop when this process is asked to stop: SIGTERM or
    Ctrl-C on POSIX; on Windows, where an event loop takes no signal handlers, CTRL_BREAK_EVENT
    (what ``stop`` sends) or Ctrl-C, handed over to the loop's thread."""
    if sys.platform != "win32":
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, callback)
        return
    for sig in (signal.SIGBREAK, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.call_soon_threadsafe(callback))
