"""The broker's request headers, one class per request (RocketMQ's ``*RequestHeader``).

Every field says its Java type and the range the broker accepts; ``checked`` decodes the header
before a processor runs, so a processor only ever sees values of the right type and range and a
hostile request is answered with RocketMQ's code and a sentence (see cluster/remoting/header.py).

Codes: a field that is missing or does not parse as its Java type gets SYSTEM_ERROR, as Java's
``decodeCommandCustomHeader`` does; the fields of a message being sent get MESSAGE_ILLEGAL; a
topic name the TopicValidator refuses gets SYSTEM_ERROR on a send (``msgCheck``) and
TOPIC_NOT_EXIST on reads (no such topic can exist).
"""

from __future__ import annotations

from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.header import HeaderError, RequestHeader, boolean, checked, int32, int64, text
from cluster.topic_validator import MAX_TOPIC_QUEUE_NUMS, validate_group_name, validate_topic_name
from storage.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    INNER_BATCH_FLAG,
    MULTI_TAGS_FLAG,
    NEED_UNWRAP_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_TYPE_MASK,
)

# SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE use one-letter names for SendMessageRequestHeader fields.
SEND_V2_NAMES = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "bname",
}
# The sysFlag bits a producer may send. The host bits (IPv6 born/store host) are accepted but
# the send processor clears them: the store sets them from the real addresses, and a record
# whose flags lie about its layout would be corrupt.
CLIENT_SYS_FLAGS = (COMPRESSED_FLAG | MULTI_TAGS_FLAG | TRANSACTION_TYPE_MASK | BORNHOST_V6_FLAG
                    | STOREHOSTADDRESS_V6_FLAG | NEED_UNWRAP_FLAG | INNER_BATCH_FLAG
                    | COMPRESSION_TYPE_MASK)
# PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
PERM_ALL = 0b1111


def _check_sys_flag(value: int) -> str | None:
    if value & ~CLIENT_SYS_FLAGS:
        return f"sets bits {value & ~CLIENT_SYS_FLAGS:#x}, which a producer may not set"
    return None


# -- field shapes used by many headers -----------------------------------------------------------
def _topic(name: str = "topic", **kwargs):
    return text(name, check=validate_topic_name, **kwargs)


def _read_topic(name: str = "topic", **kwargs):
    return text(name, check=validate_topic_name, error_code=ResponseCode.TOPIC_NOT_EXIST, **kwargs)


def _group(name: str, **kwargs):
    return text(name, check=validate_group_name, **kwargs)


def _queue_id(**kwargs):
    return int32("queueId", minimum=0, **kwargs)


# -- sending -------------------------------------------------------------------------------------
class SendMessageRequestHeader(RequestHeader):
    error_code = ResponseCode.MESSAGE_ILLEGAL
    aliases = SEND_V2_NAMES
    alias_codes = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    producer_group: str = text("producerGroup", max_length=255, error_code=ResponseCode.SYSTEM_ERROR)
    topic: str = _topic(error_code=ResponseCode.SYSTEM_ERROR)
    default_topic: str = _topic("defaultTopic", default="TBW102", error_code=ResponseCode.SYSTEM_ERROR)
    default_topic_queue_nums: int = int32("defaultTopicQueueNums", default=4, minimum=0,
                                          maximum=MAX_TOPIC_QUEUE_NUMS)
    # -1: the broker picks a queue
    queue_id: int = int32("queueId", default=-1, minimum=-1, error_code=ResponseCode.SYSTEM_ERROR)
    sys_flag: int = int32("sysFlag", default=0, minimum=0, check=_check_sys_flag)
    born_timestamp: int = int64("bornTimestamp", default=0)
    flag: int = int32("flag", default=0)
    properties: str = text("properties", default="")
    reconsume_times: int = int32("reconsumeTimes", default=0, minimum=0)
    unit_mode: bool = boolean("unitMode")
    max_reconsume_times: int | None = int32("maxReconsumeTimes", default=None)
    batch: bool = boolean("batch")
    bname: str | None = text("bname", default=None)


class ConsumerSendMsgBackRequestHeader(RequestHeader):
    offset: int = int64("offset", minimum=0)
    group: str = _group("group")
    delay_level: int = int32("delayLevel", default=0)
    origin_msg_id: str | None = text("originMsgId", default=None, max_length=128)
    origin_topic: str | None = text("originTopic", default=None)
    unit_mode: bool = boolean("unitMode")
    max_reconsume_times: int = int32("maxReconsumeTimes", default=-1)


class EndTransactionRequestHeader(RequestHeader):
    producer_group: str = text("producerGroup", max_length=255)
    tran_state_table_offset: int = int64("tranStateTableOffset", minimum=0)
    commit_log_offset: int = int64("commitLogOffset", minimum=0)
    commit_or_rollback: int = int32("commitOrRollback")
    from_transaction_check: bool = boolean("fromTransactionCheck")
    msg_id: str | None = text("msgId", default=None)
    transaction_id: str | None = text("transactionId", default=None)


# -- reading -------------------------------------------------------------------------------------
class PullMessageRequestHeader(RequestHeader):
    consumer_group: str = _group("consumerGroup")
    topic: str = _read_topic()
    queue_id: int = _queue_id()
    queue_offset: int = int64("queueOffset")
    max_msg_nums: int = int32("maxMsgNums", default=32, minimum=0)
    sys_flag: int = int32("sysFlag", default=0, minimum=0)
    commit_offset: int = int64("commitOffset", default=-1)
    suspend_timeout_millis: int = int64("suspendTimeoutMillis", default=15_000)
    subscription: str | None = text("subscription", default=None, max_length=65_536)
    sub_version: int = int64("subVersion", default=0)
    expression_type: str | None = text("expressionType", default=None, max_length=16)


# -- POP consumption (5.x) -----------------------------------------------------------------------
# An invisible time is at least a second and at most RocketMQ's 12 hours: a longer one would keep
# a message from everyone for days on one request.
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 1_000, 12 * 3600 * 1000
MAX_POLL_MS = 30_000


class PopMessageRequestHeader(RequestHeader):
    consumer_group: str = _group("consumerGroup")
    topic: str = _read_topic()
    # -1: every readable queue of the topic (and the group's retry topic)
    queue_id: int = int32("queueId", default=-1, minimum=-1)
    max_msg_nums: int = int32("maxMsgNums", default=32, minimum=1, maximum=32)
    invisible_time: int = int64("invisibleTime", minimum=MIN_INVISIBLE_MS, maximum=MAX_INVISIBLE_MS)
    poll_time: int = int64("pollTime", default=0, minimum=0, maximum=MAX_POLL_MS)
    born_time: int = int64("bornTime", default=0)
    init_mode: int = int32("initMode", default=0, minimum=0, maximum=1)
    exp_type: str | None = text("expType", default=None, max_length=16)
    exp: str | None = text("exp", default=None, max_length=65_536)
    order: bool = boolean("order")
    attempt_id: str | None = text("attemptId", default=None, max_length=128)


class AckMessageRequestHeader(RequestHeader):
    consumer_group: str = _group("consumerGroup")
    topic: str = _read_topic()
    queue_id: int = _queue_id()
    extra_info: str = text("extraInfo", max_length=1024)
    offset: int = int64("offset", minimum=0)


class ChangeInvisibleTimeRequestHeader(AckMessageRequestHeader):
    invisible_time: int = int64("invisibleTime", minimum=MIN_INVISIBLE_MS, maximum=MAX_INVISIBLE_MS)


class QueryMessageRequestHeader(RequestHeader):
    topic: str = _read_topic()
    key: str = text("key", max_length=65_536)
    max_num: int = int32("maxNum", default=32, minimum=0)
    begin_timestamp: int = int64("beginTimestamp", default=0)
    end_timestamp: int | None = int64("endTimestamp", default=None)
    unique_key_query: bool = boolean("_UNIQUE_KEY_QUERY")


class ViewMessageRequestHeader(RequestHeader):
    offset: int = int64("offset", minimum=0)


class QueueRequestHeader(RequestHeader):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME: one queue of a topic."""

    topic: str = _read_topic()
    queue_id: int = _queue_id()


class SearchOffsetRequestHeader(QueueRequestHeader):
    timestamp: int = int64("timestamp")


class QueryConsumerOffsetRequestHeader(RequestHeader):
    consumer_group: str = _group("consumerGroup")
    topic: str = _read_topic()
    queue_id: int = _queue_id()
    set_zero_if_not_found: bool = boolean("setZeroIfNotFound")


class UpdateConsumerOffsetRequestHeader(RequestHeader):
    consumer_group: str = _group("consumerGroup")
    topic: str = _read_topic()
    queue_id: int = _queue_id()
    commit_offset: int = int64("commitOffset", minimum=0)


class ResetOffsetRequestHeader(RequestHeader):
    topic: str = _read_topic()
    group: str = _group("group")
    timestamp: int = int64("timestamp")
    is_force: bool = boolean("isForce", default=True)


# -- clients -------------------------------------------------------------------------------------
class UnregisterClientRequestHeader(RequestHeader):
    client_id: str | None = text("clientID", default=None)
    producer_group: str | None = text("producerGroup", default=None)
    consumer_group: str | None = text("consumerGroup", default=None)


class GroupRequestHeader(RequestHeader):
    """GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST."""

    consumer_group: str = text("consumerGroup", max_length=255)


class ConsumerClientRequestHeader(RequestHeader):
    """GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY: relayed to one online consumer."""

    consumer_group: str = text("consumerGroup", default="", max_length=255)
    client_id: str = text("clientId", default="", max_length=1024)
    msg_id: str | None = text("msgId", default=None, max_length=128)
    jstack_enable: bool = boolean("jstackEnable")


# -- administration ------------------------------------------------------------------------------
class CreateTopicRequestHeader(RequestHeader):
    topic: str = _topic()
    default_topic: str | None = text("defaultTopic", default=None)
    read_queue_nums: int = int32("readQueueNums", default=16, minimum=1, maximum=MAX_TOPIC_QUEUE_NUMS)
    write_queue_nums: int = int32("writeQueueNums", default=16, minimum=1,
                                  maximum=MAX_TOPIC_QUEUE_NUMS)
    perm: int = int32("perm", default=6, minimum=0, maximum=PERM_ALL)
    topic_filter_type: str = text("topicFilterType", default="SINGLE_TAG", max_length=16)
    topic_sys_flag: int = int32("topicSysFlag", default=0)
    order: bool = boolean("order")


class TopicRequestHeader(RequestHeader):
    """DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO."""

    topic: str = _read_topic()


class ConsumeStatsRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup", max_length=255)
    topic: str | None = _read_topic(default=None)


class DeleteSubscriptionGroupRequestHeader(RequestHeader):
    group_name: str = text("groupName", max_length=255)
    clean_offset: bool = boolean("cleanOffset")


class EmptyHeader(RequestHeader):
    """Requests whose header carries nothing the broker reads."""


__all__ = [
    "CLIENT_SYS_FLAGS", "MAX_TOPIC_QUEUE_NUMS", "SEND_V2_NAMES", "HeaderError", "RequestHeader",
    "checked",
]
