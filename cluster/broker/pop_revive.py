"""PopReviveService: POP checkpoints in flight, and the messages whose invisible time ran out.

Checkpoints and acks are records of the revive topic (see pop_checkpoint.py); this service keeps
the checkpoints not yet settled in memory, ordered by when they fall due, and rebuilds them at
start by reading the revive queue from the revive group's offset. That offset only ever moves up
to the oldest checkpoint still open, so a restart reads every checkpoint it may still need (and
the acks after it) and nothing older.

When a checkpoint falls due, each message in it that nobody acked goes back: a copy into the
group's POP retry topic with its delivery attempt counted (RECONSUME_TIME), or into
``%DLQ%<group>`` once the group's attempts are spent (``retryMaxTimes`` + 1 deliveries, the
count 5.x clients are told in their settings). A crash between putting a message back and
moving the offset puts it back twice: POP is at-least-once, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
import time

from cluster.broker.pop_checkpoint import (
    ACK_TAG,
    CK_TAG,
    REVIVE_GROUP,
    REVIVE_QUEUE_ID,
    AckRecord,
    CheckPointKey,
    PopCheckPoint,
    revive_topic,
)
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.pop_handle import POP_RETRY_PREFIX, pop_retry_topic, subscribed_topic
from cluster.remoting.header import INT32_MAX
from cluster.topic_validator import DLQ_GROUP_TOPIC_PREFIX
from storage.errors import StoreError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
)
from storage.record import MessageRecord, decode_record

log = logging.getLogger(__name__)

REVIVE_INTERVAL = 0.2  # seconds between looks for due checkpoints: redelivery is this late at most
# Messages put back a round at most, so that many checkpoints falling due together do not stall
# the broker's event loop (the rest go at the next round, 200 ms later).
ROUND_BUDGET = 2000
DEFAULT_MAX_ATTEMPTS = 17  # retryMaxTimes 16, plus the first delivery


def now_ms() -> int:
    return int(time.time() * 1000)


def max_attempts(retry_max_times: int) -> int:
    """Deliveries a group gets before the DLQ: its retries plus the first one."""
    return retry_max_times + 1 if retry_max_times >= 0 else DEFAULT_MAX_ATTEMPTS


class PopReviveService:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.topic = revive_topic(broker.config.broker_cluster_name)
        self.table: dict[CheckPointKey, PopCheckPoint] = {}
        self._due: list[tuple[int, CheckPointKey]] = []  # (deadline, key); stale entries skipped
        self._task: asyncio.Task | None = None
        self.revived = 0  # messages put back since start
        self._settled = True  # a checkpoint left the table: the revive offset may move
        self.dead_lettered = 0
        self._unstorable: set[str] = set()  # topics whose folder this store refused (said once)

    # -- life ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.broker.topics.create_in_send_message_back_method(self.topic, 1, PERM_READ | PERM_WRITE)
        self.replay()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL)
            try:
                self.revive_due(now_ms())
            except Exception:  # one bad round must not end redelivery for good
                log.exception("reviving POP checkpoints failed; trying again")

    def replay(self) -> None:
        """Rebuild the open checkpoints from the revive queue, from the revive offset on."""
        store = self.broker.store
        offset = self.broker.offsets.query_offset(REVIVE_GROUP, self.topic, REVIVE_QUEUE_ID)
        offset = max(offset, store.get_min_offset_in_queue(self.topic, REVIVE_QUEUE_ID))
        acks: list[AckRecord] = []
        while True:
            result = store.get_message(REVIVE_GROUP, self.topic, REVIVE_QUEUE_ID, offset, 32)
            if not result.messages:
                break
            for data, queue_offset in zip(result.messages, result.queue_offsets, strict=True):
                record = decode_record(data, 0)
                if not isinstance(record, MessageRecord):
                    continue
                tag = string_to_properties(record.properties_string).get(PROPERTY_TAGS)
                try:
                    if tag == CK_TAG:
                        ck = PopCheckPoint.decode(record.body)
                        ck.revive_offset = queue_offset
                        self._track(ck)
                    elif tag == ACK_TAG:
                        acks.append(AckRecord.decode(record.body))
                except (ValueError, KeyError, TypeError):
                    log.warning("skipping a revive record at %d that is not ours", queue_offset)
            offset = result.next_begin_offset
        for ack in acks:
            ck = self.table.get(ack.key)
            if ck is not None:
                ck.acked.add(ack.offset)
        for key in [k for k, ck in self.table.items() if ck.done]:
            del self.table[key]
        if self.table:
            log.info("POP: %d checkpoints in flight after restart", len(self.table))

    # -- checkpoints and acks -----------------------------------------------------------------------
    def add(self, ck: PopCheckPoint) -> None:
        """Record ``ck`` durably (the revive queue) before its messages are handed out."""
        ck.revive_offset = self._put_record(CK_TAG, ck.encode())
        self._track(ck)

    def _track(self, ck: PopCheckPoint) -> None:
        self.table[ck.key] = ck
        heapq.heappush(self._due, (ck.deadline, ck.key))

    def ack(self, key: CheckPointKey, offset: int) -> bool:
        """Ack one message; False when its checkpoint is no longer open (acked, or put back
        already: then the ack changes nothing, as in RocketMQ)."""
        ck = self.table.get(key)
        if ck is None or offset not in ck.offsets:
            return False
        if offset in ck.acked:
            return True
        self._put_record(ACK_TAG, AckRecord(key, offset).encode())
        ck.acked.add(offset)
        if ck.done:
            del self.table[key]
            self._settled = True
        return True

    def in_flight_by_queue(self, group: str) -> dict[tuple[str, int], int]:
        """The group's messages handed out and not settled, by (topic, queue)."""
        out: dict[tuple[str, int], int] = {}
        for ck in self.table.values():
            if ck.group == group:
                key = (ck.topic, ck.queue_id)
                out[key] = out.get(key, 0) + len(ck.offsets) - len(ck.acked)
        return out

    def in_flight(self) -> int:
        """Messages handed out and neither acked nor put back yet."""
        return sum(len(ck.offsets) - len(ck.acked) for ck in self.table.values())

    def find(self, key: CheckPointKey) -> PopCheckPoint | None:
        return self.table.get(key)

    def _put_record(self, tag: str, body: bytes) -> int:
        props = {PROPERTY_TAGS: tag}
        msg = MessageExtBrokerInner(
            topic=self.topic, body=body, queue_id=REVIVE_QUEUE_ID, properties=props,
            properties_string=properties_to_string(props), born_timestamp=now_ms(),
            born_host=("127.0.0.1", 0))
        result, _ = self.broker.store.put_message_nowait(msg)
        return result.append.logics_offset

    # -- reviving -------------------------------------------------------------------------------------
    def revive_due(self, now: int, budget: int = ROUND_BUDGET) -> int:
        """Put back the unacked messages of the checkpoints due by ``now`` (at most about
        ``budget`` messages; a checkpoint is never split); how many."""
        count = 0
        due = self._due
        while due and due[0][0] <= now and count < budget:
            _, key = heapq.heappop(due)
            ck = self.table.get(key)
            if ck is None:
                continue  # settled by acks
            for offset in ck.unacked():
                if not self._put_back(ck, offset):
                    break
                ck.acked.add(offset)  # in memory only: settled here, not by the consumer
                count += 1
            if ck.done:
                del self.table[key]
                self._settled = True
            else:
                # The store refused a put (disk full, shutting down): try again in a second;
                # the revive offset stays before the checkpoint meanwhile.
                heapq.heappush(due, (now + 1000, key))
        self._advance()
        return count

    def _advance(self) -> None:
        """Move the revive offset up to the oldest open checkpoint (or the queue's end), when
        a checkpoint was settled since the last time (no scan of the open ones otherwise)."""
        if not self._settled:
            return
        self._settled = False
        store = self.broker.store
        if self.table:
            offset = min(ck.revive_offset for ck in self.table.values())
        else:
            offset = store.get_max_offset_in_queue(self.topic, REVIVE_QUEUE_ID)
        if offset > self.broker.offsets.query_offset(REVIVE_GROUP, self.topic, REVIVE_QUEUE_ID):
            self.broker.offsets.commit_offset(REVIVE_GROUP, self.topic, REVIVE_QUEUE_ID, offset)

    def _put_back(self, ck: PopCheckPoint, offset: int) -> bool:
        """Put one unacked message back (or into the DLQ); False if the store refused it."""
        broker = self.broker
        store = broker.store
        result = store.get_message(ck.group, ck.topic, ck.queue_id, offset, 1)
        if not result.messages or result.queue_offsets[0] != offset:
            log.warning("POP: %s:%d offset %d is gone; it cannot come back", ck.topic,
                        ck.queue_id, offset)
            return True
        record = decode_record(result.messages[0], 0)
        if not isinstance(record, MessageRecord):
            return True
        origin = None
        if ck.topic.startswith(POP_RETRY_PREFIX):
            origin = string_to_properties(record.properties_string).get(PROPERTY_RETRY_TOPIC)
            # A message put straight into the retry topic has no RETRY_TOPIC: the topic its
            # group subscribed is in the retry topic's name (a retry topic of the retry topic
            # would be read by nobody).
            origin = origin or subscribed_topic(ck.group, ck.topic)
        attempts = record.reconsume_times + 1  # deliveries so far, the one that timed out included
        group_config = broker.subscription_groups.find(ck.group)
        limit = max_attempts(group_config.retry_max_times if group_config else -1)
        if attempts >= limit:
            return self.dead_letter(ck.group, record, origin or ck.topic, attempts)
        topic = pop_retry_topic(ck.group, origin or ck.topic)
        queues = max(1, group_config.retry_queue_nums if group_config else 1)
        if broker.topics.create_in_send_message_back_method(
                topic, queues, PERM_READ | PERM_WRITE) is None:
            # A name the store cannot hold (POP refuses them; a case twin made since): kept,
            # and tried again like a refused put.
            return self._unstorable_topic(topic)
        if self._copy(record, origin or ck.topic, topic, random.randrange(queues), attempts):
            self.revived += 1
            return True
        return False

    def dead_letter(self, group: str, record: MessageRecord, origin: str, attempts: int) -> bool:
        """Into ``%DLQ%<group>``: the group has had the message as often as it may."""
        topic = DLQ_GROUP_TOPIC_PREFIX + group
        if self.broker.topics.create_in_send_message_back_method(
                topic, 1, PERM_READ | PERM_WRITE) is None:
            return self._unstorable_topic(topic)  # (as a retry topic, above)
        if self._copy(record, origin, topic, 0, attempts):
            self.dead_lettered += 1
            return True
        return False

    def _unstorable_topic(self, topic: str) -> bool:
        """False (try again later), having said once why messages wait for ``topic``."""
        if topic not in self._unstorable:
            self._unstorable.add(topic)
            why = self.broker.topics.folder_problem(topic) or f"{topic} was not created"
            log.warning("POP: unacked messages wait to come back: %s", why)
        return False

    def _copy(self, record: MessageRecord, origin: str, topic: str, queue_id: int,
              attempts: int) -> bool:
        props = string_to_properties(record.properties_string)
        props[PROPERTY_RETRY_TOPIC] = origin
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, props.get("UNIQ_KEY") or record.msg_id)
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        msg = MessageExtBrokerInner(
            topic=topic, body=record.body, queue_id=queue_id, flag=record.flag, properties=props,
            properties_string=properties_to_string(props), sys_flag=record.sys_flag,
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            # (a 4.x producer's count may already be int32's largest: the store refuses one
            # more, and the whole checkpoint would stay, retried every second, for good)
            reconsume_times=min(attempts, INT32_MAX))
        try:
            self.broker.store.put_message_nowait(msg)
        except StoreError as exc:
            log.warning("POP: could not put %s offset %d into %s: %s", record.topic,
                        record.queue_offset, topic, exc)
            return False
        return True
