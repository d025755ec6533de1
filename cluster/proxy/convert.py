"""5.x messages to remoting and back, and broker answers to 5.x status codes (sans I/O).

A 5.x message's system properties become the properties RocketMQ stores (TAGS, KEYS, UNIQ_KEY,
__SHARDINGKEY for a FIFO message group, TIMER_DELIVER_MS for a timer message, TRAN_MSG for a
half message); its user properties go beside them. On the way out a stored record becomes a
5.x message again, with its delivery attempt, receipt handle and a CRC32 body digest the client
checks.
"""

from __future__ import annotations

import logging
import time
import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from cluster.pop_handle import POP_RETRY_PREFIX
from cluster.proxy.schema import Code, pb
from cluster.remoting.codes import ResponseCode
from cluster.remoting.header import INT32_MAX
from cluster.topic_validator import TRANS_HALF_TOPIC, validate_group_name, validate_topic_name
from storage.message import COMPRESSED_FLAG, TIME_RANGE_MS, inflated, timer_number
from storage.record import MessageRecord
from storage.running_flags import LogThrottle

log = logging.getLogger(__name__)
_FAILURES = LogThrottle()  # (stored messages that could not be converted: once a minute a kind)

MAX_BODY_SIZE = 4 * 1024 * 1024  # the broker's maxMessageSize default
# A compressed body inflates to at most this for a 5.x client (a producer checks the body's
# size, at most maxMessageSize, before it compresses it; the rest is headroom).
MAX_INFLATED = 4 * MAX_BODY_SIZE
MAX_DELAY_MS = 3 * 24 * 3600 * 1000  # the brokers' timerMaxDelaySec default
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # a FIFO message's group
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_BORN_HOST = "__BORNHOST"
# Properties RocketMQ gives meaning to: never handed to a 5.x client as user properties, and a
# 5.x client may not set them as such (ILLEGAL_MESSAGE_PROPERTY_KEY).
SYSTEM_PROPERTIES = frozenset({
    "TAGS", "KEYS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
    "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
    "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "CLUSTER", "MSG_TYPE", PROPERTY_SHARDING_KEY,
    PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_OUT_MS, "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY",
    "TIMER_DELAY_LEVEL", PROPERTY_TRANSACTION_ID, PROPERTY_BORN_HOST, "BORN_TIMESTAMP",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "DUP_INFO", "EXTEND_UNIQ_INFO", "INNER_NUM",
    "INNER_BASE", "TRACE_CONTEXT", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
})
_SEPARATORS = ("\x01", "\x02")


class MessageRefused(Exception):
    """A 5.x message the proxy will not send; ``code`` is the status the client gets."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def status(code: int = Code.OK, message: str = "OK"):
    return pb.Status(code=code, message=message)


# protobuf's own bounds (google/protobuf/timestamp.proto and duration.proto): a Timestamp from
# 0001-01-01 to 9999-12-31, nanos 0..999,999,999; a Duration of at most 10,000 years either
# way, its nanos of the seconds' sign. A client's value outside them is not a time at all.
_TIMESTAMP_SECONDS = (TIME_RANGE_MS[0] // 1000, TIME_RANGE_MS[1] // 1000)  # (the same years)
_DURATION_SECONDS = 315_576_000_000
_NANOS = 999_999_999


def timestamp_ms(value) -> int | None:
    """A Timestamp's milliseconds since the epoch, or None when it is not a valid Timestamp
    (the caller refuses the request in its own words, where protobuf's conversion would
    raise ValueError out of the call)."""
    low, high = _TIMESTAMP_SECONDS
    if not (low <= value.seconds <= high and 0 <= value.nanos <= _NANOS):
        return None
    return value.seconds * 1000 + value.nanos // 1_000_000


def duration_ms(value) -> int | None:
    """A Duration's milliseconds, or None when it is not a valid Duration (protobuf's
    conversion would take nanos past a second, or of the other sign, as they come)."""
    seconds, nanos = value.seconds, value.nanos
    if (abs(seconds) > _DURATION_SECONDS or abs(nanos) > _NANOS
            or (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0)):
        return None
    return value.ToMilliseconds()


def name_refusal(group: str | None = None, topic: str | None = None):
    """The status refusing a request whose group or topic name is not acceptable (the codes
    5.x clients expect: ILLEGAL_CONSUMER_GROUP, ILLEGAL_TOPIC), or None. Pass the names the
    request carries."""
    if group is not None:
        problem = validate_group_name(group)
        if problem:
            return status(Code.ILLEGAL_CONSUMER_GROUP, problem)
    if topic is not None:
        problem = validate_topic_name(topic)
        if problem:
            return status(Code.ILLEGAL_TOPIC, problem)
    return None


def to_properties(message, max_body_size: int = MAX_BODY_SIZE) -> tuple[dict[str, str], int]:
    """The stored properties of a 5.x message, and its delivery time (ms; 0 for none). Raises
    MessageRefused with the status a 5.x client expects for what it may not send."""
    topic = message.topic.name
    problem = validate_topic_name(topic)
    if problem:
        raise MessageRefused(Code.ILLEGAL_TOPIC, problem)
    if len(message.body) > max_body_size:
        raise MessageRefused(Code.MESSAGE_BODY_TOO_LARGE,
                             f"the body is {len(message.body)} bytes, over the {max_body_size} allowed")
    if not message.body:
        raise MessageRefused(Code.MESSAGE_BODY_EMPTY, "a message needs a body")
    system = message.system_properties
    if not system.message_id or _has_separator(system.message_id):
        raise MessageRefused(Code.ILLEGAL_MESSAGE_ID, "the message has no message_id, or one "
                                                      "with RocketMQ's property separators")
    if system.message_type == pb.TRANSACTION and "_" in system.message_id:
        # Its transaction id is made of the message id and where the half message lies, "_"
        # between them (sending.transaction_id): with one inside, it could not be taken apart
        # again, and the transaction could never be ended.
        raise MessageRefused(Code.ILLEGAL_MESSAGE_ID,
                             "a transactional message's message_id may not contain '_'")
    # (these become stored properties: a separator in one would plant properties of its own)
    for name in ("born_host", "trace_context"):
        if _has_separator(getattr(system, name)):
            raise MessageRefused(Code.BAD_REQUEST,
                                 f"the {name} holds RocketMQ's property separators")
    if timestamp_ms(system.born_timestamp) is None:
        raise MessageRefused(Code.BAD_REQUEST, "the born timestamp is not a valid time")
    props: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTIES or not key or _has_separator(key) or _has_separator(value):
            raise MessageRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                 f"the user property {key[:40]!r} is reserved or malformed")
        props[key] = value
    if system.HasField("tag"):
        tag = system.tag
        if not tag.strip() or "|" in tag or _has_separator(tag):
            raise MessageRefused(Code.ILLEGAL_MESSAGE_TAG, f"the tag {tag[:40]!r} is not allowed")
        props["TAGS"] = tag
    keys = list(system.keys)
    for key in keys:
        if not key.strip() or " " in key or _has_separator(key):
            raise MessageRefused(Code.ILLEGAL_MESSAGE_KEY, f"the key {key[:40]!r} is not allowed")
    if keys:
        props["KEYS"] = " ".join(keys)
    props["UNIQ_KEY"] = system.message_id
    props["WAIT"] = "true"
    kind = system.message_type
    if system.HasField("message_group"):
        if (kind not in (pb.FIFO, pb.MESSAGE_TYPE_UNSPECIFIED) or not system.message_group.strip()
                or _has_separator(system.message_group)):
            raise MessageRefused(Code.ILLEGAL_MESSAGE_GROUP,
                                 "only a FIFO message has a message group, not blank, without "
                                 "RocketMQ's property separators")
        props[PROPERTY_SHARDING_KEY] = system.message_group
    elif kind == pb.FIFO:
        raise MessageRefused(Code.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group")
    deliver_ms = 0
    if system.HasField("delivery_timestamp"):
        if kind not in (pb.DELAY, pb.MESSAGE_TYPE_UNSPECIFIED):
            raise MessageRefused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                 "only a DELAY message has a delivery timestamp")
        deliver_ms = timestamp_ms(system.delivery_timestamp)
        if deliver_ms is None:
            raise MessageRefused(Code.ILLEGAL_DELIVERY_TIME, "the delivery time is not a valid time")
        if deliver_ms - time.time() * 1000 > MAX_DELAY_MS:
            raise MessageRefused(Code.ILLEGAL_DELIVERY_TIME,
                                 "the delivery time is more than 3 days away")
        props[PROPERTY_TIMER_DELIVER_MS] = str(max(deliver_ms, 0))
    elif kind == pb.DELAY:
        raise MessageRefused(Code.ILLEGAL_DELIVERY_TIME, "a DELAY message needs a delivery timestamp")
    if kind == pb.TRANSACTION:
        props["TRAN_MSG"] = "true"
    if system.born_host:
        props[PROPERTY_BORN_HOST] = system.born_host
    if system.HasField("trace_context"):
        props["TRACE_CONTEXT"] = system.trace_context
    return props, deliver_ms


def _has_separator(text: str) -> bool:
    return any(s in text for s in _SEPARATORS)




def _timestamp(ms: int) -> Timestamp:
    """A stored time as a Timestamp; one past what a Timestamp holds (a 4.x producer may send
    any int64 as its born time) at the nearest end, so its message is still delivered."""
    stamp = Timestamp()
    stamp.FromMilliseconds(min(max(ms, TIME_RANGE_MS[0]), TIME_RANGE_MS[1]))
    return stamp


def message_type(props: dict[str, str]):
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    if timer_number(props.get(PROPERTY_TIMER_DELIVER_MS)) is not None or "DELAY" in props:
        return pb.DELAY
    if props.get("TRAN_MSG") == "true":
        return pb.TRANSACTION
    return pb.NORMAL


def to_message(record: MessageRecord, receipt_handle: str | None = None,
               invisible_ms: int | None = None, earlier_deliveries: int = 0):
    """A stored record as a 5.x client receives it (topic: the original one for a message that
    came back through a retry topic; its delivery attempt counts the copies before it, or for a
    FIFO message the deliveries of it that ran out).

    Never raises for what a record holds: any client may have stored it (a 4.x producer's
    values need not fit 5.x's fields), and a message that cannot be converted would fail every
    receive of its queue. Values past a field are shown at its nearest end; should anything
    else fail, the message goes out with its body, id and place only (and the failure is
    logged), so it can still be acked or sent to the dead-letter queue."""
    try:
        return _to_message(record, receipt_handle, invisible_ms, earlier_deliveries)
    except Exception as exc:
        due, suppressed = _FAILURES.should_log(type(exc).__name__)
        if due:
            log.error("a stored message could not be converted for a 5.x client (%d more "
                      "since the last line); sent with its body, id and place only",
                      suppressed, exc_info=exc)
        return _bare_message(record, receipt_handle, invisible_ms, earlier_deliveries)


def _bare_message(record: MessageRecord, receipt_handle: str | None, invisible_ms: int | None,
                  earlier_deliveries: int):
    system = pb.SystemProperties(
        message_id=record.msg_id, body_encoding=pb.IDENTITY,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(record.body) & 0xFFFFFFFF:08X}"),
        queue_id=record.queue_id, queue_offset=record.queue_offset,
        delivery_attempt=max(min(record.reconsume_times + earlier_deliveries + 1, INT32_MAX), 1))
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if invisible_ms is not None:
        system.invisible_duration.FromMilliseconds(invisible_ms)
    topic = record.topic.encode("utf-8", "replace").decode("utf-8")
    return pb.Message(topic=pb.Resource(name=topic), system_properties=system, body=record.body)


def _to_message(record: MessageRecord, receipt_handle: str | None, invisible_ms: int | None,
                earlier_deliveries: int):
    props = record.properties
    body = record.body
    if record.sys_flag & COMPRESSED_FLAG:
        # (as stored when it does not inflate within MAX_INFLATED: garbage, or a bomb)
        plain = inflated(body, MAX_INFLATED)
        if plain is None:
            due, suppressed = _FAILURES.should_log("inflate")
            if due:
                log.warning("a body flagged compressed does not inflate within %d bytes (%d more "
                            "since the last line); sent as stored", MAX_INFLATED, suppressed)
        else:
            body = plain
    topic = record.topic
    if topic.startswith(POP_RETRY_PREFIX):
        topic = props.get("RETRY_TOPIC", topic)
    elif topic == TRANS_HALF_TOPIC:  # a half message asked about: as its producer sent it
        topic = props.get("REAL_TOPIC", topic)
    system = pb.SystemProperties(
        message_id=props.get("UNIQ_KEY") or record.msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"),
        body_encoding=pb.IDENTITY,
        message_type=message_type(props),
        born_timestamp=_timestamp(record.born_timestamp),
        born_host=props.get(PROPERTY_BORN_HOST) or record.born_host[0],
        store_timestamp=_timestamp(record.store_timestamp),
        store_host=f"{record.store_host[0]}:{record.store_host[1]}",
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        # (any int32 a 4.x client sent as its reconsume count: + 1 must still fit the field)
        delivery_attempt=max(min(record.reconsume_times + earlier_deliveries + 1, INT32_MAX), 1),
    )
    if "TAGS" in props:
        system.tag = props["TAGS"]
    if props.get("KEYS"):
        system.keys.extend(props["KEYS"].split(" "))
    if PROPERTY_SHARDING_KEY in props:
        system.message_group = props[PROPERTY_SHARDING_KEY]
    deliver = timer_number(props.get(PROPERTY_TIMER_DELIVER_MS))  # (as the broker reads it)
    if deliver is not None:
        system.delivery_timestamp.CopyFrom(_timestamp(deliver))
    if "TRACE_CONTEXT" in props:
        system.trace_context = props["TRACE_CONTEXT"]
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if invisible_ms is not None:
        system.invisible_duration.FromMilliseconds(invisible_ms)
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=system,
                      body=body)


# Broker answers to what a 5.x client is told.
_SEND_CODES = {
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.NO_MESSAGE: Code.INVALID_RECEIPT_HANDLE,
    ResponseCode.POLLING_TIMEOUT: Code.MESSAGE_NOT_FOUND,
    ResponseCode.PULL_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
}


def status_of_response(code: int, remark: str | None):
    if code == ResponseCode.SUCCESS:
        return status()
    return status(_SEND_CODES.get(code, Code.INTERNAL_SERVER_ERROR),
                  remark or f"the broker answered {code}")
