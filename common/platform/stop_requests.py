"""Asking another process to stop, where no signal can: a request file named for the process.

On Windows no signal reaches a process without a console of its own (a node, an export, a load
generator the console started all run hidden), and TerminateProcess is a crash to the store. So
the stopper writes ``<pid>-<created ms>`` into a folder of its user's own, and every RocketDesk
process that takes stop requests looks for its own name a few times a second and stops as it
would on SIGTERM. The creation time in the name keeps a request from reaching a later process
given the same pid: the stopper names the process it holds, not whatever has its pid now.

The folder is in the user's data folder (not the temp folder, which Windows machines may share
between users and terminal-server sessions keep apart), and on POSIX it must be 0700 and ours.
POSIX keeps SIGTERM for its stops; the files are honoured there too, so the path Windows relies
on is the one the tests run on Linux."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import platformdirs
import psutil

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25


class RequestFolderError(OSError):
    """The request folder is not this user's alone: requests there are neither made nor taken."""


def _base() -> Path:
    # The same for every process of the user, whatever its environment says of homes.
    return Path(platformdirs.user_data_dir("rocketdesk", "RocketDesk"))


def request_folder() -> Path:
    folder = _base() / "stop-requests"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if sys.platform != "win32":
        status = folder.lstat()
        if folder.is_symlink() or status.st_uid != os.geteuid() or status.st_mode & 0o077:
            raise RequestFolderError(f"{folder} is not private to this user")
    return folder


def request_name(process: psutil.Process) -> str:
    """The request's file name for ``process``; raises psutil.NoSuchProcess when it is gone."""
    return f"{process.pid}-{round(process.create_time() * 1000)}"


def ask(process: psutil.Process) -> bool:
    """Ask ``process`` to stop; False when it is gone (or no request can be made)."""
    try:
        if not process.is_running():  # (psutil: also False when its pid is someone else's now)
            return False
        folder = request_folder()
        (folder / request_name(process)).touch()
    except (psutil.Error, OSError):
        return False
    try:
        _forget_the_ended(folder)
    except OSError:  # (a file another program has open, on Windows: tidied another time)
        pass
    return True


def _forget_the_ended(folder: Path) -> None:
    """Requests to processes that ended before seeing them (they can never match again)."""
    for entry in folder.iterdir():
        pid, _, _created = entry.name.partition("-")
        try:
            gone = pid.isdecimal() and not psutil.pid_exists(int(pid))
        except OverflowError:  # a pid no system has (a name not of ours)
            gone = True
        if gone:
            entry.unlink(missing_ok=True)


class StopRequestWatch:
    """This process's own request file, looked for until one comes or :meth:`close`."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        try:
            self.folder: Path | None = request_folder()
        except OSError as exc:  # signals still work where there are any
            log.warning("stop requests by file are off: %s", exc)
            self.folder = None
        self._closed = threading.Event()
        self._seen: Path | None = None  # a request taken but not yet removed (Windows: in use)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def asked(self) -> bool:
        """True once for each request that comes (it is then removed)."""
        if self.folder is None or self.closed:
            return False
        if self._seen is not None:  # removed later than seen: an antivirus had it open
            self._remove(self._seen)
            return False
        try:
            # Named afresh each time: on Linux the creation time follows the boot time, which
            # moves with the clock.
            path = self.folder / request_name(self._me)
            if not path.exists():
                return False
        except (psutil.Error, OSError):
            return False
        self._remove(path)
        return True

    def _remove(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
            self._seen = None
        except OSError:
            self._seen = path

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
        loop.call_later(POLL_SECONDS, look)  # later requests too: a stop may be asked again
        if watch.asked():
            callback()

    if watch.folder is not None:
        loop.call_later(POLL_SECONDS, look)
    return watch


def watch_in_thread(callback: Callable[[], None]) -> StopRequestWatch:
    """Call ``callback`` in a daemon thread of its own when a request comes, for programs with
    no event loop whose main thread may be blocked where no signal would reach it anyway (a
    call into Spark). ``callback`` must be safe to call from another thread."""
    watch = StopRequestWatch()
    if watch.folder is None:
        return watch

    def run() -> None:
        while not watch.wait_closed(POLL_SECONDS):
            if watch.asked():
                try:
                    callback()
                except Exception:  # the next request must still be heard
                    log.exception("acting on a stop request failed")

    threading.Thread(target=run, name="stop-request-watch", daemon=True).start()
    return watch
