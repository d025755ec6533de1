"""The Overview tab's content, computed without Qt: the cluster's health at a glance and the
alerts that need someone, each naming the tab that explains it.

Inputs are what the cluster model already samples every second (the supervisor's node rows, the
brokers' runtime figures) and every 5 s (each group's total lag, each topic's stored messages).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# RocketMQ's defaults: past diskMaxUsedSpaceRatio a broker deletes expired CommitLog files
# whatever the hour; past diskSpaceWarningLevelRatio it refuses writes (DISK_FULL).
DISK_WARNING_RATIO = 0.75
DISK_FULL_RATIO = 0.90
HA_LAG_WARNING_BYTES = 64 * 1024 * 1024
LAG_WARNING_MESSAGES = 10_000
SPARK_SECONDS = 300


@dataclass(frozen=True, slots=True)
class Alert:
    severity: str  # "error" (something is down) or "warning" (something needs a look)
    text: str
    view: str  # the tab that explains it: "cluster", "charts", "groups", "topics"
    subject: str = ""  # the node, group or topic it is about (the tab selects it)


@dataclass(slots=True)
class Overview:
    nodes_up: int = 0
    nodes_total: int = 0
    masters: int = 0
    slaves: int = 0
    proxies: int = 0
    topics: int = 0
    messages_stored: int = 0
    disk_bytes: int = 0
    disk_ratio: float | None = None  # the fullest broker disk, 0..1
    put_tps: float = 0.0
    get_tps: float = 0.0
    put_history: list[float] = field(default_factory=list)  # total put TPS, a point a second
    worst_lag: tuple[str, int] | None = None  # (group, messages)
    worst_ha_lag: tuple[str, int] | None = None  # (slave's group, bytes)
    timers_pending: int = 0
    pop_in_flight: int = 0
    transactions_open: int = 0
    transactions_checking: int = 0  # open past transactionTimeOut: their producers are asked
    # Clients heartbeating: the most any one broker sees (a client talks to every broker it
    # uses, so a sum would count it again at each).
    producers: int = 0
    consumers: int = 0
    alerts: list[Alert] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not any(a.severity == "error" for a in self.alerts)


def _latest(points) -> float | None:
    return points[-1][1] if points else None


def build_overview(nodes: list[dict], samples: dict, lag: dict, topic_totals: dict) -> Overview:
    """``samples``: node name -> deque of the model's per-second dicts; ``lag``: group ->
    deque of (time, total lag); ``topic_totals``: topic -> deque of (time, messages stored)."""
    view = Overview()
    alerts = view.alerts
    for row in nodes:
        kind, state = row.get("kind"), row.get("state")
        view.nodes_total += 1
        running = state in ("running", "external")
        if running and row.get("health") == "ok":
            view.nodes_up += 1
        if kind == "broker":
            if str(row.get("role", "")).startswith("SLAVE"):
                view.slaves += 1
            else:
                view.masters += 1
        elif kind == "proxy":
            view.proxies += 1
        view.disk_bytes += row.get("diskBytes") or 0
        view.timers_pending += int(row.get("timersPending") or 0)
        view.pop_in_flight += int(row.get("popInFlight") or 0)
        view.transactions_open += int(row.get("transactionsOpen") or 0)
        checking = int(row.get("transactionsChecking") or 0)
        view.transactions_checking += checking
        view.producers = max(view.producers, int(row.get("producers") or 0))
        view.consumers = max(view.consumers, int(row.get("consumers") or 0))
        name = row.get("name", "?")
        if checking:
            alerts.append(Alert("warning", f"{checking:,} transaction{'s' if checking != 1 else ''} "
                                           f"on {name} not committed or rolled back past "
                                           "transactionTimeOut: the broker asks their producers",
                                "topics", "transactions"))
        if state == "died":
            alerts.append(Alert("error", f"{name} died; its last log lines are on the Cluster tab",
                                "cluster", name))
        elif state == "stopped":
            alerts.append(Alert("error", f"{name} is stopped", "cluster", name))
        elif state == "paused":
            alerts.append(Alert("warning", f"{name} is paused (SIGSTOP): it answers nobody",
                                "cluster", name))
        elif running and row.get("health") not in ("ok", "-", None):
            alerts.append(Alert("error", f"{name} does not answer", "cluster", name))
    history: dict[int, float] = {}
    for name, points in samples.items():
        if not points:
            continue
        last = points[-1]
        if not str(last.get("role", "")).endswith("MASTER"):
            continue
        view.put_tps += last.get("putTps") or 0.0
        view.get_tps += last.get("getTps") or 0.0
        for point in list(points)[-SPARK_SECONDS:]:
            second = int(point["time"])
            history[second] = history.get(second, 0.0) + (point.get("putTps") or 0.0)
        ratio = last.get("diskRatio")
        if ratio is not None:
            view.disk_ratio = max(view.disk_ratio or 0.0, ratio)
            if ratio > DISK_FULL_RATIO:
                alerts.append(Alert("error", f"{name}'s disk is {ratio:.0%} full: past "
                                             f"{DISK_FULL_RATIO:.0%} it refuses writes", "cluster", name))
            elif ratio > DISK_WARNING_RATIO:
                alerts.append(Alert("warning", f"{name}'s disk is {ratio:.0%} full: past "
                                               f"{DISK_WARNING_RATIO:.0%} expired files are deleted "
                                               f"early, and writes stop past {DISK_FULL_RATIO:.0%}",
                                    "cluster", name))
        ha_lag = last.get("haLag")
        if ha_lag and (view.worst_ha_lag is None or ha_lag > view.worst_ha_lag[1]):
            view.worst_ha_lag = (name, int(ha_lag))
    view.put_history = [history[s] for s in sorted(history)]
    if view.worst_ha_lag and view.worst_ha_lag[1] > HA_LAG_WARNING_BYTES:
        name, behind = view.worst_ha_lag
        alerts.append(Alert("warning", f"the slave of {name} is {behind / 2**20:,.0f} MiB behind",
                            "charts", name))
    for group, points in lag.items():
        total = _latest(points)
        if total is None:
            continue
        if view.worst_lag is None or total > view.worst_lag[1]:
            view.worst_lag = (group, int(total))
    if view.worst_lag and view.worst_lag[1] > LAG_WARNING_MESSAGES:
        group, behind = view.worst_lag
        alerts.append(Alert("warning", f"group {group} is {behind:,} messages behind", "groups",
                            group))
    for topic, points in sorted(topic_totals.items()):
        stored = int(_latest(points) or 0)
        if topic.startswith("%DLQ%"):
            if stored:
                group = topic[len("%DLQ%"):]
                alerts.append(Alert("warning", f"{stored:,} dead letters of group {group} wait",
                                    "groups", group))
            continue
        if topic.startswith("%RETRY%"):
            continue
        view.topics += 1
        view.messages_stored += stored
    alerts.sort(key=lambda a: (a.severity != "error", a.text))
    return view
