"""The Consumer groups table's rows, without Qt: per group its lag, consume rate, clients and
how they consume (4.x push or pull, 5.x POP), and messages 5.x consumers hold invisible."""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = ["group", "lag", "consumed/s", "clients", "consumes by", "in flight", "retries"]
COLUMN_TIPS = ["the consumer group's name", "messages stored but not yet consumed",
               "messages consumed per second over the last minute", "clients online",
               "how its clients consume: 4.x push or pull, 5.x POP, broadcast",
               "messages 5.x consumers hold invisible until they ack them",
               "how often a failed message is retried before it becomes a dead letter"]


@dataclass(frozen=True, slots=True)
class GroupRow:
    name: str
    lag: int
    consume_tps: float | None
    clients: int
    how: str
    in_flight: int
    retry_max_times: int

    def cells(self) -> list[str]:
        return [self.name, f"{self.lag:,}", "-" if self.consume_tps is None else
                f"{self.consume_tps:,.1f}", str(self.clients) if self.clients else "offline",
                self.how, f"{self.in_flight:,}", str(self.retry_max_times)]

    def sort_keys(self) -> list:
        return [self.name, self.lag, self.consume_tps or 0.0, self.clients, self.how,
                self.in_flight, self.retry_max_times]


def consume_kind(connections: dict) -> str:
    """How a group's online clients consume: 4.x push / pull, 5.x POP, or a mix."""
    kinds = set()
    for client in connections.get("connectionSet") or []:
        kind = client.get("consumeType") or connections.get("consumeType") or ""
        kinds.add({"CONSUME_POP": "5.x POP", "CONSUME_ACTIVELY": "4.x pull",
                   "CONSUME_PASSIVELY": "4.x push"}.get(kind, kind or "?"))
    if not kinds:
        return "-"
    model = connections.get("messageModel", "CLUSTERING")
    text = " + ".join(sorted(kinds))
    return text + (" (broadcast)" if model == "BROADCASTING" else "")


def rate(points) -> float | None:
    """Messages a second over the last minute, from (time, running total) points."""
    points = list(points or [])
    if len(points) < 2:
        return None
    newest = points[-1][0]
    recent = [p for p in points if p[0] >= newest - 60] or points[-2:]
    if len(recent) < 2:
        recent = points[-2:]
    (t1, n1), (t2, n2) = recent[0], recent[-1]
    return max(0.0, (n2 - n1) / (t2 - t1)) if t2 > t1 else None


def group_row(name: str, config: dict, stats: dict, connections: dict,
              consumed_points) -> GroupRow:
    lag = sum(max(0, v.get("brokerOffset", 0) - max(v.get("consumerOffset", 0), 0))
              for v in stats.values())
    in_flight = sum(v.get("inFlight", 0) for v in stats.values())
    return GroupRow(name, lag, rate(consumed_points), len(connections.get("connectionSet") or []),
                    consume_kind(connections), in_flight, int(config.get("retryMaxTimes", 16)))
