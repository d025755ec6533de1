"""The Export tab's list of exports, without Qt: a row per job record (export/job_record.py),
running or ended, warm or cold, started here or from the command line."""

from __future__ import annotations

import time
from dataclasses import dataclass

COLUMNS = ["started", "state", "topics", "messages", "behind", "spark", "output"]
RUNNING = ("running", "verifying")


@dataclass(frozen=True, slots=True)
class ExportRow:
    id: str
    started: float
    state: str
    topics: str
    exported: int | None
    total: int | None
    lag: int | None
    warm: bool
    continuous: bool
    out: str
    error: str | None

    @property
    def running(self) -> bool:
        return self.state in RUNNING

    def cells(self) -> list[str]:
        if self.exported is None:
            messages = "-"
        else:
            messages = f"{self.exported:,}" + (f" of {self.total:,}" if self.total else "")
        state = self.state + (" (continuous)" if self.continuous and self.running else "")
        return [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started)), state,
                self.topics, messages, "-" if self.lag is None else f"{self.lag:,}",
                "warm" if self.warm else "its own", self.out]

    def tooltip(self) -> str:
        return f"export {self.id}" + (f": {self.error}" if self.error else "")


def export_rows(records: list[dict], state_of) -> list[ExportRow]:
    """Rows newest first; ``state_of(record)`` says where an export stands (a running one whose
    process is gone is "lost")."""
    return [ExportRow(str(r.get("id", "?")), float(r.get("created") or 0), state_of(r),
                      ", ".join(r.get("topics") or []), r.get("exported"), r.get("total"),
                      r.get("lag"), bool(r.get("service")), bool(r.get("continuous")),
                      str(r.get("out") or ""), r.get("error"))
            for r in records]
