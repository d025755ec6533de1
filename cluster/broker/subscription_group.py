"""SubscriptionGroupManager: consumer group settings (config/subscriptionGroup.json).

A group's name becomes folder names: its retry and dead-letter topics (``%RETRY%<group>``,
``%DLQ%<group>``) are ConsumeQueue folders like any topic's. So a group this store could not
give them (a character Windows refuses; a name differing from another group's only in case,
where the file system ignores case and both would share one folder) is never created here: it
is refused with the reason where it would be made, rather than wedging dispatch on a folder
that cannot exist, or mixing two groups' retried messages in one queue."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from cluster.broker.json_config import AsideWrittenTable
from cluster.broker.topic_config import DataVersion
from cluster.remoting.body import JsonBody
from cluster.remoting.header import HeaderError
from cluster.topic_validator import (
    DLQ_GROUP_TOPIC_PREFIX,
    MAX_TOPIC_QUEUE_NUMS,
    RETRY_GROUP_TOPIC_PREFIX,
    validate_group_name,
)
from common.platform import file_names


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # 5.x: a FIFO group (POP hands out a queue's next message only after the previous is acked)
    consume_message_orderly: bool = False

    def to_json(self) -> dict:
        return {"brokerId": self.broker_id, "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": self.consume_from_min_enable,
                "groupName": self.group_name,
                "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
                "consumeMessageOrderly": self.consume_message_orderly,
                "retryMaxTimes": self.retry_max_times, "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly}

    @classmethod
    def from_json(cls, data: dict) -> SubscriptionGroupConfig:
        return cls(str(data["groupName"]), bool(data.get("consumeEnable", True)),
                   bool(data.get("consumeFromMinEnable", True)),
                   bool(data.get("consumeBroadcastEnable", True)),
                   int(data.get("retryQueueNums", 1)), int(data.get("retryMaxTimes", 16)),
                   int(data.get("brokerId", 0)), int(data.get("whichBrokerWhenConsumeSlowly", 1)),
                   bool(data.get("notifyConsumerIdsChangedEnable", True)),
                   bool(data.get("consumeMessageOrderly", False)))


def checked_subscription_group(body: JsonBody) -> SubscriptionGroupConfig:
    """A group config from an UPDATE_AND_CREATE_SUBSCRIPTIONGROUP body, every field checked
    (raises HeaderError): a string "false" must not read as true, and retry queues become a
    topic's queues."""
    name = body.text("groupName", max_length=255)
    problem = validate_group_name(name)
    if problem:
        raise HeaderError(problem)
    return SubscriptionGroupConfig(
        name, body.boolean("consumeEnable", True), body.boolean("consumeFromMinEnable", True),
        body.boolean("consumeBroadcastEnable", True),
        body.integer("retryQueueNums", 1, minimum=0, maximum=MAX_TOPIC_QUEUE_NUMS),
        body.integer("retryMaxTimes", 16, minimum=-1),
        body.integer("brokerId", 0, bits=64, minimum=0),
        body.integer("whichBrokerWhenConsumeSlowly", 1, bits=64, minimum=0),
        body.boolean("notifyConsumerIdsChangedEnable", True),
        body.boolean("consumeMessageOrderly", False))


class SubscriptionGroupManager(AsideWrittenTable):
    TABLE_KEY = "subscriptionGroupTable"

    def __init__(self, path: str, auto_create: bool) -> None:
        self._init_writes(path)
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self._lock = threading.Lock()
        # Whether the store's file system takes "a" and "A" for one name (the broker asks it),
        # and the broker's check of a new topic's folder (TopicConfigManager.folder_problem).
        self.names_ignore_case = False
        self.topic_folder_problem: Callable[[str], str | None] | None = None
        for group in ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                      "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                      "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS"):
            self.table[group] = SubscriptionGroupConfig(group)

    def load(self) -> None:
        data = self.file.load()
        if not data:
            return
        for value in (data.get("subscriptionGroupTable") or {}).values():
            try:
                config = SubscriptionGroupConfig.from_json(value)
            except (KeyError, ValueError, TypeError):
                continue
            self.table[config.group_name] = config

    def wrapper_json(self) -> dict:
        with self._lock:
            return self._wrapper()

    def _wrapper(self) -> dict:
        return {"dataVersion": self.data_version.to_json(),
                "subscriptionGroupTable": {n: c.to_json() for n, c in sorted(self.table.items())}}

    def _snapshot(self) -> tuple[dict, int]:
        with self._lock:  # (the snapshot and its number together: see next_sequence)
            return self._wrapper(), self.file.next_sequence()

    def replace_from_master(self, wrapper: dict) -> bool:
        """A slave's copy of its master's groups (every 10 s); returns whether anything changed."""
        version = wrapper.get("dataVersion") or {}
        incoming = (int(version.get("counter", 0)), int(version.get("timestamp", 0)))
        if incoming == (self.data_version.counter, self.data_version.timestamp):
            return False
        table = {}
        for value in (wrapper.get("subscriptionGroupTable") or {}).values():
            try:
                config = SubscriptionGroupConfig.from_json(value)
            except (KeyError, ValueError, TypeError):
                continue
            table[config.group_name] = config
        with self._lock:
            self.table = table
            self.data_version = DataVersion(*incoming)
        self.persist_aside()  # (every 10 s on the slave's event loop: never wait for the disk)
        return True

    def folder_problem(self, group: str) -> str | None:
        """Why a new group ``group`` could not have its retry and dead-letter topics in this
        store beside the groups there are, or None (see the module's docstring). A group the
        table holds already is taken as it is."""
        with self._lock:
            if group in self.table:
                return None
        problem = file_names.name_problem(RETRY_GROUP_TOPIC_PREFIX + group)
        if problem:
            return f"the group {group} cannot be stored on this platform: its retry topic {problem}"
        if self.names_ignore_case:
            with self._lock:
                folded = group.casefold()
                other = next((name for name in self.table if name.casefold() == folded), None)
            if other is not None:
                return (f"the group {group} differs from the group {other} only in case, and "
                        "this store's file system would give their retry topics one folder")
        if self.topic_folder_problem is not None:  # (a topic already in the folder it needs)
            for topic in (RETRY_GROUP_TOPIC_PREFIX + group, DLQ_GROUP_TOPIC_PREFIX + group):
                problem = self.topic_folder_problem(topic)
                if problem:
                    return f"the group {group} cannot have its topic {topic}: {problem}"
        return None

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation is on (and the store
        can hold its topics: :meth:`folder_problem`)."""
        config = self.table.get(group)
        if config is None and self.auto_create and group and self.folder_problem(group) is None:
            with self._lock:
                config = self.table.setdefault(group, SubscriptionGroupConfig(group))
                self.data_version.next_version()
            # (written aside: a heartbeat is answered without waiting for the disk; inside a
            # request's batch, asked for at the request's end)
            self._batch.persist()
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """An admin's change: its write asked for at once, batch or none (its handler answers
        once it is on disk: :meth:`written_aside`)."""
        with self._lock:
            self.table[config.group_name] = config
            self.data_version.next_version()
        self._aside.ask()

    def delete(self, group: str) -> bool:
        with self._lock:
            gone = self.table.pop(group, None) is not None
            if gone:
                self.data_version.next_version()
        if gone:
            self._aside.ask()
        return gone
