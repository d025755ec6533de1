"""The ``rocketmq`` source's options, named like Spark's Kafka connector where they mean the same.

Spark hands options over case-insensitively and passes typos silently, so unknown options fail
here with a sentence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from export.errors import OptionError

EARLIEST, LATEST = -2, -1  # Kafka's markers inside offset JSON
_KNOWN = {
    "nameserver": "nameServer", "topic": "topic", "topics": "topic",
    "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp", "endingtimestamp": "endingTimestamp",
    "tags": "tags", "keys": "keys", "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "partitionsize": "partitionSize", "path": "path", "failondataloss": "failOnDataLoss",
    "pullbatchsize": "pullBatchSize", "brokername": "brokerName",
    "minpartitions": "minPartitions",
}


@dataclass(slots=True)
class SourceOptions:
    topics: list[str]
    name_server: str | None = None
    path: str | None = None
    starting: str | dict = "earliest"
    ending: str | dict = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    tags: set[str] | None = None  # None: every tag ("*")
    tag_expression: str = "*"
    keys: set[str] | None = None
    max_offsets_per_trigger: int | None = None
    partition_size: int = 50_000
    min_partitions: int | None = None  # None: the driver's CPU count (Kafka source's option)
    fail_on_data_loss: bool = True
    pull_batch_size: int = 1024
    broker_names: set[str] | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: dict) -> SourceOptions:
        options: dict[str, str] = {}
        for key, value in raw.items():
            known = _KNOWN.get(str(key).lower())
            if known is None and str(key).lower() != "path":
                raise OptionError(f"the rocketmq source has no option {key!r}; it knows: "
                                  f"{', '.join(sorted(set(_KNOWN.values())))}")
            options[known or "path"] = str(value)
        topics = [t.strip() for t in options.get("topic", "").split(",") if t.strip()]
        if not topics:
            raise OptionError("the rocketmq source needs a topic (option topic, several "
                              "separated by commas)")
        if not options.get("nameServer") and not options.get("path"):
            raise OptionError("give nameServer (host:port;…) to read from brokers, or path to read "
                              "a store directory")
        parsed = cls(topics=topics, name_server=options.get("nameServer"), path=options.get("path"))
        parsed.starting = _offsets(options.get("startingOffsets", "earliest"), "startingOffsets")
        parsed.ending = _offsets(options.get("endingOffsets", "latest"), "endingOffsets")
        parsed.starting_timestamp = _int(options, "startingTimestamp")
        parsed.ending_timestamp = _int(options, "endingTimestamp")
        expression = options.get("tags", "*").strip() or "*"
        parsed.tag_expression = expression
        parsed.tags = None if expression == "*" else {t.strip() for t in expression.split("||")
                                                       if t.strip()}
        if options.get("keys"):
            parsed.keys = {k.strip() for k in options["keys"].split(",") if k.strip()}
        parsed.max_offsets_per_trigger = _int(options, "maxOffsetsPerTrigger", minimum=1)
        parsed.partition_size = _int(options, "partitionSize", minimum=1) or parsed.partition_size
        parsed.pull_batch_size = _int(options, "pullBatchSize", minimum=1) or parsed.pull_batch_size
        parsed.min_partitions = _int(options, "minPartitions", minimum=1)
        parsed.fail_on_data_loss = options.get("failOnDataLoss", "true").lower() != "false"
        if options.get("brokerName"):
            parsed.broker_names = {b.strip() for b in options["brokerName"].split(",")}
        return parsed


def _int(options: dict, key: str, minimum: int | None = None) -> int | None:
    if key not in options:
        return None
    try:
        value = int(options[key])
    except ValueError:
        raise OptionError(f"{key} must be a whole number, not {options[key]!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"{key} must be at least {minimum}")
    return value


def _offsets(value: str, key: str) -> str | dict:
    """``earliest``, ``latest`` or JSON ``{"topic": {"broker": {"queueId": offset}}}`` (-2 and -1
    inside meaning earliest and latest, as in Kafka's JSON)."""
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        data = json.loads(text)
    except ValueError:
        raise OptionError(f"{key} must be earliest, latest or JSON like "
                          '{"TopicA": {"broker-a": {"0": 23, "1": -2}}}') from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise OptionError(f"{key} JSON must map topic -> broker -> queueId -> offset")
    return {topic: {broker: {int(q): int(o) for q, o in queues.items()}
                    for broker, queues in brokers.items()} for topic, brokers in data.items()}
