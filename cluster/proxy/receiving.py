"""Receiving for 5.x clients: ReceiveMessage as a POP over every queue of one broker,
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, and QueryAssignment (POP
needs no rebalance). A receipt handle is the broker's POP handle (cluster/pop_handle.py): it
names the broker, queue and offset, so any proxy can ack what another one handed out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from cluster.client.route import PERM_READ
from cluster.pop_handle import (
    ExtraInfo,
    ExtraInfoError,
    parse_order_counts,
    parse_start_offsets,
    popped_topic,
)
from cluster.proxy.convert import (
    duration_ms,
    name_refusal,
    status,
    status_of_response,
    to_message,
)
from cluster.proxy.renewal import AUTO_RENEW_INVISIBLE_MS, RENEW_PERIOD_S, ChangeRefused
from cluster.proxy.schema import Code, pb
from cluster.proxy.sending import REQUEST_TIMEOUT
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from storage.record import iter_records

log = logging.getLogger(__name__)


def _metadata_pairs(context):
    return [(k, v) for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)]

DEFAULT_INVISIBLE_MS = 30_000
DEFAULT_POLL_MS = 20_000
# A POP is held this much shorter than the client's wait (its deadline adds the request timeout).
POLL_MARGIN_MS = 200


MAX_POLL_MS = 30_000  # what a broker holds a POP at most


def polling_ms(request_, context) -> int | None:
    """How long a receive may wait for messages, as RocketMQ's proxy decides it: the client's
    long-polling timeout (older clients send none: then what its deadline leaves), never past
    the broker's longest hold nor past the call's deadline (an empty answer, not
    DEADLINE_EXCEEDED). None for a timeout that is no duration."""
    left = context.time_remaining() if context is not None else None
    left_ms = None if left is None else int(left * 1000) - POLL_MARGIN_MS
    if request_.HasField("long_polling_timeout"):
        wanted = duration_ms(request_.long_polling_timeout)
        if wanted is None or wanted < 0:
            return None
    else:
        wanted = DEFAULT_POLL_MS if left_ms is None else left_ms
    wanted = min(wanted, MAX_POLL_MS)
    if left_ms is not None:
        wanted = min(wanted, left_ms)
    return max(wanted, 0)


def batch_ack_body(broker_name: str, group: str, topic: str,
                   checkpoints: dict[tuple, list[int]]) -> bytes:
    """A BATCH_ACK_MESSAGE body: per checkpoint its fields and a bit set (byte values, bit i
    for startOffset + i) of the offsets acked."""
    acks = []
    for (retry, queue_id, start, pop_time, invisible), deltas in checkpoints.items():
        bits = bytearray(max(deltas) // 8 + 1)
        for delta in deltas:
            bits[delta // 8] |= 1 << (delta % 8)
        acks.append({"c": group, "t": topic, "r": "1" if retry else "0", "so": start,
                     "q": queue_id, "rq": 0, "pt": pop_time, "it": invisible, "b": list(bits)})
    return json.dumps({"brokerName": broker_name, "acks": acks}).encode()


class ReceivingMixin:
    """The MessagingService's receives and acks (see service.py for the rest)."""

    async def QueryAssignment(self, request_, context):
        self._client(context)
        topic, group = request_.topic.name, request_.group.name
        refusal = name_refusal(group, topic)
        if refusal is not None:
            return pb.QueryAssignmentResponse(status=refusal)
        route = await self.routes.get(topic)
        if route is None:
            return pb.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND,
                                                            f"topic {topic} does not exist"))
        endpoints = self._endpoints(request_.endpoints)
        # POP needs no rebalance: every consumer of the group reads every broker (queue -1).
        assignments = [
            pb.Assignment(message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic), id=-1, permission=pb.READ_WRITE,
                broker=pb.Broker(name=data["brokerName"], id=0, endpoints=endpoints)))
            for data in sorted(route.queue_datas, key=lambda q: q["brokerName"])
            if int(data.get("perm", 6)) & PERM_READ and int(data.get("readQueueNums", 0)) > 0]
        return pb.QueryAssignmentResponse(status=status(), assignments=assignments)

    async def ReceiveMessage(self, request_, context):
        self._client(context)
        group, topic = request_.group.name, request_.message_queue.topic.name
        refusal = name_refusal(group, topic)
        if refusal is not None:
            yield pb.ReceiveMessageResponse(status=refusal)
            return
        auto_renew = request_.auto_renew
        if auto_renew:  # (a push consumer: the proxy renews until the ack, renewal.py)
            invisible_ms = AUTO_RENEW_INVISIBLE_MS
        else:
            invisible_ms = (duration_ms(request_.invisible_duration)
                            if request_.HasField("invisible_duration") else DEFAULT_INVISIBLE_MS)
        if invisible_ms is None or not 1_000 <= invisible_ms <= 12 * 3600 * 1000:
            yield pb.ReceiveMessageResponse(status=status(
                Code.ILLEGAL_INVISIBLE_TIME, "the invisible duration must be 1 s to 12 h"))
            return
        client_id = dict(_metadata_pairs(context)).get("x-mq-client-id", "")
        poll_ms = polling_ms(request_, context)
        if poll_ms is None:
            yield pb.ReceiveMessageResponse(status=status(
                Code.ILLEGAL_POLLING_TIME, "the long-polling timeout is not a duration"))
            return
        batch = max(1, min(request_.batch_size or 32, 32))
        expression = request_.filter_expression
        exp_type = "SQL92" if expression.type == pb.SQL else "TAG"
        broker_name = request_.message_queue.broker.name
        if not broker_name:
            route = await self.routes.get(topic)
            if route is None:
                yield pb.ReceiveMessageResponse(status=status(Code.TOPIC_NOT_FOUND,
                                                              f"topic {topic} does not exist"))
                return
            broker_name = sorted(route.master_addrs())[0]
        else:
            await self.routes.get(topic)  # learns the broker's address
        fields = {"consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": batch,
                  "invisibleTime": invisible_ms,
                  "pollTime": max(0, poll_ms - POLL_MARGIN_MS), "bornTime": int(time.time() * 1000),
                  "initMode": 1, "expType": exp_type, "exp": expression.expression or "*",
                  "order": await self._is_fifo(group)}
        if request_.HasField("attempt_id") and request_.attempt_id:
            # A FIFO receive retried after a lost answer: the broker hands the same out again.
            fields["attemptId"] = request_.attempt_id[:128]
        popping = asyncio.ensure_future(self._invoke(
            broker_name, request(RequestCode.POP_MESSAGE, fields),
            timeout=poll_ms / 1000 + REQUEST_TIMEOUT))
        try:
            response = await asyncio.shield(popping)
        except asyncio.CancelledError:
            # The client went away while the broker held its POP: what the broker hands out
            # now would stay invisible for nothing, so it goes back at once.
            popping.add_done_callback(lambda f: self._release_later(f, group, topic, broker_name))
            raise
        except RemotingError as exc:
            yield pb.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
            return
        if response.code != ResponseCode.SUCCESS:
            yield pb.ReceiveMessageResponse(status=status_of_response(response.code,
                                                                      response.remark))
            return
        header = response.ext_fields
        pop_time, invisible = int(header["popTime"]), int(header["invisibleTime"])
        revive_qid = int(header.get("reviveQid", "0"))
        starts = parse_start_offsets(header.get("startOffsetInfo", ""))
        counts = parse_order_counts(header.get("orderCountInfo", ""))
        handed = []
        for record in iter_records(response.body):
            retry = record.topic != topic
            extra = ExtraInfo(starts.get((retry, record.queue_id), record.queue_offset), pop_time,
                              invisible, revive_qid, retry, broker_name, record.queue_id,
                              record.queue_offset)
            handed.append((record, extra))
        delivered = 0
        try:
            yield pb.ReceiveMessageResponse(status=status())
            for record, extra in handed:
                earlier = counts.get((record.queue_id, record.queue_offset), 0)
                handle = extra.encode()
                yield pb.ReceiveMessageResponse(
                    message=to_message(record, handle, invisible, earlier))
                delivered += 1
                if auto_renew and client_id:
                    self.renewals.add(client_id, group, topic, handle, extra,
                                      int(time.time() * 1000), record.reconsume_times + earlier)
            stamp = pb.ReceiveMessageResponse()
            stamp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
            yield stamp
        finally:
            if delivered < len(handed):  # (FIFO too: a shorter invisible time frees the queue)
                self._spawn(self._release(group, topic, [e for _, e in handed[delivered:]]))

    def _release_later(self, future, group: str, topic: str, broker_name: str) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        response = future.result()
        if response.code != ResponseCode.SUCCESS:
            return
        header = response.ext_fields
        starts = parse_start_offsets(header.get("startOffsetInfo", ""))
        handles = [ExtraInfo(starts.get((r.topic != topic, r.queue_id), r.queue_offset),
                             int(header["popTime"]), int(header["invisibleTime"]),
                             int(header.get("reviveQid", "0")), r.topic != topic, broker_name,
                             r.queue_id, r.queue_offset)
                   for r in iter_records(response.body)]
        if handles:
            self._spawn(self._release(group, topic, handles))

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self, group: str, topic: str, handles: list[ExtraInfo]) -> None:
        """Make messages nobody received visible again in a second (the shortest invisible time)."""
        for extra in handles:
            try:
                await self._invoke(extra.broker_name, request(
                    RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
                        "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
                        "extraInfo": extra.encode(), "offset": extra.offset,
                        "invisibleTime": 1000}))
            except RemotingError as exc:
                log.info("could not hand back %s:%d: %s", topic, extra.offset, exc)

    def _handle(self, receipt_handle: str, expired_ok: bool = False) -> ExtraInfo | tuple:
        try:
            extra = ExtraInfo.parse(receipt_handle)
        except ExtraInfoError as exc:
            return (Code.INVALID_RECEIPT_HANDLE, str(exc))
        if not expired_ok and extra.deadline < int(time.time() * 1000):
            return (Code.INVALID_RECEIPT_HANDLE, "the receipt handle has expired")
        return extra

    async def AckMessage(self, request_, context):
        self._client(context)
        group, topic = request_.group.name, request_.topic.name
        refusal = name_refusal(group, topic)
        if refusal is not None:
            return pb.AckMessageResponse(status=refusal)
        # One BATCH_ACK_MESSAGE a broker for the whole request (a consumer acks what one
        # receive gave it: a handful of checkpoints), not one round trip a message.
        results: dict[int, object] = {}
        by_broker: dict[str, dict[tuple, list[int]]] = {}
        members: dict[str, list[int]] = {}
        taken = {}  # index -> the renewal its ack stopped (put back if the broker is not reached)
        for index, entry in enumerate(request_.entries):
            # (an ack past the handle's time is the broker's to judge, as in RocketMQ: the
            # message may not have come back yet, and then the ack still settles it)
            extra = self._handle(entry.receipt_handle, expired_ok=True)
            if isinstance(extra, tuple):
                results[index] = status(*extra)
                continue
            renewal = await self.renewals.take(group, entry.receipt_handle)
            if renewal is not None:
                extra, taken[index] = renewal.current, renewal
            checkpoint = (extra.retry, extra.queue_id, extra.start_offset, extra.pop_time,
                          extra.invisible_time)
            by_broker.setdefault(extra.broker_name, {}).setdefault(checkpoint, []).append(
                extra.offset - extra.start_offset)
            members.setdefault(extra.broker_name, []).append(index)
        if by_broker:
            try:
                await self.routes.get(topic)
            except RemotingError:
                pass
        for broker_name, checkpoints in by_broker.items():
            body = batch_ack_body(broker_name, group, topic, checkpoints)
            try:
                response = await self._invoke(
                    broker_name, request(RequestCode.BATCH_ACK_MESSAGE, body=body))
                result = status_of_response(response.code, response.remark)
            except RemotingError as exc:
                result = status(Code.INTERNAL_SERVER_ERROR, str(exc))
                for index in members[broker_name]:
                    if index in taken:
                        self.renewals.restore(group, request_.entries[index].receipt_handle,
                                              taken[index])
            for index in members[broker_name]:
                results[index] = result
        entries = [pb.AckMessageResultEntry(message_id=entry.message_id,
                                            receipt_handle=entry.receipt_handle,
                                            status=results[index])
                   for index, entry in enumerate(request_.entries)]
        codes = {e.status.code for e in entries}
        if not entries:
            overall = status(Code.BAD_REQUEST, "nothing to ack")
        elif len(codes) == 1:
            overall = entries[0].status
        else:
            overall = status(Code.MULTIPLE_RESULTS, "the acks fared differently")
        return pb.AckMessageResponse(status=overall, entries=entries)

    async def ChangeInvisibleDuration(self, request_, context):
        self._client(context)
        group, topic = request_.group.name, request_.topic.name
        refusal = name_refusal(group, topic)
        if refusal is not None:
            return pb.ChangeInvisibleDurationResponse(status=refusal)
        extra = self._handle(request_.receipt_handle, expired_ok=True)
        if isinstance(extra, tuple):
            return pb.ChangeInvisibleDurationResponse(status=status(*extra))
        invisible_ms = duration_ms(request_.invisible_duration)
        if invisible_ms is None or not 1_000 <= invisible_ms <= 12 * 3600 * 1000:
            return pb.ChangeInvisibleDurationResponse(status=status(
                Code.ILLEGAL_INVISIBLE_TIME, "the invisible duration must be 1 s to 12 h"))
        renewal = await self.renewals.take(group, request_.receipt_handle)
        if renewal is None and extra.deadline < int(time.time() * 1000):
            return pb.ChangeInvisibleDurationResponse(status=status(
                Code.INVALID_RECEIPT_HANDLE, "the receipt handle has expired"))
        try:
            moved = await self.change_invisible(group, topic,
                                                renewal.current if renewal else extra,
                                                invisible_ms)
        except ChangeRefused as exc:
            return pb.ChangeInvisibleDurationResponse(status=exc.status)
        except RemotingError as exc:
            if renewal is not None:
                self.renewals.restore(group, request_.receipt_handle, renewal)
            return pb.ChangeInvisibleDurationResponse(status=status(Code.INTERNAL_SERVER_ERROR,
                                                                    str(exc)))
        return pb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=moved.encode())

    async def change_invisible(self, group: str, topic: str, extra: ExtraInfo,
                               invisible_ms: int) -> ExtraInfo:
        """CHANGE_MESSAGE_INVISIBLETIME for the message ``extra`` names: its new handle.
        Raises ChangeRefused (its ``status`` says why) or RemotingError."""
        command = request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
            "extraInfo": extra.encode(), "offset": extra.offset, "invisibleTime": invisible_ms})
        await self.routes.get(topic)
        response = await self._invoke(extra.broker_name, command)
        if response.code != ResponseCode.SUCCESS:
            raise ChangeRefused(response.remark or "refused",
                                status_of_response(response.code, response.remark))
        header = response.ext_fields
        return ExtraInfo(extra.offset, int(header["popTime"]), int(header["invisibleTime"]),
                         int(header.get("reviveQid", "0")), extra.retry, extra.broker_name,
                         extra.queue_id, extra.offset)

    # -- auto renew (renewal.py) --------------------------------------------------------------------
    async def renew_handles(self) -> None:
        """Every few seconds, renew the push consumers' handles about to run out."""
        while True:
            await asyncio.sleep(RENEW_PERIOD_S)
            try:
                await self.renew_once()
            except Exception:
                log.exception("renewing receipt handles failed; trying again")

    async def renew_once(self, now_ms: int | None = None) -> int:
        """One round; how many handles it changed (renewal.py says which and how)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return await self.renewals.renew_once(now, lambda client_id:
                                              client_id in self.clients.clients)

    async def ForwardMessageToDeadLetterQueue(self, request_, context):
        """The push consumer gave up on a message: into the group's DLQ, and acked."""
        self._client(context)
        group, topic = request_.group.name, request_.topic.name
        refusal = name_refusal(group, topic)
        if refusal is not None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=refusal)
        # A FIFO consumer retries in place, often past the handle's invisible time; what it
        # gives up on must still reach the DLQ, or it would ask forever.
        extra = self._handle(request_.receipt_handle, expired_ok=True)
        if isinstance(extra, tuple):
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(*extra))
        renewal = await self.renewals.take(group, request_.receipt_handle)
        extra = renewal.current if renewal is not None else extra
        stored_topic = popped_topic(group, topic, extra.retry)
        try:
            await self.routes.get(topic)
            pulled = await self._invoke(extra.broker_name, request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": group, "topic": stored_topic, "queueId": extra.queue_id,
                "queueOffset": extra.offset, "maxMsgNums": 1, "sysFlag": 0, "commitOffset": 0,
                "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}))
            records = list(iter_records(pulled.body)) if pulled.code == ResponseCode.SUCCESS else []
            if not records or records[0].queue_offset != extra.offset:
                return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                    Code.MESSAGE_NOT_FOUND, "the message is no longer in its queue"))
            record = records[0]
            back = await self._invoke(extra.broker_name, request(
                RequestCode.CONSUMER_SEND_MSG_BACK, {
                    "offset": record.commit_log_offset, "group": group, "delayLevel": -1,
                    "originMsgId": record.client_msg_id, "originTopic": topic,
                    "unitMode": False, "maxReconsumeTimes": request_.max_delivery_attempts}))
            if back.code != ResponseCode.SUCCESS:
                return pb.ForwardMessageToDeadLetterQueueResponse(
                    status=status_of_response(back.code, back.remark))
            await self._invoke(extra.broker_name, request(RequestCode.ACK_MESSAGE, {
                "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
                "extraInfo": extra.encode(), "offset": extra.offset}))
            log.info("%s gave up on %s after %d deliveries: in %%DLQ%%%s", group,
                     request_.message_id, request_.delivery_attempt, group)
        except RemotingError as exc:
            if renewal is not None:  # (the client will forward it again)
                self.renewals.restore(group, request_.receipt_handle, renewal)
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                Code.INTERNAL_SERVER_ERROR, str(exc)))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status())
