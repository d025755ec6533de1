"""TopicConfigManager: the broker's topics (config/topics.json), system topics, auto-creation."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster.broker.json_config import AsideWrittenTable
from cluster.topic_validator import (
    AUTO_CREATE_TOPIC_KEY,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    broker_system_topics,
    is_system_topic,
    reply_topic,
)
from common.platform import file_names

log = logging.getLogger(__name__)

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict:
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, data: dict) -> TopicConfig:
        return cls(str(data["topicName"]), int(data.get("readQueueNums", 16)),
                   int(data.get("writeQueueNums", 16)), int(data.get("perm", 6)),
                   str(data.get("topicFilterType", "SINGLE_TAG")),
                   int(data.get("topicSysFlag", 0)), bool(data.get("order", False)))

    def __str__(self) -> str:
        # As RocketMQ logs one (TopicConfig.toString), not as a Python dict.
        perm = (("R" if self.readable else "-") + ("W" if self.writeable else "-")
                + ("X" if self.perm & PERM_INHERIT else "-"))
        return (f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
                f"writeQueueNums={self.write_queue_nums}, perm={perm}, "
                f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
                f"order={str(self.order).lower()}]")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class DataVersion:
    """``{"counter": n, "timestamp": ms}``: bumped on every change, compared by name servers."""

    def __init__(self, counter: int = 0, timestamp: int | None = None) -> None:
        self.counter = counter
        self.timestamp = int(time.time() * 1000) if timestamp is None else timestamp

    def next_version(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def to_json(self) -> dict:
        return {"counter": self.counter, "timestamp": self.timestamp}


class TopicConfigManager(AsideWrittenTable):
    """Topics of one broker, persisted to ``<store>/config/topics.json``."""

    TABLE_KEY = "topicConfigTable"

    def __init__(self, path: str, broker_config) -> None:
        self._init_writes(path)
        self.broker_config = broker_config
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._lock = threading.RLock()
        # Set when the store's file system ignores case (macOS and Windows by default): there
        # two topics that differ only in case would share one ConsumeQueue folder.
        self.names_ignore_case = False
        # Called after each change with whether an admin made it (``at_once``), not a send
        # creating a topic on its way.
        self.on_change: list[Callable[[bool], None]] = []
        self._add_system_topics()

    def _add_system_topics(self) -> None:
        cfg = self.broker_config
        system = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(BENCHMARK_TOPIC, 1024, 1024),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            TopicConfig(reply_topic(cfg.broker_cluster_name), 1, 1),
        ]
        if cfg.auto_create_topic_enable:
            system.append(TopicConfig(AUTO_CREATE_TOPIC_KEY, cfg.default_topic_queue_nums,
                                      cfg.default_topic_queue_nums,
                                      PERM_INHERIT | PERM_READ | PERM_WRITE))
        cluster_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.cluster_topic_enable else 0)
        system.append(TopicConfig(cfg.broker_cluster_name, 16, 16, cluster_perm))
        broker_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.broker_topic_enable else 0)
        system.append(TopicConfig(cfg.broker_name, 1, 1, broker_perm))
        for topic in system:
            self.table[topic.topic_name] = topic

    # -- persistence ------------------------------------------------------------------------
    def load(self) -> None:
        data = self.file.load()
        if not data:
            return
        version = data.get("dataVersion") or {}
        self.data_version = DataVersion(int(version.get("counter", 0)),
                                        int(version.get("timestamp", 0)))
        for value in (data.get("topicConfigTable") or {}).values():
            try:
                config = TopicConfig.from_json(value)
            except (KeyError, ValueError, TypeError):
                log.warning("skipping a malformed topic config in %s: %r", self.file.path, value)
                continue
            self.table[config.topic_name] = config

    def wrapper_json(self, names: list[str] | None = None) -> dict:
        """TopicConfigSerializeWrapper: what topics.json holds and registration sends (of
        ``names`` only, those that exist, when given)."""
        with self._lock:
            if names is None:
                table = {name: tc.to_json() for name, tc in sorted(self.table.items())}
            else:
                table = {name: tc.to_json() for name in names
                         if (tc := self.table.get(name)) is not None}
            return {"dataVersion": self.data_version.to_json(), "topicConfigTable": table}

    def _snapshot(self) -> tuple[dict, int]:
        with self._lock:  # (the snapshot and its number together: see next_sequence)
            return self.wrapper_json(), self.file.next_sequence()

    def _changed(self, *, at_once: bool = False) -> None:
        """A topic was created, updated or deleted: a new data version, written aside. An
        admin's change (``at_once``) asks for its write at once, even inside a batch, and is
        answered once it is on disk (:meth:`written_aside`); a topic created on the way
        (auto-creation) asks when its request's batch ends."""
        self.data_version.next_version()
        if at_once:
            self._aside.ask()
        else:
            self._batch.persist()
        for callback in self.on_change:
            callback(at_once)

    def replace_from_master(self, wrapper: dict) -> bool:
        """A slave's copy of its master's topics (every 10 s); returns whether anything changed."""
        version = wrapper.get("dataVersion") or {}
        incoming = DataVersion(int(version.get("counter", 0)), int(version.get("timestamp", 0)))
        if (incoming.counter, incoming.timestamp) == (self.data_version.counter,
                                                      self.data_version.timestamp):
            return False
        table = {}
        for value in (wrapper.get("topicConfigTable") or {}).values():
            try:
                config = TopicConfig.from_json(value)
            except (KeyError, ValueError, TypeError):
                continue
            table[config.topic_name] = config
        with self._lock:
            self.table = table
            self.data_version = incoming
        self.persist_aside()  # (every 10 s on the slave's event loop: never wait for the disk)
        return True

    # -- queries and updates ------------------------------------------------------------------
    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        """RocketMQ's system topics and this broker's own (its cluster's and broker's names,
        the cluster's reply topic): an admin may neither overwrite nor delete them."""
        cfg = self.broker_config
        return is_system_topic(topic, broker_system_topics(cfg.broker_cluster_name,
                                                           cfg.broker_name))

    def folder_problem(self, topic: str) -> str | None:
        """Why ``topic`` cannot have a ConsumeQueue folder in this store beside the topics there
        are (Windows' forbidden names; a name differing from another only in case where the
        file system ignores case), or None."""
        problem = file_names.name_problem(topic)
        if problem:
            return f"the topic cannot be stored on this platform: {problem}"
        if not self.names_ignore_case:
            return None
        with self._lock:
            if topic in self.table:
                return None
            folded = topic.casefold()
            other = next((t for t in self.table if t.casefold() == folded), None)
        if other is None:
            return None
        return (f"the topic {topic} differs from the topic {other} only in case, and this store's "
                "file system does not tell them apart")

    def update(self, config: TopicConfig) -> None:
        with self._lock:
            old = self.table.get(config.topic_name)
            self.table[config.topic_name] = config
            log.info("%s %s", "updated" if old else "created", config)
            self._changed(at_once=True)

    def delete(self, topic: str) -> bool:
        with self._lock:
            if self.table.pop(topic, None) is None:
                return False
            self._changed(at_once=True)
            return True

    def create_in_send_message_method(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from the ``default_topic`` template (``TBW102``), if allowed."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            template = self.table.get(default_topic)
            # debug, not warning: any client can ask for any topic, and one line per request
            # would let it fill the disk with the log; the client hears why (TOPIC_NOT_EXIST).
            if template is None:
                log.debug("cannot create topic %s: default topic %s does not exist",
                            topic, default_topic)
                return None
            perm = template.perm
            if default_topic == AUTO_CREATE_TOPIC_KEY and not self.broker_config.auto_create_topic_enable:
                perm = PERM_READ | PERM_WRITE
            if not perm & PERM_INHERIT:
                log.debug("cannot create topic %s: default topic %s is not inheritable",
                            topic, default_topic)
                return None
            queues = max(1, min(client_queue_nums, template.write_queue_nums))
            config = TopicConfig(topic, queues, queues, perm & ~PERM_INHERIT,
                                 topic_sys_flag=topic_sys_flag)
            self.table[topic] = config
            log.info("auto-created topic %s from %s: %s", topic, default_topic, config.to_json())
            self._changed()
            return config

    def create_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Create a retry, dead-letter or system topic if it does not exist yet; None, having
        created nothing, for a name this store cannot hold (:meth:`folder_problem`)."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            problem = self.folder_problem(topic)
            if problem:
                # debug: any client can name any group, and a line per request fills the log
                log.debug("not creating %s: %s", topic, problem)
                return None
            config = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
            self.table[topic] = config
            self._changed()
            return config
