"""Receipt handles the proxy keeps alive for 5.x push consumers (RocketMQ's receipt-handle
manager): a ReceiveMessage with ``auto_renew`` hands out messages invisible for 60 s, and until
the client acks, nacks or forwards each one, the proxy changes its invisible time again shortly
before it runs out (1 min, 3 min, 5 min, 10 min, 30 min, then every hour), for at most 3 hours.
A push consumer's messages can wait in its cache, or in a slow listener, far longer than one
invisible time; without this they came back while still being worked on.

Each change gives the message a new handle; the client still holds the first. So its ack, nack
or forward is translated here to the current handle (sans I/O: the service does the changes).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cluster.pop_handle import ExtraInfo

AUTO_RENEW_INVISIBLE_MS = 60_000  # proxyConfig.defaultInvisibleTimeMills
RENEW_AHEAD_MS = 10_000  # renew a handle this long before it runs out
RENEW_PERIOD_S = 5.0  # how often the handles are looked at
RENEW_MAX_MS = 3 * 3600 * 1000  # then the message is let go back, as a retry
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
RELEASE_MS = 1_000  # a gone client's messages go back this soon
MAX_RENEWING = 200_000  # handles kept at once (past it, new ones are not renewed)


@dataclass(slots=True)
class Renewal:
    client_id: str
    group: str
    topic: str
    current: ExtraInfo
    received_ms: int
    renewed: int = 0
    changing: asyncio.Future | None = field(default=None)  # a change in flight

    def next_invisible_ms(self) -> int:
        return RENEW_STEPS_MS[min(self.renewed, len(RENEW_STEPS_MS) - 1)]


class HandleRenewals:
    """(group, the handle the client got) -> the message's renewal."""

    def __init__(self, limit: int = MAX_RENEWING) -> None:
        self.table: dict[tuple[str, str], Renewal] = {}
        self.limit = limit

    def add(self, client_id: str, group: str, topic: str, handle: str, extra: ExtraInfo,
            now_ms: int) -> None:
        if len(self.table) < self.limit:
            self.table[(group, handle)] = Renewal(client_id, group, topic, extra, now_ms)

    async def take(self, group: str, handle: str) -> ExtraInfo | None:
        """Stop renewing the message the client's ``handle`` names; its current handle, or
        None when the proxy does not renew it. Waits for a change in flight: acked with the
        handle before it, the ack would miss the message."""
        renewal = self.table.pop((group, handle), None)
        if renewal is None:
            return None
        if renewal.changing is not None:
            await asyncio.shield(renewal.changing)
        return renewal.current

    def due(self, now_ms: int) -> list[tuple[tuple[str, str], Renewal]]:
        """The renewals whose handle runs out within RENEW_AHEAD_MS and that no change holds."""
        return [(key, r) for key, r in self.table.items()
                if r.changing is None and r.current.deadline - now_ms <= RENEW_AHEAD_MS]
