"""Consuming what a push consumer pulled (RocketMQ's ``ConsumeMessageConcurrentlyService`` and
``ConsumeMessageOrderlyService``): the listener is handed a queue's messages a batch at a time,
and its verdict settles them.

Concurrently, RECONSUME_LATER sends a batch back to the broker (CONSUMER_SEND_MSG_BACK, which
keeps it in %RETRY%group, then %DLQ%group); a message the broker would not take goes to the
retry topic by producer instead, and one neither took is consumed again here a while later.
Orderly, RECONSUME_LATER consumes the same batch again a second later, never skipping ahead,
and only while the queue's broker lock is held. Either way, the result of a run on a queue a
rebalance dropped meanwhile is discarded: its next owner consumes those messages again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Protocol

from cluster.client.errors import MQClientError
from cluster.client.instance import MQClientInstance
from cluster.client.message import Message, MessageExt
from cluster.client.process_queue import ProcessQueue
from cluster.client.producer import Producer
from cluster.client.route import MessageQueue
from cluster.client.trace import (
    TraceDispatcher,
    encode_sub_after,
    encode_sub_before,
    new_request_id,
    trace_keys,
)
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError, RemotingError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
)
from storage.record import iter_records

log = logging.getLogger(__name__)
RETRY_PREFIX = "%RETRY%"
SUSPEND_CURRENT_QUEUE = 1.0  # orderly RECONSUME_LATER: the same messages again a second later
CONSUME_LATER = 5.0  # submitConsumeRequestLater: messages nobody took back, consumed again here
DEFAULT_MAX_RECONSUME_TIMES = 16  # a concurrent consumer's when max_reconsume_times is -1
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # RocketMQ's, for messages sent back by producer


class ConsumeStatus(Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[list[MessageExt]], Awaitable[ConsumeStatus | bool | None]]


class PushConsumerView(Protocol):
    """What the service reads of the push consumer it consumes for (RocketMQ's services hold
    ``defaultMQPushConsumerImpl``): read at each use, since the listener is registered and the
    tracer made after the consumer is."""

    group: str
    instance: MQClientInstance
    message_model: str
    orderly: bool
    batch_max: int
    max_reconsume_times: int
    listener: Listener | None
    tracer: TraceDispatcher | None

    @property
    def closing(self) -> bool:
        """Shutdown has begun."""

    async def hold_lock(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Orderly clustering: wait until the queue's broker lock is held; False once dropped."""

    def rebalance_soon(self) -> None:
        """Rebalance now rather than at the next interval."""


class ConsumeMessageService:
    def __init__(self, consumer: PushConsumerView) -> None:
        self.consumer = consumer
        self._later: set[asyncio.Task] = set()  # messages consumed again after CONSUME_LATER
        self._retry_producer: Producer | None = None  # sends back what the broker would not take

    def later_tasks(self) -> list[asyncio.Task]:
        """The consumptions waiting CONSUME_LATER, for the consumer's shutdown to cancel."""
        return list(self._later)

    async def shutdown(self) -> None:
        if self._retry_producer is not None:
            await self._retry_producer.shutdown()
            self._retry_producer = None

    async def consume(self, mq: MessageQueue, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Hand ``messages`` to the listener a batch at a time. An offset leaves ``in_flight``
        once its message is consumed or taken back by the broker; a queue dropped meanwhile
        keeps the rest there, for the commit that tells its next owner where to start."""
        pq.in_flight.update(m.queue_offset for m in messages)
        for start in range(0, len(messages), self.consumer.batch_max):
            chunk = messages[start : start + self.consumer.batch_max]
            if self.consumer.orderly:
                consumed = await self._consume_orderly(mq, pq, chunk)
            else:
                consumed = await self._consume_concurrently(mq, pq, chunk)
            if not consumed:
                return

    async def _listen(self, chunk: list[MessageExt]) -> bool:
        """The listener's verdict on ``chunk`` (traced); an exception is RECONSUME_LATER."""
        request_id = self._trace_before(chunk)
        began = time.monotonic()
        listener = self.consumer.listener
        assert listener is not None  # start() insists on one
        try:
            status = await listener(chunk)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the listener of %s raised; the messages are consumed again",
                          self.consumer.group)
            status = ConsumeStatus.RECONSUME_LATER
        ok = status in (None, True, ConsumeStatus.CONSUME_SUCCESS)
        self._trace_after(chunk, request_id, began, ok)
        return ok

    async def _listen_in_turn(self, pq: ProcessQueue, chunk: list[MessageExt]) -> bool:
        """The pull task's own call of the listener, marked so a drop lets it finish."""
        pq.consuming = True
        try:
            return await self._listen(chunk)
        finally:
            pq.consuming = False

    # -- concurrently --------------------------------------------------------------------------------
    async def _consume_concurrently(self, mq: MessageQueue, pq: ProcessQueue,
                                    chunk: list[MessageExt]) -> bool:
        """One batch (``ConsumeMessageConcurrentlyService``); False when the queue was dropped
        while the listener ran (its result is discarded)."""
        ok = await self._listen_in_turn(pq, chunk)
        if pq.dropped:
            return False
        await self._settle(mq, pq, chunk, ok)
        return True

    async def _settle(self, mq: MessageQueue, pq: ProcessQueue, chunk: list[MessageExt],
                      ok: bool) -> None:
        """After the listener: RECONSUME_LATER sends the messages back (the broker keeps them
        in %RETRY%group, then %DLQ%group). What nobody took back is consumed again here
        CONSUME_LATER later, while the queue's other messages move on; its offset holds the
        commit back until then."""
        left = [] if ok else await self._send_back(chunk)
        if left:
            task = asyncio.get_running_loop().create_task(self._consume_later(mq, pq, left))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        done = {m.queue_offset for m in chunk}.difference(m.queue_offset for m in left)
        pq.in_flight.difference_update(done)
        pq.consumed += len(done)

    async def _consume_later(self, mq: MessageQueue, pq: ProcessQueue,
                             messages: list[MessageExt]) -> None:
        await asyncio.sleep(CONSUME_LATER)
        if pq.dropped or self.consumer.closing:
            return
        ok = await self._listen(messages)
        if not pq.dropped:
            await self._settle(mq, pq, messages, ok)

    # -- orderly -------------------------------------------------------------------------------------
    async def _consume_orderly(self, mq: MessageQueue, pq: ProcessQueue,
                               chunk: list[MessageExt]) -> bool:
        """One batch in queue order (``ConsumeMessageOrderlyService``): consumed only while the
        queue's lock is held (clustering); RECONSUME_LATER consumes the same messages again a
        second later, never skipping ahead, until a limit the user set. False when the queue
        was dropped first (whatever is left is its next owner's)."""
        offsets = [m.queue_offset for m in chunk]
        locks = self.consumer.message_model == "CLUSTERING"
        while True:
            if locks and not await self.consumer.hold_lock(mq, pq):
                return False
            ok = await self._listen_in_turn(pq, chunk)
            if pq.dropped:
                return False
            if ok:
                break
            chunk = await self._orderly_retry(chunk)
            if not chunk:
                break
            await asyncio.sleep(SUSPEND_CURRENT_QUEUE)
        pq.in_flight.difference_update(offsets)
        pq.consumed += len(offsets)
        return True

    async def _orderly_retry(self, chunk: list[MessageExt]) -> list[MessageExt]:
        """The messages of a failed orderly batch to consume again, each counted once more
        (``checkReconsumeTimes``): one that reached max_reconsume_times goes to the retry topic
        at that count instead, which the broker turns into its DLQ; if it cannot be sent it
        stays."""
        consumer = self.consumer
        limited = consumer.message_model == "CLUSTERING" and consumer.max_reconsume_times >= 0
        again = []
        for message in chunk:
            if limited and message.reconsume_times >= consumer.max_reconsume_times \
                    and await self._send_to_retry_topic(message, message.reconsume_times):
                continue
            message.record.reconsume_times += 1
            again.append(message)
        return again

    # -- message trace -------------------------------------------------------------------------------
    def _trace_before(self, chunk: list[MessageExt]) -> str | None:
        tracer = self.consumer.tracer
        if tracer is None:
            return None
        request_id = new_request_id()
        for m in chunk:
            tracer.submit(encode_sub_before(self.consumer.group, request_id, m.msg_id,
                                            m.reconsume_times, m.keys), trace_keys(m.msg_id, m.keys))
        return request_id

    def _trace_after(self, chunk: list[MessageExt], request_id: str | None, began: float, ok: bool) -> None:
        tracer = self.consumer.tracer
        if tracer is None or request_id is None:
            return
        cost = int((time.monotonic() - began) * 1000)
        for m in chunk:
            tracer.submit(encode_sub_after(self.consumer.group, request_id, m.msg_id, cost, ok, m.keys),
                          trace_keys(m.msg_id, m.keys))

    # -- sending back --------------------------------------------------------------------------------
    def _effective_max_reconsume_times(self) -> int:
        most = self.consumer.max_reconsume_times
        return DEFAULT_MAX_RECONSUME_TIMES if most < 0 else most

    async def _send_back(self, messages: list[MessageExt]) -> list[MessageExt]:
        """CONSUMER_SEND_MSG_BACK for each message, else the message itself sent to the retry
        topic; returns those neither took."""
        consumer = self.consumer
        if consumer.message_model == "BROADCASTING":
            log.warning("broadcast consumers do not retry; %d message(s) dropped", len(messages))
            return []
        left = []
        taken = False
        for message in messages:
            store_ip, store_port = message.record.store_host
            address = f"{store_ip}:{store_port}"
            try:
                response = await consumer.instance.remoting.invoke(address, request(
                    RequestCode.CONSUMER_SEND_MSG_BACK, {
                        "offset": message.record.commit_log_offset, "group": consumer.group,
                        "delayLevel": 0, "originMsgId": message.msg_id,
                        "originTopic": message.topic, "unitMode": False,
                        "maxReconsumeTimes": self._effective_max_reconsume_times()}), 5)
                if response.code != ResponseCode.SUCCESS:
                    raise BrokerResponseError(response.code, response.remark,
                                              RequestCode.CONSUMER_SEND_MSG_BACK)
                taken = True
            except RemotingError as exc:
                log.warning("sending %s back to %s failed (%s); sending it to the retry topic",
                            message.msg_id, address, exc)
                if await self._send_to_retry_topic(message, message.reconsume_times + 1):
                    taken = True
                else:
                    left.append(message)
        if taken:
            retry = RETRY_PREFIX + consumer.group
            with contextlib.suppress(RemotingError):
                await consumer.instance.fetch_route(retry)  # the retry topic may be new
            consumer.rebalance_soon()
        return left

    async def _send_to_retry_topic(self, message: MessageExt, reconsume_times: int) -> bool:
        """``message`` sent to %RETRY%group by a producer, as the broker would have stored it
        (``sendMessageBack``'s fallback): original topic and id, the reconsume count and
        limit (the broker sends it to %DLQ%group at the limit), the delay of that retry.
        False when that failed too."""
        props = dict(message.properties)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, message.msg_id)
        props[PROPERTY_RETRY_TOPIC] = message.topic
        props[PROPERTY_RECONSUME_TIME] = str(reconsume_times)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(self._effective_max_reconsume_times())
        props[PROPERTY_DELAY_TIME_LEVEL] = str(3 + message.reconsume_times)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        retry = Message(RETRY_PREFIX + self.consumer.group, message.body, properties=props,
                        flag=message.record.flag)
        try:
            if self._retry_producer is None:
                instance = self.consumer.instance
                producer = Producer(INNER_PRODUCER_GROUP, ";".join(instance.namesrv_addrs),
                                    instance=instance)
                await producer.start()
                self._retry_producer = producer
            await self._retry_producer.send(retry)
        except (MQClientError, RemotingError) as exc:
            log.warning("%s could not be sent to %s either (%s); consuming it again here later",
                        message.msg_id, retry.topic, exc)
            return False
        return True

    # -- CONSUME_MESSAGE_DIRECTLY --------------------------------------------------------------------
    async def consume_directly(self, body: bytes, broker_name: str | None) -> dict:
        """Run the listener on one message (an admin's request), report how it went."""
        begin = time.monotonic()
        records = list(iter_records(body))
        if not records:
            return {"consumeResult": "CR_THROW_EXCEPTION", "remark": "no message in the request",
                    "order": False, "autoCommit": True, "spentTimeMills": 0}
        record = records[0]
        mq = MessageQueue(record.topic, broker_name or "", record.queue_id)
        listener = self.consumer.listener
        assert listener is not None
        try:
            status = await listener([MessageExt.of(record, mq)])
            ok = status in (None, True, ConsumeStatus.CONSUME_SUCCESS)
            result, remark = ("CR_SUCCESS", None) if ok else ("CR_LATER", "the listener asked to retry")
        except Exception as exc:
            result, remark = "CR_THROW_EXCEPTION", f"{type(exc).__name__}: {exc}"
        return {"consumeResult": result, "remark": remark, "order": False, "autoCommit": True,
                "spentTimeMills": int((time.monotonic() - begin) * 1000)}
