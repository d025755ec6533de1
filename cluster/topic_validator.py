"""RocketMQ's TopicValidator: the system topics, which names are valid, which topics a client
may not send to. Shared by the broker, which enforces it, and the console, which hides system
topics unless asked."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection

AUTO_CREATE_TOPIC_KEY = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # (the timer's, POP's revive topics, ...)
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
_VALID_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]+")  # (fullmatch: "$" would let a final "\n" in)
# Clients may not send straight into these.
NOT_ALLOWED_SEND_TOPICS = {SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TIMER_TOPIC}
# TopicValidator's SYSTEM_TOPIC_SET as it starts; a broker adds its own names to it
# (broker_system_topics).
SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC, BENCHMARK_TOPIC, TRANS_HALF_TOPIC, TRACE_TOPIC,
    TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT,
})


# Every send checks its topic: the answer for a name seen before is a lookup (bounded, so that
# a flood of invented names only churns the cache).
@functools.lru_cache(maxsize=4096)
def _name_problem(kind: str, name: str, limit: int) -> str | None:
    if not name:
        return f"the {kind} name is empty"
    if len(name) > limit:
        return f"the {kind} name is longer than {limit} characters: {name[:40]}…"
    if not _VALID_TOPIC.fullmatch(name):
        return (f"the {kind} name {name[:40]!r} contains characters other than letters, digits, "
                "%, -, _ and |")
    return None


def validate_topic_name(topic: str) -> str | None:
    """Why a topic name is not acceptable, or None when it is (``TopicValidator``)."""
    return _name_problem("topic", topic, 127)


# The most queues a topic may have here (the broker's headers, group configs, the name server's
# registrations agree on it). Admin requests loop over a topic's queues on the event loop, so
# "2147483647 queues" must not be accepted; RocketMQ's own benchmark topic has 1,024.
MAX_TOPIC_QUEUE_NUMS = 4096
# A group's retry topic is "%RETRY%" + its name, and a topic name has at most 127 characters:
# the client's Validators.checkGroup allows 255, which would make a retry topic no store can
# hold and no name server can route (120 = 127 - len("%RETRY%")).
MAX_GROUP_LENGTH = 127 - len(RETRY_GROUP_TOPIC_PREFIX)


def validate_group_name(group: str) -> str | None:
    """Why a group name is not acceptable, or None (the client's ``Validators.checkGroup``: the
    topic alphabet; at most 120 characters, so that its retry topic is a valid topic). The
    broker checks it too: group names become topics, keys of files it persists and rows in
    every console."""
    return _name_problem("group", group, MAX_GROUP_LENGTH)


def reply_topic(cluster_name: str) -> str:
    """The cluster's request-reply topic (``<cluster>_REPLY_TOPIC``, MixAll.REPLY_TOPIC_POSTFIX)."""
    return f"{cluster_name}_{REPLY_TOPIC_POSTFIX}"


def broker_system_topics(cluster_name: str, broker_name: str) -> frozenset[str]:
    """The topics a broker makes at start under names only it knows, which RocketMQ's
    TopicConfigManager adds to the system topics (``TopicValidator.addSystemTopic``): its
    cluster's, its own, its cluster's reply topic."""
    return frozenset({cluster_name, broker_name, reply_topic(cluster_name)})


def is_system_topic(topic: str, broker_topics: Collection[str] = ()) -> bool:
    """Whether ``topic`` is one of RocketMQ's system topics (``TopicValidator.isSystemTopic``),
    or one of ``broker_topics`` (a broker's own: :func:`broker_system_topics`)."""
    return (topic in SYSTEM_TOPICS or topic in NOT_ALLOWED_SEND_TOPICS
            or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in broker_topics)
