"""How the console writes values for people (no Qt): message bodies that may be binary, a
message's properties, a broker group's addresses, and counts with units."""

from __future__ import annotations

import math
import string
import time

_PRINTABLE = set(string.printable) - set("\x0b\x0c")


def body_preview(body: bytes, limit: int = 80) -> str:
    """A one-line view of a body: its text when it is UTF-8 text, else what it is and its first
    bytes in hex (never replacement characters)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c in _PRINTABLE or ord(c) > 127 for c in text[:limit * 4]):
        flat = " ".join(text.split())
        return flat if len(flat) <= limit else flat[: limit - 1] + "…"
    shown = body[: max(limit // 3, 1)].hex(" ")
    return f"binary, {len(body):,} bytes: {shown}{' …' if len(body) > limit // 3 else ''}"


def is_text(body: bytes) -> bool:
    """Whether a body reads as UTF-8 text (what the detail shows as text, else as hex)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c in _PRINTABLE or ord(c) > 127 for c in text)


def properties_text(properties: dict[str, str]) -> str:
    """A message's properties one per line, ``NAME = value``, in name order."""
    if not properties:
        return "(none)"
    width = max(len(k) for k in properties)
    return "\n".join(f"  {k:<{width}} = {v}" for k, v in sorted(properties.items()))


def broker_addrs_text(name: str, addrs: dict) -> str:
    """``broker-a: master 127.0.0.1:10911, slave 1 127.0.0.1:10921`` from a route's brokerAddrs."""
    parts = []
    for broker_id, address in sorted(((int(k), v) for k, v in addrs.items())):
        parts.append(f"master {address}" if broker_id == 0 else f"slave {broker_id} {address}")
    return f"{name}: " + (", ".join(parts) if parts else "no node registered")


def count(value: float | None, unit: str = "") -> str:
    """A count for people: thousands separated, never an SI prefix ("1,250 msg/s", not
    "1.25 kmsg/s")."""
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 10 or float(value).is_integer() else f"{value:,.1f}"
    return f"{text} {unit}".strip()


def plural(number: int, word: str, many: str | None = None) -> str:
    """``1 master``, ``2 masters`` (``many`` for irregular plurals)."""
    return f"{number:,} {word if number == 1 else (many or word + 's')}"


# A node's state and health as a colour people read at a glance (the view paints the cells).
STATE_COLORS = {"running": "#2e7d32", "external": "#2e7d32", "paused": "#ef6c00",
                "stopped": "#757575", "died": "#c62828"}
HEALTH_COLORS = {"ok": "#2e7d32", "not answering": "#c62828"}


def state_color(state: str) -> str | None:
    return STATE_COLORS.get(state)


def health_color(health: str) -> str | None:
    return HEALTH_COLORS.get(health)


def state_words(state: str) -> str:
    """What a state means, for a tooltip."""
    return {"running": "running and answering its pid", "paused": "paused with SIGSTOP: it "
            "answers nobody until resumed", "stopped": "stopped on purpose",
            "died": "died: it was not stopped by RocketDesk (see its last log lines below)",
            "external": "run elsewhere; RocketDesk watches it over the protocol"}.get(state, state)


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f"]


class ColorRegistry:
    """One colour per name for a whole session (a broker keeps its colour in every chart, and
    when others come and go), given out in the order names are first seen."""

    def __init__(self, palette: list[str] | None = None) -> None:
        self.palette = palette or PALETTE
        self.assigned: dict[str, str] = {}

    def color(self, name: str) -> str:
        found = self.assigned.get(name)
        if found is None:
            found = self.assigned[name] = self.palette[len(self.assigned) % len(self.palette)]
        return found


def thin_labels(labels: list[str], most: int = 8) -> list[str]:
    """Axis labels that do not collide: every k-th one kept (the others blank) so that at most
    ``most`` show."""
    if len(labels) <= most:
        return labels
    step = -(-len(labels) // most)
    return [label if index % step == 0 else "" for index, label in enumerate(labels)]


def latency_bucket_label(bucket: str) -> str:
    """RocketMQ's put-latency bucket (``[<=0ms]``, ``[10~50ms]``, ``[500ms~1s]``, ``[10s~]``)
    as its upper bound, short enough that all thirteen fit under a chart: ``0``, ``≤50`` (ms),
    ``≤1s``, ``>10s``."""
    inner = bucket.strip("[]")
    if inner.startswith("<="):
        label = inner[2:]
    else:
        low, _, high = inner.partition("~")  # the upper bound carries its unit in every bucket
        label = "≤" + high if high else ">" + low
    # Milliseconds unmarked (the axis says so), seconds marked: "≤100" fits a bar's width.
    return label[:-2] if label.endswith("ms") else label


def readout(x: float, series: list[tuple[str, list[float], list[float]]], unit: str = "") -> str:
    """What a chart's hover line says at ``x`` (seconds ago): each series' value at the sample
    nearest ``x`` (gaps and series without a sample within 3 s left out), largest first."""
    values = []
    for name, xs, ys in series:
        best = None
        for px, py in zip(xs, ys, strict=False):
            if math.isnan(py):  # a gap in the line
                continue
            if best is None or abs(px - x) < abs(best[0] - x):
                best = (px, py)
        if best is not None and abs(best[0] - x) <= 3:
            values.append((best[1], name))
    if not values:
        return ""
    values.sort(key=lambda item: -item[0])
    when = f"{-x:,.0f} s ago" if x < -0.5 else "now"
    return f"{when}: " + " · ".join(f"{name} {count(value, unit)}" for value, name in values)


def trace_timeline(events, when=None) -> list[str]:
    """A message's trace as a timeline: the first event's time, then every event with how long
    after the first it happened, in time order (events without a time last). ``when`` writes
    a timestamp (the inspector's format by default)."""
    if not events:
        return ["  no trace (tracing was off for it)"]
    if when is None:
        from storage.inspector import format_timestamp as when
    timed = sorted((e for e in events if e.timestamp), key=lambda e: e.timestamp)
    untimed = [e for e in events if not e.timestamp]
    lines = [f"  from {when(timed[0].timestamp)}"] if timed else []
    for event in timed + untimed:
        at = f"+{event.timestamp - timed[0].timestamp:,} ms" if event.timestamp else "(no time)"
        outcome = "" if event.success is None else (" ok" if event.success else " FAILED")
        cost = "" if event.cost_ms is None else f", took {event.cost_ms} ms"
        lines.append(f"  {at:>12}  {event.kind:<9} {event.group}{outcome}{cost} "
                     f"{event.detail}".rstrip())
    return lines


def table_time(ms: int | None) -> str:
    """A store time short enough for a table cell: local date and time to the millisecond,
    the zone left to the column's tooltip (``local_zone``) and the detail."""
    if not ms or ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def local_zone() -> str:
    """This computer's time zone, as the tables' time columns are in it."""
    return time.strftime("%Z (UTC%z)")
