"""The JSON bodies clients send (HeartbeatData, LockBatchRequestBody), read and checked.

Each value is checked for its type and range before the broker keeps it: a heartbeat registers
its groups and subscriptions for as long as the connection lives, and a malformed one must be
answered with a sentence, not raise inside the processor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.broker.client_manager import SubscriptionData
from cluster.remoting.body import JsonBody
from cluster.remoting.header import HeaderError, java_integer
from cluster.topic_validator import validate_group_name, validate_topic_name

# The C++ client sends these enums as their ordinals; Java and Go send the names.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")
EXPRESSION_TYPES = ("TAG", "SQL92")
# Bounds on one heartbeat: groups and subscriptions live as long as the connection does.
MAX_GROUPS = 1024
MAX_SUBSCRIPTIONS = 4096
MAX_TAGS = 4096
MAX_LOCK_QUEUES = 16_384


@dataclass(slots=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: list[SubscriptionData] = field(default_factory=list)


@dataclass(slots=True)
class Heartbeat:
    client_id: str
    consumers: list[ConsumerData]
    producer_groups: list[str]


def enum_name(body: JsonBody, key: str, names: tuple[str, ...], default: str) -> str:
    """An enum sent as its name or as its ordinal, as its name."""
    value = body.data.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, str) and value in names:
        return value
    ordinal = value if isinstance(value, int) and not isinstance(value, bool) else \
        java_integer(value) if isinstance(value, str) else None
    if ordinal is not None and 0 <= ordinal < len(names):
        return names[ordinal]
    raise HeaderError(f"{body.path}.{key} = {str(value)[:40]!r} is not one of {', '.join(names)}")


def _group(body: JsonBody) -> str:
    group = body.text("groupName", "", max_length=255)
    if group:
        problem = validate_group_name(group)
        if problem:
            raise HeaderError(f"{body.path}: {problem}")
    return group


def _subscription(body: JsonBody) -> SubscriptionData:
    topic = body.text("topic", max_length=255)
    problem = validate_topic_name(topic)
    if problem:
        raise HeaderError(f"{body.path}: {problem}")
    expression_type = (body.text("expressionType", "TAG", max_length=16) or "TAG").upper()
    if expression_type not in EXPRESSION_TYPES:
        raise HeaderError(f"{body.path}.expressionType {expression_type[:20]!r} is not TAG or SQL92")
    tags = [str(t)[:255] for t in body.items("tagsSet", max_items=MAX_TAGS)]
    codes = []
    for code in body.items("codeSet", max_items=MAX_TAGS):
        if isinstance(code, bool) or not isinstance(code, int) or not -(2**31) <= code < 2**31:
            raise HeaderError(f"{body.path}.codeSet holds {str(code)[:20]!r}, not an int")
        codes.append(code)
    return SubscriptionData(topic, body.text("subString", "*", max_length=65_536) or "*",
                            expression_type, body.integer("subVersion", 0, bits=64), tags, codes)


def parse_heartbeat(raw: bytes, peer: str) -> Heartbeat:
    """HeartbeatData from HEART_BEAT's body (an empty body is an empty heartbeat)."""
    if not raw:
        return Heartbeat(peer, [], [])
    body = JsonBody.parse(raw, "heartbeat")
    client_id = body.text("clientID", "", max_length=1024) or peer
    consumers = []
    for consumer in body.objects("consumerDataSet", max_items=MAX_GROUPS):
        group = _group(consumer)
        if not group:
            continue
        consumers.append(ConsumerData(
            group,
            enum_name(consumer, "consumeType", CONSUME_TYPES, "CONSUME_PASSIVELY"),
            enum_name(consumer, "messageModel", MESSAGE_MODELS, "CLUSTERING"),
            enum_name(consumer, "consumeFromWhere", CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
            [_subscription(s) for s in consumer.objects("subscriptionDataSet",
                                                       max_items=MAX_SUBSCRIPTIONS)]))
    producers = [g for g in (_group(p) for p in body.objects("producerDataSet", max_items=MAX_GROUPS))
                 if g]
    return Heartbeat(client_id, consumers, producers)


def parse_lock_batch(raw: bytes) -> tuple[str, list[dict], str]:
    """(consumerGroup, mqSet, clientId) of a LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body."""
    body = JsonBody.parse(raw, "lock batch")
    queues = []
    for mq in body.objects("mqSet", max_items=MAX_LOCK_QUEUES):
        queues.append({"brokerName": mq.text("brokerName", max_length=255),
                       "queueId": mq.integer("queueId", minimum=0),
                       "topic": mq.text("topic", max_length=255)})
    return (body.text("consumerGroup", "", max_length=255), queues,
            body.text("clientId", "", max_length=1024))
