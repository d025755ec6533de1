"""Producer: sync, async, oneway and batch sends, with retries and latency fault tolerance.

A sync send makes up to ``1 + retry_times_when_send_failed`` attempts (default 3), each to a
queue chosen by round robin that skips the broker that just failed, and, with
``send_latency_fault_enable``, brokers the fault table marks unavailable. Bodies over
``compress_msg_body_over_howmuch`` (4 KiB) are zlib-compressed; every message gets a UNIQ_KEY.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from enum import Enum

from cluster.client.batch_body import batch_body
from cluster.client.errors import MQClientError
from cluster.client.fault import LatencyFaultTolerance, select_queue
from cluster.client.instance import MQClientInstance
from cluster.client.message import Message, MessageExt, SendResult, SendStatus
from cluster.client.route import MessageQueue, TopicPublishInfo, TopicRouteData
from cluster.client.trace import TraceDispatcher, encode_pub, inner_producer_group, trace_keys
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError, RemotingError
from cluster.remoting.frame_template import PreparedRequest, RequestTemplate
from cluster.topic_validator import RETRY_GROUP_TOPIC_PREFIX
from storage.message import (
    COMPRESSED_FLAG,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    TRANS_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    java_hash_unsigned,
    properties_to_string,
)
from storage.message_id import UniqIdGenerator, decode_message_id, ids_of
from storage.record import encode_batch_parts

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC_KEY = "TBW102"
# Codes a sync send retries on another queue (4.9.7's list).
RETRY_RESPONSE_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                        ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION,
                        ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
                        ResponseCode.SYSTEM_BUSY}
_STATUS: dict[int, SendStatus] = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
           ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
           ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}


class Producer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        send_latency_fault_enable: bool = True,
        compress_msg_body_over_howmuch: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        trace: bool = False,
        instance: MQClientInstance | None = None,
    ) -> None:
        self.group = group
        self.trace = trace  # record sends in RMQ_SYS_TRACE_TOPIC (RocketMQ's message trace)
        self.tracer: TraceDispatcher | None = None
        self.instance = instance or MQClientInstance(namesrv_addr)
        self._own_instance = instance is None
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.faults = LatencyFaultTolerance() if send_latency_fault_enable else None
        self.compress_over = compress_msg_body_over_howmuch
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.publish_info: dict[str, TopicPublishInfo] = {}
        self.ids = UniqIdGenerator()
        self._templates: dict[tuple[int, str, int], RequestTemplate] = {}
        self._started = False

    async def start(self) -> None:
        self.instance.producers[self.group] = self
        if self not in self.instance.route_listeners:
            self.instance.route_listeners.append(self)
        await self.instance.start()
        if self.trace and self.tracer is None:
            self.tracer = TraceDispatcher(Producer(inner_producer_group(self.group),
                                                   ";".join(self.instance.namesrv_addrs)))
            await self.tracer.start()
        self._started = True

    async def shutdown(self) -> None:
        self._started = False
        if self.tracer is not None:
            await self.tracer.stop()
            self.tracer = None
        self.instance.producers.pop(self.group, None)
        if self in self.instance.route_listeners:
            self.instance.route_listeners.remove(self)
        await self.instance.unregister(producer_group=self.group)
        if self._own_instance:
            await self.instance.shutdown()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    def fault_items(self) -> list[dict]:
        """The latency fault table: broker, current latency, not-available-until."""
        return self.faults.items() if self.faults else []

    # -- routes -----------------------------------------------------------------------------------
    def route_topics(self) -> Iterable[str]:
        """The topics this producer has sent to: their routes are refreshed every 30 s."""
        return list(self.publish_info)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        """A fresh route of a topic this producer sends to replaces its publish info when it
        changed (``updateTopicPublishInfo``): queues of a new broker get messages, and one whose
        write permission was wiped (drained before maintenance) gets none."""
        info = self.publish_info.get(topic)
        if info is not None and info.route != route:
            self.publish_info[topic] = TopicPublishInfo(topic, route)

    async def _publish_info(self, topic: str) -> TopicPublishInfo:
        info = self.publish_info.get(topic)
        if info is not None and info.ok():
            return info
        route = await self.instance.fetch_route(topic)
        if route is None:
            # No route yet: send through the auto-create topic's brokers, as RocketMQ does.
            route = await self.instance.fetch_route(AUTO_CREATE_TOPIC_KEY)
            if route is None:
                raise MQClientError(f"no route info of this topic: {topic}")
            # Use at most defaultTopicQueueNums of the template's queues, on a copy of its route.
            queue_datas = [dict(q, writeQueueNums=min(int(q.get("writeQueueNums", 4)),
                                                      self.default_topic_queue_nums))
                           for q in route.queue_datas]
            template = TopicRouteData(queue_datas, route.broker_datas, None)
            return TopicPublishInfo(topic, template)  # not cached: the real route comes later
        info = self.publish_info[topic] = TopicPublishInfo(topic, route)
        if not info.ok():  # (every broker's write permission wiped, say)
            raise MQClientError(f"no writable queue of topic {topic} on any broker")
        return info

    # -- sends -------------------------------------------------------------------------------------
    def _check(self, msg: Message) -> None:
        if not self._started:
            raise MQClientError("the producer is not started")
        if not msg.topic:
            raise MQClientError("the message has no topic")
        if not msg.body:
            raise MQClientError("the message body is empty")
        if len(msg.body) > self.max_message_size:
            raise MQClientError(f"the message body is {len(msg.body)} bytes; the limit is "
                                f"{self.max_message_size}")

    def _request(self, msg: Message, mq: MessageQueue, uniq: str, code=RequestCode.SEND_MESSAGE_V2,
                 body: bytes | None = None, batch: bool = False, props: dict | None = None
                 ) -> PreparedRequest | RemotingCommand:
        if not batch and msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and msg.properties:
            return self._retry_request(msg, uniq)
        sys_flag = 0
        data = msg.body if body is None else body
        if (props or msg.properties).get("TRAN_MSG") == "true":
            sys_flag |= TRANSACTION_PREPARED_TYPE
        if not batch and len(data) > self.compress_over:
            data = zlib.compress(data, 5)
            sys_flag |= COMPRESSED_FLAG
        text = properties_to_string(props) if props is not None else _properties_text(msg, uniq)
        # The header as SendMessageRequestHeaderV2's fields a..m, framed from a template: the
        # same bytes as request(code, fields, data) encoded, with no command object a send.
        key = (code, self.group, self.default_topic_queue_nums)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = RequestTemplate(code, {
                "a": self.group, "b": None, "c": AUTO_CREATE_TOPIC_KEY,
                "d": str(self.default_topic_queue_nums), "e": None, "f": None, "g": None,
                "h": None, "i": None, "j": "0", "k": "false", "m": None}, plain=_PLAIN_FIELDS)
        return PreparedRequest(template, (msg.topic, mq.queue_id, sys_flag,
                                          int(time.time() * 1000), msg.flag, text,
                                          "true" if batch else "false"), data)

    def _retry_request(self, msg: Message, uniq: str) -> RemotingCommand:
        """A message for a group's retry topic (a consumer's own when CONSUMER_SEND_MSG_BACK
        failed): its reconsume count and limit travel in the header, where the broker reads
        them (``DefaultMQProducerImpl.sendKernelImpl``), not among its properties."""
        props = msg.all_properties()
        props.setdefault("UNIQ_KEY", uniq)
        reconsume_times = props.pop(PROPERTY_RECONSUME_TIME, "0")
        max_reconsume_times = props.pop(PROPERTY_MAX_RECONSUME_TIMES, None)
        data, sys_flag = msg.body, 0
        if len(data) > self.compress_over:
            data, sys_flag = zlib.compress(data, 5), COMPRESSED_FLAG
        # Queue -1: the broker picks one of the retry queues it has (retryQueueNums, 1 by
        # default), as it does for CONSUMER_SEND_MSG_BACK. The route this producer has may be
        # TBW102's stand-in (no broker has the retry topic yet), whose queue ids it would refuse.
        return request(RequestCode.SEND_MESSAGE_V2, {
            "a": self.group, "b": msg.topic, "c": AUTO_CREATE_TOPIC_KEY,
            "d": self.default_topic_queue_nums, "e": -1, "f": sys_flag,
            "g": int(time.time() * 1000), "h": msg.flag, "i": properties_to_string(props),
            "j": reconsume_times, "k": False, "l": max_reconsume_times, "m": False}, data)

    def _result(self, response: RemotingCommand, mq: MessageQueue, uniq: str) -> SendResult:
        status = _STATUS.get(response.code)
        if status is None:
            raise BrokerResponseError(response.code, response.remark, RequestCode.SEND_MESSAGE_V2)
        fields = response.ext_fields
        queue_id = int(fields.get("queueId") or mq.queue_id)
        if queue_id != mq.queue_id:  # (the queue the send went to: no new frozen object)
            mq = MessageQueue(mq.topic, mq.broker_name, queue_id)
        return SendResult(status, uniq, fields.get("msgId") or "", mq,
                          int(fields.get("queueOffset") or 0), fields.get("transactionId"),
                          fields.get("MSG_REGION"))

    async def send(self, msg: Message, mq: MessageQueue | None = None,
                   selector: Callable[[list[MessageQueue]], MessageQueue] | None = None) -> SendResult:
        """Send and wait for the broker's answer, retrying on another queue on failure."""
        self._check(msg)
        uniq = self.ids.next_id()
        info = self.publish_info.get(msg.topic)
        if info is None or not info.ok():  # (a known route is read without a coroutine a send)
            info = await self._publish_info(msg.topic)
        attempts = 1 if (mq or selector) else 1 + self.retry_times_when_send_failed
        deadline = time.monotonic() + self.send_msg_timeout
        last_broker = None
        last_error: Exception | None = None
        for _ in range(attempts):
            if mq is not None:
                target = mq
            elif selector is not None:
                target = selector(info.message_queues)
            else:
                target = select_queue(info, last_broker, self.faults)
            last_broker = target.broker_name
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            address = self.instance.master_addr(target.broker_name)
            if address is None:
                last_error = MQClientError(f"the broker {target.broker_name} does not exist")
                continue
            begin = time.monotonic()
            try:
                response = await self.instance.remoting.invoke(
                    address, self._request(msg, target, uniq), remaining)
            except RemotingError as exc:
                self._fault(target.broker_name, begin, isolation=True)
                last_error = exc
                continue
            faults = self.faults  # (``_fault``, inline: every send)
            if faults is not None:
                faults.update_fault_item(target.broker_name, (time.monotonic() - begin) * 1000,
                                         False)
            if response.code in RETRY_RESPONSE_CODES:
                last_error = BrokerResponseError(response.code, response.remark)
                continue
            result = self._result(response, target, uniq)
            if self.tracer is not None:
                keys = msg.all_properties().get("KEYS")
                self.tracer.submit(encode_pub(
                    self.group, msg.topic, uniq, msg.tags, keys, address, len(msg.body),
                    int((time.monotonic() - begin) * 1000), result.offset_msg_id,
                    result.status is SendStatus.SEND_OK), trace_keys(uniq, keys))
            return result
        raise MQClientError(f"send to {msg.topic} failed after retries: {last_error}") from last_error

    def _fault(self, broker_name: str, begin: float, isolation: bool) -> None:
        if self.faults is not None:
            self.faults.update_fault_item(broker_name, (time.monotonic() - begin) * 1000, isolation)

    def send_async(self, msg: Message, callback: Callable[[SendResult | None, Exception | None], None]
                   | None = None) -> asyncio.Task:
        """Send in the background; the task's result is the SendResult."""
        task = asyncio.get_running_loop().create_task(self.send(msg))
        if callback is not None:
            task.add_done_callback(lambda t: callback(
                None if t.cancelled() or t.exception() else t.result(),
                None if t.cancelled() else t.exception()))  # type: ignore[arg-type]
        return task

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer (no retry)."""
        self._check(msg)
        info = await self._publish_info(msg.topic)
        target = select_queue(info, None, self.faults)
        address = self.instance.master_addr(target.broker_name)
        if address is None:
            raise MQClientError(f"the broker {target.broker_name} does not exist")
        await self.instance.remoting.invoke_oneway(
            address, self._request(msg, target, self.ids.next_id()))

    async def send_batch(self, messages: list[Message], mq: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic in one request; each is stored as its own record."""
        if not messages:
            raise MQClientError("the batch is empty")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise MQClientError("a batch must hold messages of one topic")
        if any(m.delay_time_level > 0 for m in messages) or topic.startswith("%RETRY%"):
            raise MQClientError("a batch cannot hold delayed messages or go to a retry topic")
        ids, body = self._batch_body(messages)
        if len(body) > self.max_message_size:
            raise MQClientError(f"the batch is {len(body)} bytes; the limit is {self.max_message_size}")
        info = await self._publish_info(topic)
        target = mq or select_queue(info, None, self.faults)
        address = self.instance.master_addr(target.broker_name)
        if address is None:
            raise MQClientError(f"the broker {target.broker_name} does not exist")
        begin = time.monotonic()
        batch_props = {"WAIT": "true"}
        try:
            response = await self.instance.remoting.invoke(address, self._request(
                messages[0], target, ",".join(ids), RequestCode.SEND_BATCH_MESSAGE, body, True,
                batch_props), self.send_msg_timeout)
        except RemotingError:
            self._fault(target.broker_name, begin, isolation=True)
            raise
        self._fault(target.broker_name, begin, isolation=False)
        return self._result(response, target, ",".join(ids))

    def _batch_body(self, messages: list[Message]) -> tuple[list[str], bytes]:
        """A batch's UNIQ_KEY ids and its SEND_BATCH_MESSAGE body, no object a message beyond
        its properties' text."""
        check = self._check
        for msg in messages:
            check(msg)
        head, first = self.ids.reserve(len(messages))
        # (the common case, in one step; it takes a list)
        made = batch_body(messages if type(messages) is list else list(messages), head, first)
        if made is not None:
            return made[1], made[0]
        ids = ids_of(head, first, len(messages))
        return ids, encode_batch_parts([
            (msg.flag, msg.body, _properties_text(msg, uniq, replace_uniq=True))
            for msg, uniq in zip(messages, ids, strict=True)])


# SendMessageRequestHeaderV2 fields that are numbers or booleans: written with no escaping.
_PLAIN_FIELDS = frozenset({"e", "f", "g", "h", "m"})


def _properties_text(msg: Message, uniq: str, replace_uniq: bool = False) -> str:
    """The properties string a send carries: the message's with its UNIQ_KEY (the message's
    own kept, unless ``replace_uniq``: a batch's result names the ids the producer made)."""
    if not msg.properties:
        # What the dict below gives for a message without properties of its own (most
        # messages), written straight: TAGS, KEYS, DELAY, WAIT, then the UNIQ_KEY.
        keys = msg.keys
        return "".join((
            f"TAGS\x01{msg.tags}\x02" if msg.tags else "",
            "" if not keys else f"KEYS\x01{keys if isinstance(keys, str) else ' '.join(keys)}\x02",
            f"DELAY\x01{msg.delay_time_level}\x02" if msg.delay_time_level > 0 else "",
            "WAIT\x01true\x02" if msg.wait_store_msg_ok else "WAIT\x01false\x02",
            f"UNIQ_KEY\x01{uniq}\x02"))
    props = msg.all_properties()
    if replace_uniq:
        props["UNIQ_KEY"] = uniq
    else:
        props.setdefault("UNIQ_KEY", uniq)
    return properties_to_string(props)


class LocalTransactionState(Enum):
    COMMIT_MESSAGE = TRANSACTION_COMMIT_TYPE
    ROLLBACK_MESSAGE = TRANSACTION_ROLLBACK_TYPE
    UNKNOW = 0  # RocketMQ's spelling: the broker will ask again


class TransactionProducer(Producer):
    """Transactional sends: a half message, the local transaction, END_TRANSACTION; and answers
    to the broker's CHECK_TRANSACTION_STATE through ``transaction_checker``."""

    def __init__(self, group: str, namesrv_addr: str, **kwargs) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.transaction_checker: Callable[[MessageExt], Awaitable[LocalTransactionState]] | None = None

    async def send_message_in_transaction(
        self, msg: Message, execute_local: Callable[[Message, SendResult], Awaitable[LocalTransactionState]]
    ) -> tuple[SendResult, LocalTransactionState]:
        msg.properties["TRAN_MSG"] = "true"
        msg.properties["PGROUP"] = self.group
        result = await self.send(msg)
        if result.status is not SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        else:
            try:
                state = await execute_local(msg, result)
            except Exception:
                log.exception("the local transaction failed; the broker will check back")
                state = LocalTransactionState.UNKNOW
        address = self.instance.master_addr(result.message_queue.broker_name)
        if address is not None:
            await self.instance.remoting.invoke_oneway(address, self._end_request(
                result.queue_offset, decode_message_id(result.offset_msg_id).offset, state,
                result.msg_id, result.transaction_id, from_check=False))
        return result, state

    def _end_request(self, half_offset: int, commit_log_offset: int, state: LocalTransactionState,
                     msg_id: str, transaction_id: str | None, from_check: bool) -> RemotingCommand:
        return request(RequestCode.END_TRANSACTION, {
            "producerGroup": self.group, "tranStateTableOffset": half_offset,
            "commitLogOffset": commit_log_offset, "commitOrRollback": state.value,
            "fromTransactionCheck": from_check, "msgId": msg_id, "transactionId": transaction_id},
            oneway=True)

    async def answer_transaction_check(self, connection, command: RemotingCommand, record) -> None:
        if self.transaction_checker is None:
            return
        props = record.properties
        if record.topic == TRANS_HALF_TOPIC and PROPERTY_REAL_TOPIC in props:
            # A broker that sends the half record as stored (ours before it restored the real
            # topic, as RocketMQ's does): the checker is told about the topic and queue the
            # message was sent to, never about the broker's half queue.
            queue_id = props.get(PROPERTY_REAL_QUEUE_ID, "")
            number = queue_id.isascii() and queue_id.isdigit() and len(queue_id) < 10
            record = replace(record, topic=props[PROPERTY_REAL_TOPIC],
                             queue_id=int(queue_id) if number else record.queue_id)
        message = MessageExt.of(record, MessageQueue(record.topic, command.field("brokerName") or "",
                                                     record.queue_id))
        try:
            state = await self.transaction_checker(message)
        except Exception:
            log.exception("the transaction checker failed; the broker will ask again")
            return
        connection.invoke_oneway(self._end_request(
            int(command.field("tranStateTableOffset") or 0), int(command.field("commitLogOffset") or 0),
            state, command.field("msgId") or "", command.field("transactionId"), from_check=True))


def sharding_key_selector(key: str) -> Callable[[list[MessageQueue]], MessageQueue]:
    """A selector that sends every message of ``key`` (an order id, say) to the same queue, so
    an orderly consumer sees them in order."""

    def select(queues: list[MessageQueue]) -> MessageQueue:
        ordered = sorted(queues, key=lambda q: (q.broker_name, q.queue_id))
        return ordered[java_hash_unsigned(key) % len(ordered)]

    return select
