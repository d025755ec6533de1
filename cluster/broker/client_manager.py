"""Who is connected: producers and consumers by group, from their heartbeats.

Mirrors RocketMQ's ``ProducerManager`` and ``ConsumerManager``: a heartbeat registers the
connection under its groups with the client id, language and version; a connection that closes
or stays silent for 120 s leaves every group. Consumers of a group are told when its membership
changes (NOTIFY_CONSUMER_IDS_CHANGED) so they rebalance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

CHANNEL_EXPIRED_SECONDS = 120
POP = "CONSUME_POP"


@dataclass(slots=True)
class ClientChannelInfo:
    connection: object
    client_id: str
    language: str
    version: int
    last_update: float = field(default_factory=time.monotonic)
    consume_type: str = ""  # CONSUME_POP: a 5.x client heartbeated by a proxy


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    expression_type: str = "TAG"
    sub_version: int = 0
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict) -> SubscriptionData:
        return cls(str(data.get("topic", "")), str(data.get("subString") or "*"),
                   str(data.get("expressionType") or "TAG"), int(data.get("subVersion") or 0),
                   [str(t) for t in data.get("tagsSet") or []],
                   [int(c) for c in data.get("codeSet") or []])

    def to_json(self) -> dict:
        return {"classFilterMode": False, "codeSet": self.code_set,
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": self.tags_set, "topic": self.topic}


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    # By (connection, client id): a proxy's one connection carries every 5.x client behind it.
    channels: dict[tuple[object, str], ClientChannelInfo] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        """The clients that rebalance queues among themselves (POP clients need no queues)."""
        return sorted(info.client_id for info in self.channels.values()
                      if info.consume_type != POP)

    def rebalancing(self) -> list[ClientChannelInfo]:
        return [info for info in self.channels.values() if info.consume_type != POP]


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(self, group: str, channel: ClientChannelInfo, consume_type: str,
                 message_model: str, consume_from_where: str,
                 subscriptions: list[SubscriptionData]) -> bool:
        """Record a consumer heartbeat; True when the group's members changed."""
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        if consume_type != POP or not info.channels:
            # A group's 4.x clients say how it consumes; 5.x ones behind a proxy do not change it.
            info.consume_type, info.message_model = consume_type, message_model
            info.consume_from_where = consume_from_where
        channel.consume_type = consume_type
        key = (channel.connection, channel.client_id)
        changed = key not in info.channels
        if consume_type != POP:
            # One 4.x client a connection: a new client id on it replaces the old one.
            for old in [k for k in info.channels if k[0] is channel.connection and k != key]:
                del info.channels[old]
                changed = True
        info.channels[key] = channel
        # As RocketMQ's updateSubscription: a topic keeps the newest subscription any member
        # sent (the highest subVersion; a Java client's is its start time). Taking whichever
        # heartbeat came last made pulls of the newer members, which carry their own
        # subVersion, refused as SUBSCRIPTION_NOT_LATEST whenever an older member spoke last.
        old = info.subscriptions
        info.subscriptions = {
            s.topic: old[s.topic] if s.topic in old and old[s.topic].sub_version > s.sub_version
            else s for s in subscriptions}
        if any((c.consume_type == POP) != (consume_type == POP)
               for k, c in info.channels.items() if k != key):
            # A proxy's heartbeat for its 5.x members names only their topics; in a group that
            # also has 4.x members it must not drop theirs (their %RETRY% topic above all), or
            # their pulls are refused as SUBSCRIPTION_NOT_EXIST until they heartbeat again; nor
            # may a 4.x heartbeat drop the 5.x members' topics from the group's consume stats.
            for topic, subscription in old.items():
                info.subscriptions.setdefault(topic, subscription)
        return changed

    def unregister(self, group: str, connection: object, client_id: str | None = None) -> bool:
        """Forget the connection's clients in ``group`` (or only ``client_id``)."""
        info = self.groups.get(group)
        if info is None:
            return False
        gone = [k for k in info.channels
                if k[0] is connection and (client_id is None or k[1] == client_id)]
        for key in gone:
            del info.channels[key]
        if not info.channels:
            del self.groups[group]
        return bool(gone)

    def on_connection_closed(self, connection: object) -> list[str]:
        """Groups the connection left."""
        return [g for g in list(self.groups) if self.unregister(g, connection)]

    def scan_not_active(self, now: float | None = None) -> list[tuple[str, str]]:
        now = time.monotonic() if now is None else now
        gone = []
        for group, info in list(self.groups.items()):
            for (connection, client_id), channel in list(info.channels.items()):
                if now - channel.last_update > CHANNEL_EXPIRED_SECONDS:
                    self.unregister(group, connection, client_id)
                    gone.append((group, client_id))
        return gone

    def client_ids(self) -> set[str]:
        """Every consumer client heartbeating here, once however many groups it is in."""
        return {info.client_id for group in self.groups.values() for info in group.channels.values()}

    def find(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def find_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        info = self.groups.get(group)
        if info is None:
            return None
        return next((c for c in info.channels.values() if c.client_id == client_id), None)

    def groups_of_topic(self, topic: str) -> list[str]:
        return sorted(g for g, info in self.groups.items() if topic in info.subscriptions)


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[object, ClientChannelInfo]] = {}

    def register(self, group: str, channel: ClientChannelInfo) -> None:
        self.groups.setdefault(group, {})[channel.connection] = channel

    def unregister(self, group: str, connection: object) -> None:
        channels = self.groups.get(group)
        if channels is not None:
            channels.pop(connection, None)
            if not channels:
                del self.groups[group]

    def on_connection_closed(self, connection: object) -> None:
        for group in list(self.groups):
            self.unregister(group, connection)

    def scan_not_active(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for group, channels in list(self.groups.items()):
            for connection, channel in list(channels.items()):
                if now - channel.last_update > CHANNEL_EXPIRED_SECONDS:
                    self.unregister(group, connection)

    def client_ids(self) -> set[str]:
        """Every producer client heartbeating here, once however many groups it is in."""
        return {info.client_id for channels in self.groups.values() for info in channels.values()}

    def any_channel(self, group: str) -> ClientChannelInfo | None:
        """A live producer of the group (transaction check-back asks one of them)."""
        channels = self.groups.get(group) or {}
        live = [c for c in channels.values() if getattr(c.connection, "is_open", True)]
        return live[0] if live else None
