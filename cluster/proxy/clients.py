"""The 5.x clients a proxy knows: who they are, what they said in their settings, and the
Telemetry stream that reaches each of them (for commands the server starts: transaction checks,
thread stacks, verify-message)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

CLIENT_EXPIRY = 120.0  # seconds without a heartbeat or a call before a client is forgotten
# Clients a proxy keeps at once: every call may name a new client id, and a consumer's open
# Telemetry stream is heartbeated to every broker every 10 s, so invented ids must not grow
# either without bound. Past it, a new client's Telemetry is refused (TOO_MANY_REQUESTS) and
# its other calls are served without being remembered.
MAX_CLIENTS = 10_000
# Commands waiting for a client to read them from its Telemetry stream. A client that sends
# settings and never reads its answers is not read from any more once this many wait (gRPC's
# flow control then holds it back); a command the server starts (a transaction check, a
# verify) is dropped past it, as if the client had not answered: the broker asks again later.
OUTBOX_LIMIT = 64


@dataclass(slots=True)
class Client:
    client_id: str
    language: str = ""
    version: str = ""
    client_type: int = 0
    group: str = ""
    topics: list[str] = field(default_factory=list)
    subscriptions: dict[str, tuple[int, str]] = field(default_factory=dict)  # topic -> (type, exp)
    last_seen: float = field(default_factory=time.monotonic)
    outbox: asyncio.Queue | None = None  # commands for its Telemetry stream, while it is open


class ClientRegistry:
    def __init__(self, limit: int = MAX_CLIENTS) -> None:
        self.clients: dict[str, Client] = {}
        self.limit = limit
        self._expired_at = 0.0

    def touch(self, client_id: str, language: str = "", version: str = "") -> Client | None:
        """The client, remembered from now on; None for a new one while ``limit`` are known
        (after forgetting the silent ones, at most once a second)."""
        client = self.clients.get(client_id)
        if client is None:
            if len(self.clients) >= self.limit:
                now = time.monotonic()
                if now - self._expired_at >= 1.0:
                    self._expired_at = now
                    self.expire(now)
                if len(self.clients) >= self.limit:
                    return None
            client = self.clients[client_id] = Client(client_id, language, version)
        client.last_seen = time.monotonic()
        if language:
            client.language = language
        if version:
            client.version = version
        return client

    @staticmethod
    def offer(client: Client, command) -> bool:
        """Queue a command the server starts for the client's Telemetry stream; False when
        the stream is closed or the client is not reading it."""
        outbox = client.outbox
        if outbox is None:
            return False
        try:
            outbox.put_nowait(command)
        except asyncio.QueueFull:
            return False
        return True

    def forget(self, client_id: str) -> None:
        self.clients.pop(client_id, None)

    def expire(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        gone = [c.client_id for c in self.clients.values()
                if c.outbox is None and now - c.last_seen > CLIENT_EXPIRY]
        for client_id in gone:
            del self.clients[client_id]
        return gone

    def producers_of(self, topic: str) -> list[Client]:
        """Clients whose settings publish ``topic`` and whose Telemetry stream is open."""
        return [c for c in self.clients.values() if c.outbox is not None and topic in c.topics]

    def in_group(self, group: str) -> list[Client]:
        return [c for c in self.clients.values() if c.group == group]
