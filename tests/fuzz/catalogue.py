"""Which header fields each request code carries, and of what type: the fuzzer's map.

Written from two sources: what our processors read (``cluster/broker/*processor*.py``,
``send_back.py``, ``transaction.py``, ``cluster/namesrv/processor.py``) and RocketMQ's own
``*RequestHeader`` classes (4.9.x), whose fields a Java or Go client sends even when our
processors ignore them. A kind says what a *valid* value looks like (so the other fields of a
request can be valid while one is hostile, and the request gets past the first check); the
hostile generator (hostile.py) decides what to put instead.

Nothing here knows the legitimate traffic's names: hostile.py draws names from pools that
never contain them (see the docstring of test_hostile_cluster.py for why).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.remoting.codes import RequestCode

# -- field kinds: what a valid value is --------------------------------------------------------
TOPIC = "topic"  # a topic name
GROUP = "group"  # a consumer group
PGROUP = "pgroup"  # a producer group
BROKER = "broker"  # a broker name (never the real one)
CLUSTER = "cluster"
ADDR = "addr"  # host:port (never a real node's)
CLIENT_ID = "client_id"
NAMESPACE = "namespace"  # the name server's KV namespaces
KV_KEY = "kv_key"
TEXT = "text"  # free text
PROPS = "props"  # a properties string: name\x01value\x02...
EXPR = "expr"  # a subscription expression (tags or SQL92)
EXPR_TYPE = "expr_type"  # TAG / SQL92
FILTER_TYPE = "filter_type"  # SINGLE_TAG / MULTI_TAG
MSG_ID = "msg_id"  # 32 hex digits
I32 = "i32"  # any Java int
I64 = "i64"  # any Java long
QUEUE_ID = "queue_id"  # int, a queue of the topic
QUEUE_NUMS = "queue_nums"  # int, how many queues
PERM = "perm"  # int, 2 | 4
SYSFLAG = "sysflag"  # int, MessageSysFlag bits
PULL_SYSFLAG = "pull_sysflag"  # int, PullSysFlag bits (commit, suspend, subscription)
PHY_OFFSET = "phy_offset"  # long, a CommitLog offset
QUEUE_OFFSET = "queue_offset"  # long, an offset in a consume queue
TIMESTAMP = "timestamp"  # long, milliseconds
MILLIS = "millis"  # long, a duration
BOOL = "bool"
DELAY_LEVEL = "delay_level"  # int, 1..18
TRAN_DECISION = "tran_decision"  # int, 0 / 8 / 12
VERSION_NUM = "version_num"  # int, reconsume counts and the like
CRC = "crc"  # int, a CRC32 of the body

NUMERIC = {I32, I64, QUEUE_ID, QUEUE_NUMS, PERM, SYSFLAG, PULL_SYSFLAG, PHY_OFFSET, QUEUE_OFFSET,
           TIMESTAMP, MILLIS, DELAY_LEVEL, TRAN_DECISION, VERSION_NUM, CRC}
# Java ints (32 bits); the other numeric kinds are longs.
INT32_KINDS = {I32, QUEUE_ID, QUEUE_NUMS, PERM, SYSFLAG, PULL_SYSFLAG, DELAY_LEVEL, TRAN_DECISION,
               VERSION_NUM, CRC}

# -- body kinds -----------------------------------------------------------------------------------
NO_BODY = "none"
MESSAGE = "message"  # a message body: any bytes
BATCH = "batch"  # MessageDecoder.encodeMessages entries
HEARTBEAT = "heartbeat"  # HeartbeatData JSON
SUBGROUP = "subgroup"  # SubscriptionGroupConfig JSON
LOCK_MQ = "lock_mq"  # LockBatchRequestBody / UnlockBatchRequestBody JSON
REGISTER = "register"  # RegisterBrokerBody JSON
DATA_VERSION = "data_version"  # DataVersion JSON

BROKER_TARGET = "broker"
NAMESRV_TARGET = "namesrv"


@dataclass(frozen=True, slots=True)
class CodeSpec:
    code: int
    target: str
    fields: tuple[tuple[str, str], ...]  # (extFields name, kind)
    body: str = NO_BODY
    served: bool = True  # False: RocketMQ has it, we answer REQUEST_CODE_NOT_SUPPORTED

    @property
    def name(self) -> str:
        try:
            return RequestCode(self.code).name
        except ValueError:
            return f"UNKNOWN_{self.code}"


_SEND = (("producerGroup", PGROUP), ("topic", TOPIC), ("defaultTopic", TOPIC),
         ("defaultTopicQueueNums", QUEUE_NUMS), ("queueId", QUEUE_ID), ("sysFlag", SYSFLAG),
         ("bornTimestamp", TIMESTAMP), ("flag", I32), ("properties", PROPS),
         ("reconsumeTimes", VERSION_NUM), ("unitMode", BOOL), ("batch", BOOL),
         ("maxReconsumeTimes", VERSION_NUM), ("bname", BROKER))
# SendMessageRequestHeaderV2: the same fields under one-letter names.
_SEND_V2 = tuple((short, kind) for short, (_, kind) in zip("abcdefghijklmn", _SEND, strict=True))
_QUEUE = (("topic", TOPIC), ("queueId", QUEUE_ID))
_REGISTER = (("brokerName", BROKER), ("brokerAddr", ADDR), ("clusterName", CLUSTER),
             ("haServerAddr", ADDR), ("brokerId", I64), ("compressed", BOOL), ("bodyCrc32", CRC))
_BROKER_ID = (("brokerName", BROKER), ("brokerAddr", ADDR), ("clusterName", CLUSTER),
              ("brokerId", I64))

_SPECS = [
    # -- the broker: sends ------------------------------------------------------------------------
    CodeSpec(RequestCode.SEND_MESSAGE, BROKER_TARGET, _SEND, MESSAGE),
    CodeSpec(RequestCode.SEND_MESSAGE_V2, BROKER_TARGET, _SEND_V2, MESSAGE),
    CodeSpec(RequestCode.SEND_BATCH_MESSAGE, BROKER_TARGET, _SEND_V2, BATCH),
    CodeSpec(RequestCode.SEND_REPLY_MESSAGE, BROKER_TARGET, _SEND, MESSAGE, served=False),
    CodeSpec(RequestCode.SEND_REPLY_MESSAGE_V2, BROKER_TARGET, _SEND_V2, MESSAGE, served=False),
    CodeSpec(RequestCode.CONSUMER_SEND_MSG_BACK, BROKER_TARGET, (
        ("offset", PHY_OFFSET), ("group", GROUP), ("delayLevel", DELAY_LEVEL),
        ("originMsgId", MSG_ID), ("originTopic", TOPIC), ("unitMode", BOOL),
        ("maxReconsumeTimes", VERSION_NUM))),
    CodeSpec(RequestCode.END_TRANSACTION, BROKER_TARGET, (
        ("producerGroup", PGROUP), ("tranStateTableOffset", QUEUE_OFFSET),
        ("commitLogOffset", PHY_OFFSET), ("commitOrRollback", TRAN_DECISION),
        ("fromTransactionCheck", BOOL), ("msgId", MSG_ID), ("transactionId", MSG_ID))),
    # -- the broker: pulls, queries, offsets ------------------------------------------------------------
    CodeSpec(RequestCode.PULL_MESSAGE, BROKER_TARGET, (
        ("consumerGroup", GROUP), ("topic", TOPIC), ("queueId", QUEUE_ID),
        ("queueOffset", QUEUE_OFFSET), ("maxMsgNums", I32), ("sysFlag", PULL_SYSFLAG),
        ("commitOffset", QUEUE_OFFSET), ("suspendTimeoutMillis", MILLIS),
        ("subscription", EXPR), ("subVersion", TIMESTAMP), ("expressionType", EXPR_TYPE),
        ("bname", BROKER))),
    CodeSpec(RequestCode.POP_MESSAGE, BROKER_TARGET, (
        ("consumerGroup", GROUP), ("topic", TOPIC), ("queueId", QUEUE_ID), ("maxMsgNums", I32),
        ("invisibleTime", MILLIS), ("pollTime", MILLIS), ("bornTime", TIMESTAMP),
        ("initMode", I32), ("expType", EXPR_TYPE), ("exp", EXPR), ("order", BOOL),
        ("attemptId", TEXT))),
    CodeSpec(RequestCode.ACK_MESSAGE, BROKER_TARGET, (
        ("consumerGroup", GROUP), ("topic", TOPIC), ("queueId", QUEUE_ID), ("extraInfo", TEXT),
        ("offset", QUEUE_OFFSET))),
    CodeSpec(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, BROKER_TARGET, (
        ("consumerGroup", GROUP), ("topic", TOPIC), ("queueId", QUEUE_ID), ("extraInfo", TEXT),
        ("offset", QUEUE_OFFSET), ("invisibleTime", MILLIS))),
    CodeSpec(RequestCode.QUERY_MESSAGE, BROKER_TARGET, (
        ("topic", TOPIC), ("key", TEXT), ("maxNum", I32), ("beginTimestamp", TIMESTAMP),
        ("endTimestamp", TIMESTAMP), ("_UNIQUE_KEY_QUERY", BOOL))),
    CodeSpec(RequestCode.VIEW_MESSAGE_BY_ID, BROKER_TARGET, (("offset", PHY_OFFSET),)),
    CodeSpec(RequestCode.QUERY_CONSUMER_OFFSET, BROKER_TARGET, (
        ("consumerGroup", GROUP), *_QUEUE, ("setZeroIfNotFound", BOOL))),
    CodeSpec(RequestCode.UPDATE_CONSUMER_OFFSET, BROKER_TARGET, (
        ("consumerGroup", GROUP), *_QUEUE, ("commitOffset", QUEUE_OFFSET))),
    CodeSpec(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, BROKER_TARGET, (*_QUEUE, ("timestamp", TIMESTAMP))),
    CodeSpec(RequestCode.GET_MAX_OFFSET, BROKER_TARGET, _QUEUE),
    CodeSpec(RequestCode.GET_MIN_OFFSET, BROKER_TARGET, _QUEUE),
    CodeSpec(RequestCode.GET_EARLIEST_MSG_STORETIME, BROKER_TARGET, _QUEUE),
    CodeSpec(RequestCode.GET_ALL_CONSUMER_OFFSET, BROKER_TARGET, ()),
    CodeSpec(RequestCode.GET_ALL_DELAY_OFFSET, BROKER_TARGET, ()),
    CodeSpec(RequestCode.QUERY_CONSUME_QUEUE, BROKER_TARGET, (
        *_QUEUE, ("index", QUEUE_OFFSET), ("count", I32), ("consumerGroup", GROUP)), served=False),
    # -- the broker: clients ---------------------------------------------------------------------------
    CodeSpec(RequestCode.HEART_BEAT, BROKER_TARGET, (), HEARTBEAT),
    CodeSpec(RequestCode.UNREGISTER_CLIENT, BROKER_TARGET, (
        ("clientID", CLIENT_ID), ("producerGroup", PGROUP), ("consumerGroup", GROUP))),
    CodeSpec(RequestCode.GET_CONSUMER_LIST_BY_GROUP, BROKER_TARGET, (("consumerGroup", GROUP),)),
    CodeSpec(RequestCode.LOCK_BATCH_MQ, BROKER_TARGET, (), LOCK_MQ),
    CodeSpec(RequestCode.UNLOCK_BATCH_MQ, BROKER_TARGET, (), LOCK_MQ),
    CodeSpec(RequestCode.CONSUME_MESSAGE_DIRECTLY, BROKER_TARGET, (
        ("consumerGroup", GROUP), ("clientId", CLIENT_ID), ("msgId", MSG_ID),
        ("brokerName", BROKER))),
    CodeSpec(RequestCode.GET_CONSUMER_RUNNING_INFO, BROKER_TARGET, (
        ("consumerGroup", GROUP), ("clientId", CLIENT_ID), ("jstackEnable", BOOL))),
    CodeSpec(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, BROKER_TARGET, (
        ("topic", TOPIC), ("group", GROUP), ("timestamp", TIMESTAMP), ("isForce", BOOL))),
    CodeSpec(RequestCode.CHECK_CLIENT_CONFIG, BROKER_TARGET, (), HEARTBEAT, served=False),
    # -- the broker: admin -------------------------------------------------------------------------------
    CodeSpec(RequestCode.UPDATE_AND_CREATE_TOPIC, BROKER_TARGET, (
        ("topic", TOPIC), ("defaultTopic", TOPIC), ("readQueueNums", QUEUE_NUMS),
        ("writeQueueNums", QUEUE_NUMS), ("perm", PERM), ("topicFilterType", FILTER_TYPE),
        ("topicSysFlag", I32), ("order", BOOL))),
    CodeSpec(RequestCode.DELETE_TOPIC_IN_BROKER, BROKER_TARGET, (("topic", TOPIC),)),
    CodeSpec(RequestCode.GET_ALL_TOPIC_CONFIG, BROKER_TARGET, ()),
    CodeSpec(RequestCode.GET_BROKER_RUNTIME_INFO, BROKER_TARGET, ()),
    CodeSpec(RequestCode.GET_BROKER_HA_STATUS, BROKER_TARGET, ()),
    CodeSpec(RequestCode.GET_TOPIC_STATS_INFO, BROKER_TARGET, (("topic", TOPIC),)),
    CodeSpec(RequestCode.GET_CONSUME_STATS, BROKER_TARGET, (("consumerGroup", GROUP), ("topic", TOPIC))),
    CodeSpec(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, BROKER_TARGET, (("topic", TOPIC),)),
    CodeSpec(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, BROKER_TARGET, (), SUBGROUP),
    CodeSpec(RequestCode.DELETE_SUBSCRIPTIONGROUP, BROKER_TARGET, (
        ("groupName", GROUP), ("cleanOffset", BOOL))),
    CodeSpec(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, BROKER_TARGET, ()),
    CodeSpec(RequestCode.GET_CONSUMER_CONNECTION_LIST, BROKER_TARGET, (("consumerGroup", GROUP),)),
    CodeSpec(RequestCode.GET_TOPIC_CONFIG_LIST, BROKER_TARGET, (), served=False),
    CodeSpec(RequestCode.UPDATE_BROKER_CONFIG, BROKER_TARGET, (), REGISTER, served=False),
    CodeSpec(RequestCode.GET_BROKER_CONFIG, BROKER_TARGET, (), served=False),
    CodeSpec(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, BROKER_TARGET, (), served=False),
    CodeSpec(RequestCode.QUERY_CONSUME_TIME_SPAN, BROKER_TARGET, (
        ("topic", TOPIC), ("group", GROUP)), served=False),
    CodeSpec(RequestCode.RESUME_CHECK_HALF_MESSAGE, BROKER_TARGET, (("msgId", MSG_ID),), served=False),
    # -- the name server ---------------------------------------------------------------------------------
    CodeSpec(RequestCode.REGISTER_BROKER, NAMESRV_TARGET, _REGISTER, REGISTER),
    CodeSpec(RequestCode.UNREGISTER_BROKER, NAMESRV_TARGET, _BROKER_ID),
    CodeSpec(RequestCode.QUERY_DATA_VERSION, NAMESRV_TARGET, _BROKER_ID, DATA_VERSION),
    CodeSpec(RequestCode.GET_ROUTEINFO_BY_TOPIC, NAMESRV_TARGET, (
        ("topic", TOPIC), ("acceptStandardJsonOnly", BOOL))),
    CodeSpec(RequestCode.GET_BROKER_CLUSTER_INFO, NAMESRV_TARGET, ()),
    CodeSpec(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, NAMESRV_TARGET, ()),
    CodeSpec(RequestCode.GET_TOPICS_BY_CLUSTER, NAMESRV_TARGET, (("cluster", CLUSTER),)),
    CodeSpec(RequestCode.DELETE_TOPIC_IN_NAMESRV, NAMESRV_TARGET, (
        ("topic", TOPIC), ("clusterName", CLUSTER))),
    CodeSpec(RequestCode.PUT_KV_CONFIG, NAMESRV_TARGET, (
        ("namespace", NAMESPACE), ("key", KV_KEY), ("value", TEXT))),
    CodeSpec(RequestCode.GET_KV_CONFIG, NAMESRV_TARGET, (("namespace", NAMESPACE), ("key", KV_KEY))),
    CodeSpec(RequestCode.DELETE_KV_CONFIG, NAMESRV_TARGET, (("namespace", NAMESPACE), ("key", KV_KEY))),
    CodeSpec(RequestCode.GET_KVLIST_BY_NAMESPACE, NAMESRV_TARGET, (("namespace", NAMESPACE),)),
    CodeSpec(RequestCode.WIPE_WRITE_PERM_OF_BROKER, NAMESRV_TARGET, (("brokerName", BROKER),)),
    CodeSpec(RequestCode.ADD_WRITE_PERM_OF_BROKER, NAMESRV_TARGET, (("brokerName", BROKER),)),
    CodeSpec(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, NAMESRV_TARGET, (), served=False),
    CodeSpec(RequestCode.GET_UNIT_TOPIC_LIST, NAMESRV_TARGET, (), served=False),
    CodeSpec(RequestCode.UPDATE_NAMESRV_CONFIG, NAMESRV_TARGET, (), REGISTER, served=False),
    CodeSpec(RequestCode.GET_NAMESRV_CONFIG, NAMESRV_TARGET, (), served=False),
]

CATALOGUE: dict[tuple[str, int], CodeSpec] = {(s.target, int(s.code)): s for s in _SPECS}
BROKER_CODES = sorted(code for target, code in CATALOGUE if target == BROKER_TARGET)
NAMESRV_CODES = sorted(code for target, code in CATALOGUE if target == NAMESRV_TARGET)
# Codes nobody serves: some RocketMQ has, some it never had, the i16 and i32 edges.
UNKNOWN_CODES = (-1, 0, 1, 9, 16, 44, 99, 999, 9999, 32767, -32768, 65535, 2**31 - 1, -(2**31))


def spec_for(target: str, code: int) -> CodeSpec:
    """The catalogue's entry, or a field-less one for a code it does not list."""
    spec = CATALOGUE.get((target, int(code)))
    if spec is None:
        return CodeSpec(int(code), target, (), MESSAGE, served=False)
    return spec


def served_codes(target: str) -> list[int]:
    return sorted(code for (t, code), spec in CATALOGUE.items() if t == target and spec.served)
