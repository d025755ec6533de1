"""POP consumption's records and handles, sans I/O (RocketMQ 5's PopCheckPoint, AckMsg, ExtraInfo).

A POP hands messages out without a lock on the queue: the group's offset moves past them at
once, and what keeps them from being lost is a *checkpoint* record written to the broker's
revive topic (``rmq_sys_REVIVE_LOG_<cluster>``) before the answer: which queue, which offsets,
when they were popped and for how long they stay invisible. Each ack writes an *ack* record
there too. A checkpoint whose invisible time runs out with offsets still unacked has those
messages put back, into the group's POP retry topic (``%RETRY%<group>_<topic>``) with one more
delivery attempt counted, or into ``%DLQ%<group>`` after the group's last attempt. Both records
live in the CommitLog, so they survive a restart and reach slaves like any message.

A consumer names a popped message by its extra info (cluster/pop_handle.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
REVIVE_QUEUE_ID = 0
CK_TAG, ACK_TAG = "ck", "ack"


def revive_topic(cluster_name: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster_name


CheckPointKey = tuple[str, str, int, int, int]  # group, popped topic, queue, start offset, pop time


@dataclass(slots=True)
class PopCheckPoint:
    """Messages of one queue handed out by one POP, until each is acked or put back."""

    group: str
    topic: str  # the topic they were popped from: the real one or the group's retry topic
    queue_id: int
    start_offset: int
    offsets: list[int]
    pop_time: int
    invisible_time: int
    revive_offset: int = -1  # where the checkpoint record sits in the revive queue
    acked: set[int] = field(default_factory=set)

    @property
    def key(self) -> CheckPointKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    def unacked(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    @property
    def done(self) -> bool:
        return all(o in self.acked for o in self.offsets)

    def encode(self) -> bytes:
        return json.dumps({"cg": self.group, "t": self.topic, "q": self.queue_id,
                           "so": self.start_offset, "os": self.offsets, "pt": self.pop_time,
                           "it": self.invisible_time}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> PopCheckPoint:
        data = json.loads(body)
        return cls(str(data["cg"]), str(data["t"]), int(data["q"]), int(data["so"]),
                   [int(o) for o in data["os"]], int(data["pt"]), int(data["it"]))


@dataclass(frozen=True, slots=True)
class AckRecord:
    """One acked message of a checkpoint."""

    key: CheckPointKey
    offset: int

    def encode(self) -> bytes:
        group, topic, queue_id, start, pop_time = self.key
        return json.dumps({"cg": group, "t": topic, "q": queue_id, "so": start, "pt": pop_time,
                           "ao": self.offset}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> AckRecord:
        data = json.loads(body)
        return cls((str(data["cg"]), str(data["t"]), int(data["q"]), int(data["so"]),
                    int(data["pt"])), int(data["ao"]))
