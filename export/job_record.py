"""An export's job record: one JSON file per export in the exports folder, kept up to date from
the export's own events by whichever process runs it (its own ``python -m export.job``, or the
warm export service), so that ``rocketdesk export list|show|cancel`` and the console see every
export the same way, running or ended, warm or cold.

A record says what was asked (topics, output, format, master), where it stands (``state``:
running, finished, failed, cancelled; messages exported of the planned total), who runs it
(``pid``, and ``service`` when the warm service does) and, once finished, the summary with the
offsets it covered (the manifest's)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from cluster.supervisor.state import data_root
from common.platform.files import replace_file

ENDED = ("finished", "failed", "cancelled")


def exports_dir() -> Path:
    """Where exports keep their records (jobs/) and the warm service announces itself."""
    return data_root() / "exports"


def jobs_dir() -> Path:
    return exports_dir() / "jobs"


class JobRecord:
    def __init__(self, path: str, fields: dict) -> None:
        self.path = path
        self.data = {"id": Path(path).stem, "state": "running", "created": time.time(), **fields}
        self._note_pid_start()
        self._write()

    def _note_pid_start(self) -> None:
        """The recorded process's start time beside its pid: a pid the system has since handed
        to another process (the export was killed, the machine restarted) is then told apart,
        and never signalled by a cancel."""
        data = self.data
        if data.get("pid") and "pidStarted" not in data:
            import psutil

            try:
                data["pidStarted"] = psutil.Process(int(data["pid"])).create_time()
            except (psutil.Error, ValueError, TypeError, OverflowError):
                pass

    def on_event(self, event: str, values: dict) -> None:
        data = self.data
        data["updated"] = time.time()
        if event == "started":
            data.setdefault("pid", values.get("pid"))
            self._note_pid_start()
        elif event == "planned":
            data["total"] = values.get("total")
            data["exported"] = 0
        elif event == "progress":
            data["exported"] = values.get("exported")
            if values.get("lag") is not None:  # a continuous export: how far behind the topic
                data["lag"] = values["lag"]
        elif event == "verifying":
            data["state"] = "verifying"
        elif event in ENDED:
            data["state"] = event
            data["ended"] = data["updated"]
            if event == "finished":
                data["summary"] = values
                data["exported"] = values.get("exported")
            elif event == "failed":
                data["error"] = values.get("error")
        else:
            return  # nothing a reader of the record needs
        self._write()

    def _write(self) -> None:
        # Replaced whole, never written in place: a reader sees the old record or the new one.
        part = f"{self.path}.{os.getpid()}.part"
        with open(part, "w", encoding="utf-8") as handle:
            json.dump(self.data, handle, indent=1)
        replace_file(part, self.path)  # (Windows: while the console reads the old one)


def effective_state(record: dict) -> str:
    """Its state, or "lost" for a running export whose process is gone (killed, or a machine
    restart): it will never say how it ended."""
    state = record.get("state", "?")
    if state in ENDED or not record.get("pid"):
        return state
    import psutil

    try:
        process = psutil.Process(int(record["pid"]))
        alive = process.status() != psutil.STATUS_ZOMBIE
        started = record.get("pidStarted")
        if alive and isinstance(started, int | float):  # (records written before: pid alone)
            alive = abs(process.create_time() - started) < 1.0  # not a pid handed on
    except (psutil.Error, ValueError, TypeError, OverflowError):  # gone, or not a pid at all
        alive = False
    return state if alive else "lost"


def read_records(folder: str, limit: int = 500) -> list[dict]:
    """The newest ``limit`` records in ``folder``, newest first (ids begin with their start
    time); an unreadable one is skipped."""
    records = []
    for path in sorted(Path(folder).glob("*.json"), reverse=True)[:limit]:
        try:
            records.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return sorted(records, key=lambda r: r.get("created", 0), reverse=True)
