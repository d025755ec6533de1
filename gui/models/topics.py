"""The Topics table's rows, without Qt: per topic its queues, permission, messages stored, put
rate over the last minute, the groups reading it and when it last stored a message."""

from __future__ import annotations

import time
from dataclasses import dataclass

PERMISSIONS = {6: "read/write", 4: "read only", 2: "write only", 0: "none"}
# Short headers (the table shares the tab with the message finder), each explained in its tooltip.
COLUMNS = ["topic", "queues", "permission", "messages", "put/s", "groups", "last stored"]
COLUMN_TIPS = ["the topic's name", "read / write queues over all brokers",
               "whether producers may write and consumers read", "messages stored (all queues)",
               "messages put per second over the last minute", "consumer groups reading it",
               "when its newest message was stored"]


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    queues: int
    permission: str
    messages: int
    put_tps: float | None
    groups: tuple[str, ...]
    last_stored_ms: int

    def cells(self, now: float | None = None) -> list[str]:
        return [self.name, str(self.queues), self.permission, f"{self.messages:,}",
                "-" if self.put_tps is None else f"{self.put_tps:,.1f}",
                ", ".join(self.groups) or "none yet", ago(self.last_stored_ms, now)]

    def sort_keys(self) -> list:
        """What each column sorts by (numbers as numbers)."""
        return [self.name, self.queues, self.permission, self.messages, self.put_tps or 0.0,
                len(self.groups), self.last_stored_ms]


def ago(timestamp_ms: int, now: float | None = None) -> str:
    """``12 s ago``, ``5 min ago``, ``3 h ago``, ``2 d ago``; ``never`` for 0."""
    if timestamp_ms <= 0:
        return "never"
    seconds = max(0.0, (time.time() if now is None else now) - timestamp_ms / 1000)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def permission_text(perms: set[int]) -> str:
    if len(perms) == 1:
        perm = next(iter(perms)) & 6
        return PERMISSIONS.get(perm, str(perm))
    return "mixed"


def topic_row(name: str, route: dict, stats: dict, groups: list[str],
              rate_points: list[tuple[float, float]] | None) -> TopicRow:
    """One row from a topic's route (queueDatas), its queue stats (minOffset, maxOffset,
    lastUpdateTimestamp per queue), the groups reading it and its (time, msg/s) points."""
    datas = route.get("queueDatas") or []
    queues = sum(max(int(q.get("readQueueNums", 0)), int(q.get("writeQueueNums", 0)))
                 for q in datas)
    perms = {int(q.get("perm", 6)) for q in datas}
    messages = sum(max(0, int(v.get("maxOffset", 0)) - int(v.get("minOffset", 0)))
                   for v in stats.values())
    last = max((int(v.get("lastUpdateTimestamp", 0)) for v in stats.values()), default=0)
    tps = None
    if rate_points:
        newest = rate_points[-1][0]
        recent = [rate for at, rate in rate_points if at > newest - 60]
        tps = sum(recent) / len(recent) if recent else None
    return TopicRow(name, queues, permission_text(perms) if perms else "-", messages, tps,
                    tuple(sorted(groups)), last)


def matches(row: TopicRow, text: str) -> bool:
    """The table's filter: every word appears in the topic's name or its groups."""
    haystack = (row.name + " " + " ".join(row.groups)).lower()
    return all(word in haystack for word in text.lower().split())
