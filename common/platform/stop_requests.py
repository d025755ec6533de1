"""Asking another process to stop, where no signal can: a request file named for the process.

On Windows no signal reaches a process without a console of its own (a node, an export, a load
generator the console started all run hidden), and TerminateProcess is a crash to the store. So
the stopper writes ``<pid>-<created ms>`` into a folder only its user can write, and every
RocketDesk process that takes stop requests looks for its own name a few times a second and
stops as it would on SIGTERM. The creation time in the name keeps a request meant for a process
that has ended from stopping a later one given the same pid.

POSIX keeps SIGTERM for its stops; the files are honoured there too, so the path Windows relies
on is the one the tests run on Linux."""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

POLL_SECONDS = 0.25


class RequestFolderError(OSError):
    """The request folder is not this user's alone: requests there are neither made nor taken."""


def request_folder() -> Path:
    """``<temp>/rocketdesk-stop-requests-<user>``, made private to this user (Windows' temp
    folder is per user already; on POSIX the folder is 0700 and must be ours)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): the folder still works
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    folder = Path(tempfile.gettempdir()) / f"rocketdesk-stop-requests-{user}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if sys.platform != "win32":
        status = folder.lstat()
        if folder.is_symlink() or status.st_uid != os.geteuid() or status.st_mode & 0o077:
            raise RequestFolderError(f"{folder} is not private to this user")
    return folder


def _name(process: psutil.Process) -> str:
    return f"{process.pid}-{round(process.create_time() * 1000)}"


def ask(pid: int) -> bool:
    """Ask process ``pid`` to stop; False when it is gone (or no request can be made)."""
    try:
        process = psutil.Process(pid)
        folder = request_folder()
        (folder / _name(process)).touch()
    except (psutil.NoSuchProcess, OSError):
        return False
    _forget_the_ended(folder)
    return True


def _forget_the_ended(folder: Path) -> None:
    """Requests to processes that ended before seeing them (they can never match again)."""
    for entry in folder.iterdir():
        pid, _, _created = entry.name.partition("-")
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            entry.unlink(missing_ok=True)


class StopRequestWatch:
    """This process's own request file, looked for until one comes or :meth:`close`."""

    def __init__(self) -> None:
        try:
            self.path: Path | None = request_folder() / _name(psutil.Process())
        except (RequestFolderError, OSError):
            self.path = None  # signals still work where there are any
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def asked(self) -> bool:
        """True once, when a request came (it is taken away)."""
        if self.path is None or self.closed or not self.path.exists():
            return False
        self.path.unlink(missing_ok=True)
        return True

    def close(self) -> None:
        self._closed.set()

    def wait_closed(self, seconds: float) -> bool:
        return self._closed.wait(seconds)


def watch_on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> StopRequestWatch:
    """Call ``callback`` on ``loop`` when a request comes (a timer, no thread)."""
    watch = StopRequestWatch()

    def look() -> None:
        if watch.closed:
            return
        if watch.asked():
            callback()
        loop.call_later(POLL_SECONDS, look)  # later requests too: a stop may be asked again

    if watch.path is not None:
        loop.call_later(POLL_SECONDS, look)
    return watch


def watch_in_thread(callback: Callable[[], None]) -> StopRequestWatch:
    """Call ``callback`` in a daemon thread of its own when a request comes, for programs with
    no event loop whose main thread may be blocked where no signal would reach it anyway (a
    call into Spark). ``callback`` must be safe to call from another thread."""
    watch = StopRequestWatch()
    if watch.path is None:
        return watch

    def run() -> None:
        while not watch.wait_closed(POLL_SECONDS):
            if watch.asked():
                callback()

    threading.Thread(target=run, name="stop-request-watch", daemon=True).start()
    return watch
