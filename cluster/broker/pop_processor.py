"""POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME: RocketMQ 5's POP consumption.

A POP takes up to ``maxMsgNums`` messages from one queue of a topic or from all of them (queueId
-1), the group's POP retry topic first (what came back is already late), writes a checkpoint for
each queue it took from (pop_revive.py) and moves the group's offset past them at once: the
group's 4.x consumers and its 5.x clients share that offset. The messages stay invisible to the
group for ``invisibleTime``; an ack settles one, a change of invisible time moves it to a new
checkpoint, and one neither acked nor changed in time comes back (pop_revive.py).

With nothing to hand out, a POP with ``pollTime`` waits for a message to land on any queue of
its topics (long polling), then looks once more.

The answer carries the records like a pull's body, and in its header what a client needs to
name each message (cluster/pop_handle.py): popTime, invisibleTime, reviveQid and where each
queue's checkpoint starts (startOffsetInfo), plus the offsets handed out (msgOffsetInfo).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools

from cluster.broker.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
    checked,
)
from cluster.broker.pop_checkpoint import REVIVE_QUEUE_ID, PopCheckPoint
from cluster.broker.pop_revive import max_attempts, now_ms
from cluster.broker.pull_processor import group_refusal, internal_refusal, subscription_filter
from cluster.broker.send_processor import refusal_code
from cluster.pop_handle import (
    MAX_OFFSET_SPAN,
    ExtraInfo,
    ExtraInfoError,
    offset_info,
    order_count_info,
    pop_retry_topic,
    popped_topic,
)
from cluster.remoting.body import JsonBody
from cluster.remoting.codec import RemotingCommand
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.header import HeaderError
from cluster.topic_validator import (
    DLQ_GROUP_TOPIC_PREFIX,
    validate_group_name,
    validate_topic_name,
)
from storage.errors import PutMessageError
from storage.record import MessageRecord, decode_record
from storage.results import GetMessageStatus

MAX_HOLD_SECONDS = 25.0
CONSUME_INIT_MODE_MIN, CONSUME_INIT_MODE_MAX = 0, 1
# Statuses after which the group's offset moves to the read's next offset: what was read (or
# filtered out, or is gone from the queue) is behind it.
_MOVE_ON = {GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
            GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
            GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.OFFSET_FOUND_NULL}


class PopMessageProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker
        self._rotation = itertools.count()
        # (group, topic) pairs whose retry and dead-letter folders were free at a POP: asked
        # once, not on every POP (where names ignore case, each asking scans every topic). A
        # twin made later leaves unacked messages waiting, which the revive says.
        self._folders_free: set[tuple[str, str]] = set()

    def register_with(self, server) -> None:
        server.register(RequestCode.POP_MESSAGE, self.pop)
        server.register(RequestCode.ACK_MESSAGE, self.ack)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)

    # -- POP_MESSAGE ------------------------------------------------------------------------------
    @checked(PopMessageRequestHeader)
    async def pop(self, connection, command: RemotingCommand,
                  header: PopMessageRequestHeader) -> RemotingCommand:
        broker = self.broker
        refusal = self._refusal(command, header.consumer_group, header.topic)
        if refusal is not None:
            return refusal
        topic_config = broker.topics.select(header.topic)
        if header.queue_id >= topic_config.read_queue_nums:
            return command.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}]")
        message_filter = subscription_filter(broker, command, (header.exp_type or "TAG").upper(),
                                             header.exp or "")
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        try:
            answer = self._pop_once(header, message_filter)
            if answer is None and header.poll_time > 0:
                hold, config = broker.pull_hold, broker.config
                if hold.pops_held >= config.max_pop_polling_size \
                        or hold.pops_held_on(pop_retry_topic(header.consumer_group, header.topic)) \
                        >= config.pop_polling_size:
                    # As RocketMQ: every held POP is memory and a wake-up to send; a client
                    # that opens thousands must not hold the broker's.
                    return command.make_response(ResponseCode.POLLING_FULL, "polling full")
                answer = await self._polled(header, message_filter)
                if answer is None:
                    return command.make_response(ResponseCode.POLLING_TIMEOUT, "no new message")
        except PutMessageError as exc:  # the store refused the checkpoint (disk full, …)
            return command.make_response(refusal_code(exc), str(exc))
        if answer is None:
            return command.make_response(ResponseCode.PULL_NOT_FOUND, "no new message")
        return command.make_response(ResponseCode.SUCCESS, ext_fields=answer[0], body=answer[1])

    async def _polled(self, header: PopMessageRequestHeader, message_filter):
        """Long polling: look again whenever a message lands in the topic or its retry topic,
        or a FIFO queue of it is let go, and once more when the time is up (RocketMQ's
        wake-up); None if nothing came. A FIFO queue also frees itself when its lock's time
        runs out, which nothing announces: an orderly POP looks at least once a second."""
        hold = self.broker.pull_hold
        topics = [header.topic, pop_retry_topic(header.consumer_group, header.topic)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(header.poll_time / 1000, MAX_HOLD_SECONDS)
        while (left := deadline - loop.time()) > 0:
            await hold.wait_for_topics(topics, min(left, 1.0) if header.order else left)
            answer = self._pop_once(header, message_filter)
            if answer is not None:
                return answer
        return None

    def _refusal(self, command: RemotingCommand, group: str, topic: str) -> RemotingCommand | None:
        broker = self.broker
        if not broker.is_master or broker.pop_revive is None:
            return command.make_response(ResponseCode.NO_PERMISSION,
                                         "a slave does not hand out POP messages; use the master")
        refusal = internal_refusal(command, group, topic)  # (a POP moves the group's offset)
        if refusal is not None:
            return refusal
        topic_config = broker.topics.select(topic)
        if topic_config is None:
            return command.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         f"topic[{topic}] not exist, apply first please!")
        if not topic_config.readable:
            return command.make_response(ResponseCode.NO_PERMISSION,
                                         f"the topic[{topic}] peeking message is forbidden")
        groups = broker.subscription_groups
        refusal = group_refusal(command, group, groups.find(group), groups)
        if refusal is None and (group, topic) not in self._folders_free:
            # Where unacked messages come back must be folders this store holds.
            for needed in (pop_retry_topic(group, topic), DLQ_GROUP_TOPIC_PREFIX + group):
                problem = broker.topics.folder_problem(needed)
                if problem:
                    return command.make_response(ResponseCode.SYSTEM_ERROR, problem)
            self._folders_free.add((group, topic))
        return refusal

    def _queues(self, header: PopMessageRequestHeader) -> list[tuple[str, int, bool]]:
        """(topic, queueId, retry) in the order this POP looks at them."""
        broker = self.broker
        retry_topic = pop_retry_topic(header.consumer_group, header.topic)
        retry_config = None if header.order else broker.topics.select(retry_topic)
        queues = [(retry_topic, q, True)
                  for q in range(retry_config.read_queue_nums if retry_config else 0)]
        if header.queue_id >= 0:
            return [*queues, (header.topic, header.queue_id, False)]
        count = broker.topics.select(header.topic).read_queue_nums
        # Start at a different queue each time, so that one busy queue does not starve the rest
        # of a small batch.
        first = next(self._rotation) % max(count, 1)
        return queues + [(header.topic, (first + i) % count, False) for i in range(count)]

    def _pop_once(self, header: PopMessageRequestHeader,
                  message_filter) -> tuple[dict[str, str], bytes] | None:
        """Take what there is, with no wait between the reads and the offsets moving (nothing
        else runs on the loop meanwhile, so two POPs never get the same message)."""
        broker = self.broker
        store, offsets = broker.store, broker.offsets
        group, wanted = header.consumer_group, header.max_msg_nums
        pop_time = now_ms()
        messages: list[bytes] = []
        starts: list[tuple[bool, int, str]] = []
        handed: list[tuple[bool, int, str]] = []
        orderly = header.order
        counts: list[tuple[int, int, int]] = []
        orderly_queues: list[tuple[int, list[int]]] = []
        for topic, queue_id, retry in self._queues(header):
            if len(messages) >= wanted:
                break
            if orderly and not broker.pop_order.available((group, topic, queue_id), pop_time,
                                                          header.attempt_id):
                continue  # a FIFO queue waits for the acks of what it handed out
            offset = self._start_offset(group, topic, queue_id, retry or header.init_mode ==
                                        CONSUME_INIT_MODE_MIN)
            result = store.get_message(group, topic, queue_id, offset, wanted - len(messages),
                                       message_filter)
            if orderly:
                if result.messages:
                    taken, taken_offsets, held, acked = self._orderly(group, topic, queue_id,
                                                                      result, counts)
                    if taken:
                        broker.pop_order.lock((group, topic, queue_id), held,
                                              result.next_begin_offset, pop_time,
                                              header.invisible_time, acked,
                                              header.attempt_id or "")
                        messages.extend(taken)
                        orderly_queues.append((queue_id, taken_offsets))
                        starts.append((False, queue_id, str(taken_offsets[0])))
                        handed.append((False, queue_id, ",".join(map(str, taken_offsets))))
                        continue
                # Nothing handed out: the offset may still move past filtered or dead-lettered
                # messages.
                if result.status in _MOVE_ON and result.next_begin_offset != offset \
                        and not result.messages:
                    offsets.commit_offset(group, topic, queue_id, result.next_begin_offset)
                continue
            if result.messages:
                ck = PopCheckPoint(group, topic, queue_id, offset, list(result.queue_offsets),
                                   pop_time, header.invisible_time)
                try:
                    broker.pop_revive.add(ck)
                except PutMessageError:
                    # No checkpoint, no hand-out: the queue keeps its offset and its messages.
                    if not messages:
                        raise
                    break
                messages.extend(result.messages)
                starts.append((retry, queue_id, str(offset)))
                handed.append((retry, queue_id, ",".join(map(str, result.queue_offsets))))
            if result.status in _MOVE_ON and result.next_begin_offset != offset:
                offsets.commit_offset(group, topic, queue_id, result.next_begin_offset)
        if not messages:
            return None
        broker.stats.record_get(group, header.topic, len(messages), sum(map(len, messages)))
        fields = {"popTime": str(pop_time), "invisibleTime": str(header.invisible_time),
                  "reviveQid": str(REVIVE_QUEUE_ID), "restNum": "0",
                  "startOffsetInfo": offset_info(starts), "msgOffsetInfo": offset_info(handed)}
        if orderly_queues:
            fields["orderCountInfo"] = order_count_info(orderly_queues, counts)
        return fields, b"".join(messages)

    def _orderly(self, group: str, topic: str, queue_id: int, result,
                 counts: list[tuple[int, int, int]]):
        """What a FIFO POP hands out of one read, in order: (messages, their offsets, the
        offsets the lock holds, those among them acked already). Messages delivered as often
        as the group allows go to the DLQ first, and messages acked in a delivery that ran out
        are not handed out again; either kind at the head of the read moves the offset on."""
        broker = self.broker
        order = broker.pop_order
        key = (group, topic, queue_id)
        group_config = broker.subscription_groups.find(group)
        limit = max_attempts(group_config.retry_max_times if group_config else -1)
        taken: list[bytes] = []
        taken_offsets: list[int] = []
        held: list[int] = []
        acked: set[int] = set()
        for data, offset in zip(result.messages, result.queue_offsets, strict=True):
            if order.was_acked(key, offset):
                if taken:
                    held.append(offset)
                    acked.add(offset)
                else:
                    broker.offsets.commit_offset(group, topic, queue_id, offset + 1)
                    order.passed(key, offset + 1)
                continue
            delivered = order.delivered(key, offset)
            if delivered >= limit and not taken:
                record = decode_record(data, 0)
                if isinstance(record, MessageRecord) and not broker.pop_revive.dead_letter(
                        group, record, topic, delivered):
                    break  # the store refused: try again at the next POP
                order.settle(key, offset)
                broker.offsets.commit_offset(group, topic, queue_id, offset + 1)
                continue
            taken.append(data)
            taken_offsets.append(offset)
            held.append(offset)
            if delivered:
                counts.append((queue_id, offset, delivered))
        return taken, taken_offsets, held, acked

    def _start_offset(self, group: str, topic: str, queue_id: int, from_min: bool) -> int:
        """Where the group reads a queue: its offset; for a group new to the queue, the start
        (initMode MIN, and always for retry topics) or the end (MAX) — but the start while the
        queue still holds everything it ever had, as RocketMQ's initPopOffsetByCheckMsgInMem
        makes a new group see a young topic's first messages."""
        store = self.broker.store
        committed = self.broker.offsets.query_offset(group, topic, queue_id)
        low = store.get_min_offset_in_queue(topic, queue_id)
        if committed >= 0:
            return max(committed, low)
        if from_min or low == 0:
            return low
        return store.get_max_offset_in_queue(topic, queue_id)

    # -- ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME -----------------------------------------------
    def _ack_refusal(self, command: RemotingCommand, group: str, topic: str,
                     queue_id: int, offsets=()) -> RemotingCommand | None:
        """The answer refusing an ack or an invisible-time change (RocketMQ's codes), or None.
        Unlike a POP it looks no group up: an ack naming a group nobody made changes nothing,
        and must not make one (a group's config written per made-up name)."""
        broker = self.broker
        if not broker.is_master or broker.pop_revive is None:
            return command.make_response(ResponseCode.NO_PERMISSION,
                                         "a slave takes no POP acks; use the master")
        topic_config = broker.topics.select(topic)
        if topic_config is None:
            return command.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         f"topic[{topic}] not exist, apply first please!")
        if not 0 <= queue_id < topic_config.read_queue_nums:
            return command.make_response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{topic_config.read_queue_nums}]")
        store = broker.store
        low = store.get_min_offset_in_queue(topic, queue_id)
        high = store.get_max_offset_in_queue(topic, queue_id)
        for offset in offsets:
            if not low <= offset <= high:
                return command.make_response(
                    ResponseCode.NO_MESSAGE,
                    f"offset {offset} is outside the queue ({low}..{high})")
        return None

    def _handle(self, command: RemotingCommand, header: AckMessageRequestHeader):
        """The checkpoint key an ack names, or the answer refusing it."""
        group = header.consumer_group
        try:
            extra = ExtraInfo.parse(header.extra_info)
        except ExtraInfoError as exc:
            return None, command.make_response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if extra.queue_id != header.queue_id or extra.broker_name != self.broker.config.broker_name:
            return None, command.make_response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"extraInfo names queue {extra.queue_id} of {extra.broker_name}, not queue "
                f"{header.queue_id} of this broker")
        topic = popped_topic(group, header.topic, extra.retry)
        refusal = self._ack_refusal(command, group, topic, header.queue_id, (header.offset,))
        if refusal is not None:
            return None, refusal
        return (group, topic, header.queue_id, extra.start_offset, extra.pop_time), None

    @checked(AckMessageRequestHeader)
    async def ack(self, connection, command: RemotingCommand,
                  header: AckMessageRequestHeader) -> RemotingCommand:
        key, refusal = self._handle(command, header)
        if refusal is not None:
            return refusal
        try:
            self._ack_one(key, header.offset)
        except PutMessageError as exc:  # the ack record could not be written: not acked
            return command.make_response(refusal_code(exc), str(exc))
        return command.make_response(ResponseCode.SUCCESS)

    def _ack_one(self, key, offset: int) -> None:
        """Ack one message: a FIFO queue's lock, else its checkpoint. An ack of what already
        came back (or was acked) changes nothing and is not an error: the consumer cannot do
        better, and RocketMQ answers it the same way."""
        broker = self.broker
        committed = broker.pop_order.ack(key[:3], offset, key[4])
        if committed is not None:
            broker.offsets.commit_offset(key[0], key[1], key[2], committed)
            if broker.pull_hold is not None and broker.pop_order.available(key[:3], now_ms()):
                broker.pull_hold.wake_topic(key[1])  # a FIFO queue let go: POPs held on it
        else:
            broker.pop_revive.ack(key, offset)

    async def batch_ack(self, connection, command: RemotingCommand) -> RemotingCommand:
        """BATCH_ACK_MESSAGE: a body of acks, each a checkpoint's fields and a bit set of the
        offsets (from its start) acked; the same rules as one ACK_MESSAGE each."""
        try:
            acks = parse_batch_ack(command.body, self.broker.config.broker_name)
        except HeaderError as exc:
            return command.make_response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        for group, topic, retry, queue_id, start, pop_time, offsets in acks:
            problem = validate_group_name(group) or validate_topic_name(topic)
            if problem:
                return command.make_response(ResponseCode.MESSAGE_ILLEGAL, problem)
            popped = popped_topic(group, topic, retry)
            # (offsets out of the queue are no one's: they change nothing, as in a single ack
            # that names them, and do not cost the batch its other acks)
            refusal = self._ack_refusal(command, group, popped, queue_id)
            if refusal is not None:
                return refusal
            key = (group, popped, queue_id, start, pop_time)
            try:
                for offset in offsets:
                    self._ack_one(key, offset)
            except PutMessageError as exc:
                return command.make_response(refusal_code(exc), str(exc))
        return command.make_response(ResponseCode.SUCCESS)

    @checked(ChangeInvisibleTimeRequestHeader)
    async def change_invisible_time(self, connection, command: RemotingCommand,
                                    header: ChangeInvisibleTimeRequestHeader) -> RemotingCommand:
        key, refusal = self._handle(command, header)
        if refusal is not None:
            return refusal
        revive = self.broker.pop_revive
        pop_time = now_ms()
        visible_at = pop_time + header.invisible_time
        held_since = self.broker.pop_order.change_invisible(key[:3], header.offset, key[4],
                                                            visible_at)
        if held_since is not None:
            # FIFO, as RocketMQ answers it: the delivery's pop time stays (its other handles
            # carry it), the invisible time counts from it.
            return command.make_response(ResponseCode.SUCCESS, ext_fields={
                "popTime": str(held_since), "invisibleTime": str(visible_at - held_since),
                "reviveQid": str(REVIVE_QUEUE_ID)})
        ck = revive.find(key)
        if ck is None or header.offset not in ck.offsets or header.offset in ck.acked:
            return command.make_response(
                ResponseCode.NO_MESSAGE,
                "the message was acked already or its invisible time ran out")
        # A checkpoint of its own, written before the old one lets go of the message: a crash
        # in between delivers it twice rather than never. Its key must be new: in the
        # millisecond of the POP (or of another change) it would be the old checkpoint's, which
        # the ack below would then take away with all its messages.
        while revive.find((ck.group, ck.topic, ck.queue_id, header.offset, pop_time)) is not None:
            pop_time += 1
        moved = PopCheckPoint(ck.group, ck.topic, ck.queue_id, header.offset, [header.offset],
                              pop_time, header.invisible_time)
        try:
            revive.add(moved)
            revive.ack(key, header.offset)
        except PutMessageError as exc:
            return command.make_response(refusal_code(exc), str(exc))
        return command.make_response(ResponseCode.SUCCESS, ext_fields={
            "popTime": str(pop_time), "invisibleTime": str(header.invisible_time),
            "reviveQid": str(REVIVE_QUEUE_ID)})


# Bit i acks startOffset + i: a checkpoint's messages lie within one read's scan of its start
# (a sparse tag's may be thousands of units on); bits beyond it are refused.
MAX_BATCH_ACK_BITS = MAX_OFFSET_SPAN


def parse_batch_ack(body: bytes, broker_name: str) -> list[tuple[str, str, bool, int, int, int,
                                                                  list[int]]]:
    """(group, topic, retry, queueId, startOffset, popTime, acked offsets) of each ack of a
    BatchAckMessageRequestBody: ``{"brokerName", "acks": [{"c", "t", "r", "so", "q", "rq", "pt",
    "it", "b"}]}``, where ``b`` is a BitSet's bytes (little-endian bits: bit i acks startOffset
    + i), as a list of byte values or base64 text (how fastjson writes a byte[])."""
    request = JsonBody.parse(body or b"", "BATCH_ACK_MESSAGE")
    named = request.text("brokerName", "")
    if named and named != broker_name:
        raise HeaderError(f"the acks are for broker {named[:40]!r}, not this one")
    out = []
    for ack in request.objects("acks", max_items=1024):
        raw = ack.data.get("b")
        if isinstance(raw, str):
            try:
                bits = base64.b64decode(raw, validate=True)
            except (ValueError, binascii.Error):
                raise HeaderError(f"{ack.path}.b is not base64") from None
        elif isinstance(raw, list) and all(isinstance(v, int) and -128 <= v <= 255 for v in raw):
            bits = bytes(v & 0xFF for v in raw)
        else:
            raise HeaderError(f"{ack.path}.b is not a bit set")
        if len(bits) * 8 > MAX_BATCH_ACK_BITS:
            raise HeaderError(f"{ack.path}.b has more bits than a checkpoint holds")
        start = ack.integer("so", bits=64, minimum=0)
        offsets = [start + i for i in range(len(bits) * 8) if bits[i // 8] >> (i % 8) & 1]
        topic, group = ack.text("t", max_length=255), ack.text("c", max_length=255)
        out.append((group, topic, ack.text("r", "0") == "1", ack.integer("q", minimum=0), start,
                    ack.integer("pt", bits=64, minimum=0), offsets))
    return out
