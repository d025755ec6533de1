"""Messages as client code builds and receives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from cluster.client.route import MessageQueue
from storage.message import COMPRESSED_FLAG, inflated, properties_to_string
from storage.record import MessageRecord


@dataclass(slots=True)
class Message:
    """A message to send: topic, body, and the properties RocketMQ gives meaning to."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_time_level: int = 0
    wait_store_msg_ok: bool = True

    def all_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_time_level > 0:
            props["DELAY"] = str(self.delay_time_level)
        props["WAIT"] = "true" if self.wait_store_msg_ok else "false"
        return props

    def properties_string(self) -> str:
        return properties_to_string(self.all_properties())


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str  # the client's UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # the broker's offset msgId(s)
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None


@dataclass(slots=True)
class MessageExt:
    """A received message: the stored record plus where it came from."""

    record: MessageRecord
    message_queue: MessageQueue
    body: bytes

    @property
    def topic(self) -> str:
        """The topic the message was sent to; a retry shows its original topic, as RocketMQ's
        client does (the record itself sits in ``%RETRY%group``)."""
        if self.record.topic.startswith("%RETRY%"):
            return self.record.properties.get("RETRY_TOPIC", self.record.topic)
        return self.record.topic

    @property
    def tags(self) -> str | None:
        return self.record.tags

    @property
    def keys(self) -> str | None:
        return self.record.keys

    @property
    def msg_id(self) -> str:
        return self.record.client_msg_id

    @property
    def queue_offset(self) -> int:
        return self.record.queue_offset

    @property
    def reconsume_times(self) -> int:
        return self.record.reconsume_times

    @property
    def properties(self) -> dict[str, str]:
        return self.record.properties

    @classmethod
    def of(cls, record: MessageRecord, mq: MessageQueue) -> MessageExt:
        body = record.body
        if record.sys_flag & COMPRESSED_FLAG:
            # (as stored when it does not inflate: any producer may flag any bytes compressed,
            # and a consumer must not fail on them for good)
            plain = inflated(body)
            body = body if plain is None else plain
        return cls(record, mq, body)
