"""The 5.x clients a proxy knows: who they are, what they said in their settings, and the
Telemetry stream that reaches each of them (for commands the server starts: transaction checks,
thread stacks, verify-message)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

CLIENT_EXPIRY = 120.0  # seconds without a heartbeat or a call before a client is forgotten


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
    def __init__(self) -> None:
        self.clients: dict[str, Client] = {}

    def touch(self, client_id: str, language: str = "", version: str = "") -> Client:
        client = self.clients.get(client_id)
        if client is None:
            client = self.clients[client_id] = Client(client_id, language, version)
        client.last_seen = time.monotonic()
        if language:
            client.language = language
        if version:
            client.version = version
        return client

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
