"""A popped message's handle (RocketMQ 5's ExtraInfo), shared by the broker and the proxy, sans I/O.

A POP consumer names a message it was handed by its *extra info*, RocketMQ's space-separated
``startOffset popTime invisibleTime reviveQid retryFlag brokerName queueId offset``: the first
five pick the broker's checkpoint (cluster/broker/pop_checkpoint.py), the last two the message in
it. A POP answer says where each queue's checkpoint starts (``startOffsetInfo``), so a client
builds the handle of every message it got from the answer's header and the record itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.remoting.errors import RemotingError

POP_RETRY_PREFIX = "%RETRY%"
# How far past its checkpoint's start a popped message can lie: one read's scan (a sparse tag
# is looked for through 16,000 units, storage/get_message.py) plus its 32 messages, rounded up.
# A handle naming an offset further on was never given out.
MAX_OFFSET_SPAN = 16_384
RETRY_FLAG_NORMAL, RETRY_FLAG_RETRY = "0", "1"


class ExtraInfoError(RemotingError):
    """A popped message's handle that this broker never gave out (or that was mangled)."""


def pop_retry_topic(group: str, topic: str) -> str:
    """Where a POP group's unacked messages of ``topic`` come back (RocketMQ's v1 name)."""
    return f"{POP_RETRY_PREFIX}{group}_{topic}"


def popped_topic(group: str, topic: str, retry: bool) -> str:
    """The topic a popped message was read from. A client may name the retry topic itself
    (RocketMQ's Java push consumer and its proxy put it in an ack's header): kept as it is."""
    if retry and not topic.startswith(pop_retry_topic(group, "")):
        return pop_retry_topic(group, topic)
    return topic


def subscribed_topic(group: str, topic: str) -> str:
    """The topic a POP consumer subscribed, when ``topic`` is its retry topic; else ``topic``."""
    prefix = pop_retry_topic(group, "")
    return topic[len(prefix):] if topic.startswith(prefix) and len(topic) > len(prefix) else topic


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: bool
    broker_name: str
    queue_id: int
    offset: int

    @property
    def deadline(self) -> int:
        """When the message becomes visible again (ms since the epoch)."""
        return self.pop_time + self.invisible_time

    def encode(self) -> str:
        flag = RETRY_FLAG_RETRY if self.retry else RETRY_FLAG_NORMAL
        return (f"{self.start_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} "
                f"{flag} {self.broker_name} {self.queue_id} {self.offset}")

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        parts = text.split(" ")
        if len(parts) != 8 or parts[4] not in (RETRY_FLAG_NORMAL, RETRY_FLAG_RETRY) or not parts[5]:
            raise ExtraInfoError(f"extraInfo {text[:80]!r} is not a POP handle")
        try:
            numbers = [int(parts[i]) for i in (0, 1, 2, 3, 6, 7)]
        except ValueError:
            raise ExtraInfoError(f"extraInfo {text[:80]!r} is not a POP handle") from None
        if any(n < 0 for n in numbers) or not 0 <= numbers[5] - numbers[0] < MAX_OFFSET_SPAN:
            raise ExtraInfoError(f"extraInfo {text[:80]!r} is not a POP handle")
        start, pop_time, invisible, revive_qid, queue_id, offset = numbers
        return cls(start, pop_time, invisible, revive_qid, parts[4] == RETRY_FLAG_RETRY, parts[5],
                   queue_id, offset)


def offset_info(entries: list[tuple[bool, int, str]]) -> str:
    """``startOffsetInfo`` / ``msgOffsetInfo``: ``retryFlag queueId value`` joined by ';'."""
    return ";".join(f"{RETRY_FLAG_RETRY if retry else RETRY_FLAG_NORMAL} {queue_id} {value}"
                    for retry, queue_id, value in entries)


def parse_start_offsets(text: str) -> dict[tuple[bool, int], int]:
    """(retry, queueId) -> the checkpoint's start offset, from a POP answer's startOffsetInfo."""
    result = {}
    for part in filter(None, (text or "").split(";")):
        flag, queue_id, start = part.split(" ")
        result[(flag == RETRY_FLAG_RETRY, int(queue_id))] = int(start)
    return result


def order_count_info(queues: list[tuple[int, list[int]]],
                     counts: list[tuple[int, int, int]]) -> str:
    """``orderCountInfo`` of a FIFO POP, as RocketMQ's clients parse it (three fields an entry,
    joined by ';'): ``0 qo<queueId>%<offset> <count>`` for each message handed out again
    (``counts``: queue id, offset, deliveries that ran out before), then ``0 <queueId> <count>``
    for each queue handed out of (``queues``: queue id, its offsets), the fewest of its
    messages' (what older clients read)."""
    earlier = {(queue_id, offset): count for queue_id, offset, count in counts}
    entries = [f"{RETRY_FLAG_NORMAL} qo{queue_id}%{offset} {count}"
               for queue_id, offset, count in counts]
    entries += [f"{RETRY_FLAG_NORMAL} {queue_id} "
                f"{min((earlier.get((queue_id, o), 0) for o in offsets), default=0)}"
                for queue_id, offsets in queues]
    return ";".join(entries)


def parse_order_counts(text: str) -> dict[tuple[int, int], int]:
    """(queueId, offset) -> deliveries that ran out before, from a POP answer's orderCountInfo
    (its per-message entries; the per-queue ones add nothing to them)."""
    result = {}
    for part in filter(None, (text or "").split(";")):
        fields = part.split(" ")
        if len(fields) == 3 and fields[1].startswith("qo") and "%" in fields[1]:
            queue_id, _, offset = fields[1][2:].partition("%")
            result[(int(queue_id), int(offset))] = int(fields[2])
    return result
