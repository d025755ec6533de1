"""One export the console started: ``rocketdesk export`` in a process of its own that can
outlive the console.

The console follows it through files in a folder of its own, not through pipes: the JSON
events the launcher copies there (``--events``) and the launcher's own lines on stderr. A
QProcess would kill the launcher when the console closes (its destructor does), and a launcher
left writing into the console's closed pipes would die of it: either way mid-export, before its
cleanup (Spark's scratch folder, a cold driver's JVM). Started detached (its own session; on
Windows its own process group), with files for its output, it ends its export the same whether
the console is still open or not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from common.platform import processes

# How long a console closing waits for a launcher it has just started to open its files.
LET_GO_WAIT = 10.0
_LET_GO: list[subprocess.Popen] = []  # launchers let go, left running as the console ends


class ExportLaunch:
    """``python -m rocketdesk.cli export …``: started by :meth:`start`, then polled."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.folder = tempfile.mkdtemp(prefix="rocketdesk-console-export-")
        self.events_path = os.path.join(self.folder, "events.jsonl")
        self.errors_path = os.path.join(self.folder, "stderr.log")
        self.args = [*args, "--events", self.events_path]
        self.env = env
        self.process: subprocess.Popen | None = None
        with open(self.events_path, "wb"):
            pass  # there from the start: the view reads it before the launcher writes a line

    def start(self) -> None:
        with open(self.errors_path, "wb") as errors:
            # stdout (the summary the launcher prints) is not read: the events carry it.
            self.process = subprocess.Popen([sys.executable, *self.args], stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=errors, env=self.env,
                                            **processes.detached())

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def poll(self) -> int | None:
        """The launcher's exit code once it has ended, else None."""
        return self.process.poll() if self.process is not None else None

    def terminate(self) -> None:
        """Ask the launcher to cancel (a continuous export: to stop); it cleans up after itself."""
        if self.process is not None and self.process.poll() is None:
            processes.terminate(self.process.pid)

    def last_error(self) -> str:
        """The last line the launcher wrote on stderr (why it failed), or ''."""
        try:
            with open(self.errors_path, encoding="utf-8", errors="replace") as handle:
                lines = [line.strip() for line in handle if line.strip()]
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def holds_its_files(self) -> bool:
        """Whether the launcher has opened the events file: its first line is the launcher's."""
        try:
            return os.path.getsize(self.events_path) > 0
        except OSError:
            return False

    def let_go(self, wait: float = LET_GO_WAIT) -> bool:
        """The console closes and leaves the launcher running: its folder goes once the
        launcher holds its files (up to ``wait`` seconds: it may have only just started).
        False when the folder had to stay: a launcher not yet holding the events file would
        find no folder to open it in, and end before starting the export (and on Windows,
        which refuses to delete the files it holds)."""
        deadline = time.monotonic() + wait
        while self.running() and not self.holds_its_files() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running() and not self.holds_its_files():
            return False
        if self.process is not None and self.process.poll() is None:
            _LET_GO.append(self.process)  # (a Popen collected while its process runs warns)
        self.remove()
        return not os.path.exists(self.folder)  # (Windows keeps the files the launcher holds)

    def remove(self) -> None:
        """Remove the folder: once the launcher has ended, or let go holding its files.

        A launcher let go keeps writing into the files it holds open; on POSIX their space
        goes when it closes them. Windows refuses to delete a file in use: the folder then
        stays in the temporary folder."""
        shutil.rmtree(self.folder, ignore_errors=True)
