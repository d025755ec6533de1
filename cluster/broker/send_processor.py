"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

Mirrors ``SendMessageProcessor``: topic checks and auto-creation from ``defaultTopic``, a random
queue when the client asks for queue -1, retries beyond ``maxReconsumeTimes`` turned into
dead letters, the broker's UNIQ_KEY and CLUSTER properties, transactional half messages, then
the store's put and its flush wait, with RocketMQ's mapping of put statuses to response codes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time

from cluster.broker.durable_answers import DurableAnswers
from cluster.broker.headers import SendMessageRequestHeader, checked
from cluster.broker.send_lane import SendLane
from cluster.broker.timer import TimerError, delivery_time, park, yield_to_delay_level
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.remoting.codec import RemotingCommand, SerializeType
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.connection import HandlerResult, Response
from cluster.remoting.deferred_answer import settled
from cluster.remoting.frame_template import SendAnswerTemplate
from cluster.topic_validator import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
)
from storage.config import BrokerRole
from storage.errors import (
    MessageIllegalError,
    OSPageCacheBusyError,
    PropertiesSizeExceededError,
    PutMessageError,
    PutMessageStatus,
    ServiceNotAvailableError,
)
from storage.message import (
    BORNHOST_V6_FLAG,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    STOREHOSTADDRESS_V6_FLAG,
    TIMER_TOPIC,
    TRANSACTION_CHECK_PROPERTIES,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageExtBatch,
    MessageExtBrokerInner,
    properties_normalized,
    properties_to_string,
    property_from_string,
    reset_transaction_type,
    string_to_properties,
    wait_store_msg_ok,
)
from storage.put_checks import born_host_bytes

log = logging.getLogger(__name__)

# How long a send that created its topic waits for the topic's registration (each name server
# answers in a few ms) before it is answered anyway.
NEW_TOPIC_WAIT = 1.0

# Enum members read once: a member read through its class costs ~70 ns in Python 3.11, and the
# send path would read five a message.
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE
_JSON = SerializeType.JSON
_SYNC_MASTER = BrokerRole.SYNC_MASTER

_STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}


def peer_host(connection) -> tuple[str, int]:
    """The client's address as the broker records it (bornHost)."""
    peer = getattr(connection, "peer", None)
    if peer is not None:
        return peer
    host, _, port = connection.remote_address.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        return "127.0.0.1", 0


class SendMessageProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker
        self._answers = SendAnswerTemplate()
        self._durable = DurableAnswers(broker)
        self._born_hosts: dict[tuple[str, int], bytes] = {}  # a client's address as written

    def register_with(self, server) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.process)
        lane = SendLane(self)  # the common send in one step; the rest comes to ``process``
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            server.register_lane(code, lane)

    async def _once_registered(self, command: RemotingCommand, topic: str,
                               result: HandlerResult) -> Response:
        """``result``, the answer to a send that created its topic, once the topic was
        registered (each name server answered or timed out): a client that asks for the
        topic's route when its send returned finds it. The topic is then in topics.json too
        (written aside: the event loop serves the others meanwhile)."""
        waits = [asyncio.shield(asyncio.wrap_future(self.broker.topics.written_aside()))]
        registration = self.broker.registration
        if registration is not None:
            waits.append(asyncio.shield(registration.register_topics([topic])))
        try:
            # At most NEW_TOPIC_WAIT: the message is stored, and a name server that hangs (or
            # a disk) must not hold the answer past the client's timeout (3 s), whose retry
            # would store it again. The registration and the write go on meanwhile.
            await asyncio.wait_for(asyncio.gather(*waits), NEW_TOPIC_WAIT)
        except TimeoutError:
            log.warning("answering a send to the new topic %s before every name server took "
                        "its registration and topics.json was written (%.1f s)",
                        topic, NEW_TOPIC_WAIT)
        except Exception:  # stored: the answer is given, the whole registration follows
            log.exception("registering the new topic %s failed", topic)
        return await settled(result, command)

    def refused(self, command: RemotingCommand, exc: PutMessageError) -> Response:
        """The answer to a send the store refused (nothing of it was written)."""
        return command.make_response(refusal_code(exc), str(exc))

    @checked(SendMessageRequestHeader)
    def process(self, connection, command: RemotingCommand,
                header: SendMessageRequestHeader) -> HandlerResult:
        """The response at once, unless it must wait for the disk or a slave (then an
        awaitable of it): a send to an ASYNC_FLUSH, ASYNC_MASTER broker takes no task."""
        broker = self.broker
        topic = header.topic
        queue_id = header.queue_id
        # The IPv6 host bits are the store's to set from the real addresses.
        sys_flag = header.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        batch = command.code == _SEND_BATCH or header.batch
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return command.make_response(ResponseCode.NO_PERMISSION,
                                         f"sending message to topic[{topic}] is forbidden")
        if not broker.config.broker_permission & PERM_WRITE:
            return command.make_response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] sending message is forbidden")
        topic_config = broker.topics.select(topic)
        if topic_config is None:
            topic_sys_flag = 1 if header.unit_mode else 0
            # (a name the store cannot hold; a retry topic's is its group's)
            problem = broker.topics.folder_problem(topic)
            if not problem and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                problem = broker.subscription_groups.folder_problem(
                    topic[len(RETRY_GROUP_TOPIC_PREFIX):])
            if problem:
                return command.make_response(ResponseCode.TOPIC_NOT_EXIST, problem)
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                topic_config = broker.topics.create_in_send_message_back_method(
                    topic, 1, PERM_READ | PERM_WRITE, topic_sys_flag)
            else:
                topic_config = broker.topics.create_in_send_message_method(
                    topic, header.default_topic, header.default_topic_queue_nums, topic_sys_flag)
            if topic_config is None:
                return command.make_response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please!")
            # The send is stored now, in its turn among its connection's requests (the topic
            # exists for this second call); its answer waits for the registration that
            # carries the topic, as RocketMQ registers it before answering.
            return self._once_registered(command, topic, self.process(connection, command))
        if not topic_config.writeable:
            return command.make_response(ResponseCode.NO_PERMISSION,
                                         f"the topic[{topic}] sending message is forbidden")
        queue_nums = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
        if queue_id >= queue_nums:
            return command.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic has {queue_nums} queues")
        if queue_id < 0:
            if topic_config.write_queue_nums < 1:  # a group configured with retryQueueNums=0
                return command.make_response(
                    ResponseCode.NO_PERMISSION, f"the topic[{topic}] has no queue to write to")
            queue_id = random.randrange(topic_config.write_queue_nums)
        born_host = peer_host(connection)
        born_ts = header.born_timestamp
        if batch:
            return self._send_batch(command, header, topic, queue_id, sys_flag, born_host, born_ts)
        text = header.properties
        reconsume_times = header.reconsume_times
        if (not topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and "TRAN_MSG\x01" not in text
                and "CLUSTER\x01" not in text and "TIMER_" not in text
                and properties_normalized(text)):
            # Most sends: the properties are stored as they came, with the broker's own added
            # at the end, byte for byte what parsing them and writing them back would give.
            if not (text.startswith("UNIQ_KEY\x01") or "\x02UNIQ_KEY\x01" in text):
                text += f"UNIQ_KEY\x01{broker.uniq_ids.next_id()}\x02"
            if (not sys_flag & TRANSACTION_TYPE_MASK and "DELAY\x01" not in text
                    and command.serialize_type is _JSON):
                answer = self._put_plain(command, topic, queue_id, header.flag,
                                         f"{text}CLUSTER\x01{broker.config.broker_cluster_name}\x02",
                                         sys_flag, born_ts, born_host, reconsume_times)
                if answer is not None:
                    return answer
            msg = MessageExtBrokerInner(  # positionally: keywords cost a send ~0.5 µs
                topic, command.body, queue_id, header.flag, None,
                f"{text}CLUSTER\x01{broker.config.broker_cluster_name}\x02", sys_flag, born_ts,
                born_host, reconsume_times)
            return self._put(command, msg, None, queue_id)
        props = string_to_properties(text)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
            max_times = header.max_reconsume_times if command.version >= 121 else None
            group_config = broker.subscription_groups.find(group)
            if max_times is None:
                max_times = group_config.retry_max_times if group_config else 16
            # (>=, as RocketMQ 4.x and as CONSUMER_SEND_MSG_BACK: an orderly consumer that gives
            # up sends its message back with reconsumeTimes == maxReconsumeTimes, and with >
            # it came back from %RETRY% every round, never reaching the DLQ)
            if reconsume_times >= max_times:
                topic = DLQ_GROUP_TOPIC_PREFIX + group
                if broker.topics.create_in_send_message_back_method(
                        topic, 1, PERM_READ | PERM_WRITE) is None:
                    return command.make_response(
                        ResponseCode.TOPIC_NOT_EXIST,
                        broker.topics.folder_problem(topic) or f"topic[{topic}] not exist")
                queue_id = 0
                props[PROPERTY_DELAY_TIME_LEVEL] = "-1"
        self._complete_properties(props)
        # The queue the answer names, as RocketMQ's: the one asked for (or drawn), not the
        # half, timer or schedule queue a message waits in meanwhile.
        asked_queue_id = queue_id
        prepared = props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
        if "TIMER_" in text and broker.timer is not None:
            yield_to_delay_level(props)  # (a delay level wins over a timer)
            try:
                deliver_ms = delivery_time(props, int(time.time() * 1000),
                                           broker.config.timer_max_delay_sec)
            except TimerError as exc:
                return command.make_response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
            if deliver_ms is not None:
                if prepared:
                    return command.make_response(
                        ResponseCode.MESSAGE_ILLEGAL,
                        "a transactional message cannot also wait for a delivery time")
                if deliver_ms > int(time.time() * 1000):
                    park(props, topic, queue_id, deliver_ms)
                    topic, queue_id = TIMER_TOPIC, 0
        if prepared:
            if broker.config.reject_transaction_message:
                return command.make_response(ResponseCode.NO_PERMISSION,
                                             "the broker rejects transactional messages")
            # A half message waits, invisible, in the half topic until END_TRANSACTION.
            for internal in TRANSACTION_CHECK_PROPERTIES:  # a copy's marks are the broker's to set
                props.pop(internal, None)
            props[PROPERTY_REAL_TOPIC] = topic
            props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            sys_flag = reset_transaction_type(sys_flag, TRANSACTION_NOT_TYPE)
            topic, queue_id = TRANS_HALF_TOPIC, 0
            broker.topics.create_in_send_message_back_method(topic, 1, PERM_READ | PERM_WRITE)
        msg = MessageExtBrokerInner(
            topic=topic, body=command.body, queue_id=queue_id, flag=header.flag,
            properties=props, properties_string=properties_to_string(props), sys_flag=sys_flag,
            born_timestamp=born_ts, born_host=born_host, reconsume_times=reconsume_times,
        )
        transaction_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) if prepared else None
        return self._put(command, msg, transaction_id, asked_queue_id)

    def _put_plain(self, command, topic, queue_id, flag, properties, sys_flag, born_ts,
                   born_host, reconsume_times) -> HandlerResult | None:
        """Most sends, in one step (``DefaultMessageStore.put_plain``), answered from the
        template at once under ASYNC_FLUSH and ASYNC_MASTER; None when the store wants the
        general path for this one."""
        broker = self.broker
        body = command.body
        wait = wait_store_msg_ok(properties)
        try:
            host = self._born_hosts.get(born_host)
            if host is None:
                if len(self._born_hosts) > 1024:
                    self._born_hosts.clear()
                host = self._born_hosts[born_host] = born_host_bytes(born_host)
            put = broker.store.put_plain(topic, queue_id, flag, body, properties, sys_flag,
                                         born_ts, host, reconsume_times, wait)
        except PutMessageError as exc:
            return self.refused(command, exc)
        if put is None:
            return None
        queue_offset, next_offset, msg_id, waiter = put
        if waiter is None and broker.store_config.broker_role is not _SYNC_MASTER:
            broker.stats.record_send(topic, 1, len(body))
            config = broker.config
            return self._answers.frame(command.opaque, config.region_id,
                                       "true" if config.trace_on else "false", msg_id, queue_id,
                                       queue_offset)
        return self.answer_put(command, topic, 1, msg_id, queue_id, queue_offset, next_offset,
                                PutMessageStatus.PUT_OK, waiter, wait)

    def _put(self, command, msg: MessageExtBrokerInner, transaction_id: str | None,
             queue_id: int) -> HandlerResult:
        if msg.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            # Prepared and rolled-back records get no queue offset: stored in a real topic they
            # would be invisible forever. Half messages come only through TRAN_MSG above.
            return command.make_response(
                ResponseCode.MESSAGE_ILLEGAL,
                "a prepared or rolled-back transaction flag needs the TRAN_MSG property")
        try:
            result, waiter = self.broker.store.put_message_nowait(msg)
        except PutMessageError as exc:
            return command.make_response(refusal_code(exc), str(exc))
        return self._answer(command, msg.topic, result, waiter, msg.wait_store_msg_ok,
                            transaction_id, queue_id)

    def _answer(self, command, topic, result, waiter, wait: bool,
                transaction_id=None, queue_id: int | None = None) -> HandlerResult:
        append = result.append
        return self.answer_put(command, topic, append.msg_num, append.msg_id,
                               append.queue_id if queue_id is None else queue_id,
                               append.logics_offset, append.next_offset, result.status, waiter,
                               wait, transaction_id)

    def answer_put(self, command, topic, msg_num, msg_id, queue_id, queue_offset, next_offset,
                    status, waiter, wait: bool, transaction_id=None) -> HandlerResult:
        """The SendMessageResponseHeader, once the put is as durable as the config asks: for
        the disk (SYNC_FLUSH: ``waiter``) and a slave (SYNC_MASTER) at once, a burst of sends
        together (durable_answers.py). A late disk answers FLUSH_DISK_TIMEOUT, a late slave
        FLUSH_SLAVE_TIMEOUT, none SLAVE_NOT_AVAILABLE; none of them undoes the put."""
        broker = self.broker
        replica = False
        if broker.ha_service is not None and wait and broker.store_config.broker_role is _SYNC_MASTER:
            if broker.ha_service.is_slave_ok(next_offset):
                replica = True
            else:
                status = PutMessageStatus.SLAVE_NOT_AVAILABLE
        if waiter is None and not replica:
            return self._response(command, topic, msg_num, msg_id, queue_id, queue_offset,
                                  status, transaction_id)
        respond = functools.partial(self._response, command, topic, msg_num, msg_id, queue_id,
                                    queue_offset, transaction_id=transaction_id)
        return self._durable.answer_when_durable(next_offset, waiter, replica, status, respond)

    def _response(self, command, topic, msg_num, msg_id, queue_id, queue_offset, status,
                  transaction_id=None) -> Response:
        config = self.broker.config
        self.broker.stats.record_send(topic, msg_num, len(command.body))
        code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        if code == ResponseCode.SUCCESS and transaction_id is None \
                and command.serialize_type is _JSON:
            # Nearly every answer: the frame from a template, no command to build and encode.
            return self._answers.frame(command.opaque, config.region_id,
                                       "true" if config.trace_on else "false", msg_id,
                                       queue_id, queue_offset)
        fields = {"msgId": msg_id, "queueId": queue_id, "queueOffset": queue_offset,
                  "MSG_REGION": config.region_id, "TRACE_ON": config.trace_on,
                  "transactionId": transaction_id}
        return command.make_response(code, ext_fields=fields)

    def _send_batch(self, command, header, topic, queue_id, sys_flag, born_host, born_ts):
        broker = self.broker
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return command.make_response(ResponseCode.MESSAGE_ILLEGAL,
                                         "batch request does not support retry group topics")
        if sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_NOT_TYPE:
            return command.make_response(ResponseCode.MESSAGE_ILLEGAL,
                                         "batch messages cannot be transactional")
        props_text = header.properties
        props = string_to_properties(props_text)
        if property_from_string(props_text, PROPERTY_DELAY_TIME_LEVEL) not in (None, "0"):
            return command.make_response(ResponseCode.MESSAGE_ILLEGAL,
                                         "batch messages cannot carry a delay level")
        props[PROPERTY_CLUSTER] = broker.config.broker_cluster_name
        batch = MessageExtBatch(topic=topic, body=command.body, queue_id=queue_id,
                                flag=header.flag, properties=props, sys_flag=sys_flag,
                                born_timestamp=born_ts, born_host=born_host,
                                reconsume_times=header.reconsume_times)
        try:
            result, waiter = broker.store.put_messages_nowait(batch)
        except PutMessageError as exc:
            return command.make_response(refusal_code(exc), str(exc))
        wait = props.get("WAIT", "true").lower() == "true"
        return self._answer(command, topic, result, waiter, wait)

    def _complete_properties(self, props: dict[str, str]) -> None:
        if not props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self.broker.uniq_ids.next_id()
        props[PROPERTY_CLUSTER] = self.broker.config.broker_cluster_name


def refusal_code(exc: PutMessageError) -> int:
    """The response code for a put the store refused (shared by every processor that puts)."""
    if isinstance(exc, MessageIllegalError | PropertiesSizeExceededError):
        return ResponseCode.MESSAGE_ILLEGAL
    if isinstance(exc, ServiceNotAvailableError):
        return ResponseCode.SERVICE_NOT_AVAILABLE
    if isinstance(exc, OSPageCacheBusyError):
        return ResponseCode.SYSTEM_BUSY
    return ResponseCode.SYSTEM_ERROR
