"""Valid and hostile values for header fields, properties strings and bodies.

Every function takes a ``random.Random`` so a seed replays the same values. A hostile value
comes with the kind of hostility it is (the campaign's report counts them). Values are JSON
values (str, int, float, bool, dict, list, None): the JSON header can carry any of them in
extFields; the ROCKETMQ binary header only strings, so frames.py turns the rest into text.
"""

from __future__ import annotations

import json
import random
import struct
import time

from tests.fuzz import catalogue as cat

# -- the hostile traffic's own names: none is a name the legitimate traffic uses ----------------
TOPICS = ("FzTopic0", "FzTopic1", "FzOrder", "TBW102", "%RETRY%FzGroup0", "%DLQ%FzGroup0")
GROUPS = ("FzGroup0", "FzGroup1", "TOOLS_CONSUMER", "CID_RMQ_SYS_TRANS")
PGROUPS = ("FzProducer0", "FzProducer1")
BROKERS = ("FzBroker0", "FzBroker1")
CLUSTERS = ("DefaultCluster", "FzCluster")
ADDRS = ("127.0.0.1:1", "10.255.255.1:10911", "fz-host:10911", "[::1]:1")
CLIENT_IDS = ("127.0.0.1@fz#1", "fz-client")
NAMESPACES = ("ORDER_TOPIC_CONFIG", "FzNamespace")
TAGS = ("TagA", "TagB", "*")

INT_EDGES = (2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**33, 2**53 + 1, 2**63 - 1, 2**63,
             -(2**63), -(2**63) - 1, 2**64, 10**30, -1, 0, 65535, 65536, 32767, 32768, -32769)
FLOATS = (1.5, -0.0, 0.5, 1e308, -1e308, 1e-300, float("inf"), float("-inf"), float("nan"))
NUMBER_TEXTS = ("abc", "", " ", "1.5", "1e3", "0x10", " 12", "12 ", "+5", "1_000", "١٢", "Infinity",
                "-Infinity", "NaN", "nan", "inf", "-", "--1", "9" * 5000, "1e400", "-1e400",
                "12abc", "true", "null", "\x00", "0" * 300 + "1")
SYSTEM_NAMES = ("%RETRY%", "%DLQ%", "%RETRY%FzGroup0", "%DLQ%FzGroup1", "RMQ_SYS_TRANS_HALF_TOPIC",
                "RMQ_SYS_TRANS_OP_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRACE_TOPIC",
                "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest", "rmq_sys_fz",
                "DefaultCluster", "CID_RMQ_SYS_TRANS", "TOOLS_CONSUMER")
PATH_NAMES = ("../../../../etc/passwd", "..", ".", "a/b", "/", "\\", "C:\\fz", "fz/../..",
              "config/../../x", "topics.json", "%2e%2e%2f")
ODD_STRINGS = ("", " ", "\x00", "a\x00b", "\n", "line1\nline2", "\r\n", "\x01", "\x02", "a\x01b\x02",
               "\t", "\u202eevil", "\U0001F600" * 10, "é", "\ufeff", "\uffff", "\x7f", "\x80",
               "\u0085", "\u2028", "%s%s%n", "{}", "[]", "null", "true", "-1", "*", "||", "' OR 1=1",
               "${jndi:ldap://x}", "TAGS\x01a\x02", "a b c", "\\u0000")
SURROGATES = ("\ud800", "a\udfffb", "\udbff\udc00\ud800")  # only the JSON header can carry these
SQL_EXPRS = ("a > 1", "a BETWEEN 1 AND 2", "a IN ('x')", "a IS NULL", "(((((", "a > 99999999999999999999",
             "a = 'x' AND", "TRUE", "a > 1.7976931348623157E309", "NOT NOT NOT a", "a LIKE '%'",
             "a = " + "1 OR a = " * 300 + "1", "(" * 2000 + "a > 1" + ")" * 2000)
DELAYS = ("-1", "0", "1", "3", "18", "19", "100", str(2**31), str(2**63), "abc", "1.5", " ", "٣")


def long_string(rng: random.Random) -> tuple[str, str]:
    n = rng.choice((127, 128, 255, 256, 1000, 4096, 32767, 32768, 70_000))
    return rng.choice(("a", "%", "é", "\U0001F600", "-")) * n, f"long-string-{n}"


def odd_string(rng: random.Random, json_header: bool = True) -> tuple[object, str]:
    """A string field's hostile value and its kind."""
    roll = rng.random()
    if roll < 0.25:
        return rng.choice(ODD_STRINGS), "odd-string"
    if roll < 0.40:
        return long_string(rng)
    if roll < 0.55:
        return rng.choice(SYSTEM_NAMES), "system-name"
    if roll < 0.65:
        return rng.choice(PATH_NAMES), "path-name"
    if roll < 0.72 and json_header:
        return rng.choice(SURROGATES), "surrogate"
    if roll < 0.80:
        return "", "empty"
    return wrong_type(rng, numeric=False)


def wrong_type(rng: random.Random, numeric: bool) -> tuple[object, str]:
    roll = rng.random()
    if numeric and roll < 0.45:
        return rng.choice(NUMBER_TEXTS), "wrong-type"
    if roll < 0.6:
        return rng.choice(FLOATS), "float"
    if roll < 0.7:
        return rng.choice((True, False)), "bool"
    if roll < 0.8:
        return rng.choice(({"a": 1}, [1, 2], {}, [], {"$ref": "$"}, [[[]]])), "json-object"
    if roll < 0.9:
        return rng.choice(INT_EDGES), "int-boundary"
    return None, "null"


def hostile_number(rng: random.Random) -> tuple[object, str]:
    roll = rng.random()
    if roll < 0.45:
        value = rng.choice(INT_EDGES)
        return (str(value) if rng.random() < 0.6 else value), "int-boundary"
    if roll < 0.55:
        return rng.choice((-1, -2, -100, -(2**20), "-1", "-0")), "negative"
    if roll < 0.62:
        return rng.choice(("9" * 5000, "-" + "9" * 400, 10**400, "1e400")), "huge-number"
    return wrong_type(rng, numeric=True)


# -- valid values ------------------------------------------------------------------------------------
class Known:
    """What the hostile traffic learned from answers: CommitLog and queue offsets of records
    (so requests that need a real record, such as END_TRANSACTION, get past the lookup)."""

    def __init__(self) -> None:
        self.phy_offsets: list[int] = [0]
        self.queue_offsets: list[int] = [0]
        self.max_phy_offset = 0
        self.now_ms = int(time.time() * 1000)  # "now" for timestamps; the generator sets it

    def learn(self, fields: dict[str, str]) -> None:
        msg_id = fields.get("msgId") or ""
        for one in msg_id.split(","):
            if len(one) == 32:
                try:
                    self._add(self.phy_offsets, int(one[16:], 16))
                except ValueError:
                    pass
        offset = fields.get("queueOffset")
        if offset and offset.isdigit():
            self._add(self.queue_offsets, int(offset))

    @staticmethod
    def _add(values: list[int], value: int) -> None:
        if value not in values:
            values.append(value)
            del values[:-64]


def valid_value(rng: random.Random, kind: str, known: Known) -> object:
    """A value of the right type that RocketMQ would accept for this kind of field."""
    choice = rng.choice
    table = {
        cat.TOPIC: lambda: choice(TOPICS), cat.GROUP: lambda: choice(GROUPS),
        cat.PGROUP: lambda: choice(PGROUPS), cat.BROKER: lambda: choice(BROKERS),
        cat.CLUSTER: lambda: choice(CLUSTERS), cat.ADDR: lambda: choice(ADDRS),
        cat.CLIENT_ID: lambda: choice(CLIENT_IDS), cat.NAMESPACE: lambda: choice(NAMESPACES),
        cat.KV_KEY: lambda: choice((*TOPICS, "k1")), cat.TEXT: lambda: choice(("hello", "k1", "order-1")),
        cat.PROPS: lambda: valid_properties(rng), cat.EXPR: lambda: choice(("*", "TagA || TagB", "TagA")),
        cat.EXPR_TYPE: lambda: choice(("TAG", "TAG", "SQL92")),
        cat.FILTER_TYPE: lambda: choice(("SINGLE_TAG", "MULTI_TAG")),
        cat.MSG_ID: lambda: f"7F00000100002A9F{choice(known.phy_offsets):016X}",
        cat.I32: lambda: rng.randint(0, 100), cat.I64: lambda: rng.randint(0, 1000),
        cat.QUEUE_ID: lambda: rng.randint(-1, 3), cat.QUEUE_NUMS: lambda: rng.randint(1, 8),
        cat.PERM: lambda: choice((2, 4, 6)), cat.SYSFLAG: lambda: choice((0, 0, 0, 4, 8, 12)),
        cat.PULL_SYSFLAG: lambda: choice((0, 1, 4, 5, 6)),
        cat.PHY_OFFSET: lambda: choice(known.phy_offsets),
        cat.QUEUE_OFFSET: lambda: choice((*known.queue_offsets, rng.randint(0, 10))),
        cat.TIMESTAMP: lambda: known.now_ms + rng.randint(-60_000, 60_000),
        cat.MILLIS: lambda: rng.randint(0, 200), cat.BOOL: lambda: choice(("true", "false", True)),
        cat.DELAY_LEVEL: lambda: rng.randint(0, 18), cat.TRAN_DECISION: lambda: choice((0, 8, 12)),
        cat.VERSION_NUM: lambda: rng.randint(0, 16), cat.CRC: lambda: 0,
    }
    return table[kind]()


def hostile_value(rng: random.Random, kind: str, json_header: bool) -> tuple[object, str]:
    if kind == cat.PROPS:
        return hostile_properties(rng)
    if kind == cat.EXPR and rng.random() < 0.4:
        return rng.choice(SQL_EXPRS), "odd-expression"
    if kind == cat.BOOL:
        if rng.random() < 0.5:
            return rng.choice(("yes", "TRUE", "1", "0", "tru", " true", "\x00")), "wrong-type"
        return wrong_type(rng, numeric=False)
    if kind in cat.NUMERIC:
        return hostile_number(rng)
    return odd_string(rng, json_header)


# -- properties strings (name\x01value\x02...) -----------------------------------------------------
def props(pairs) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs)


def valid_properties(rng: random.Random) -> str:
    pairs = [("TAGS", rng.choice(TAGS)), ("KEYS", f"fz-{rng.randint(0, 999)}"), ("WAIT", "true")]
    if rng.random() < 0.2:
        pairs.append(("DELAY", str(rng.randint(1, 3))))
    if rng.random() < 0.2:
        pairs += [("TRAN_MSG", "true"), ("PGROUP", rng.choice(PGROUPS))]
    return props(pairs)


def hostile_properties(rng: random.Random) -> tuple[str, str]:
    base = [("TAGS", "TagA"), ("WAIT", "true")]
    pick = rng.randrange(15)
    if pick == 0:
        return rng.choice(("TAGSxKEYS", "TAGS\x01", "TAGS\x01\x02", "\x01x\x02", "\x02\x02\x01",
                           "\x01", "\x02", "TAGS\x01a\x01b\x02", "a" * 40_000)), "props-separators"
    if pick == 1:
        return props([*base, ("KEYS", "k " * rng.choice((16_000, 16_383, 20_000)))]), "props-huge"
    if pick == 2:
        return props([*base, ("KEYS", " ".join(f"k{i}" for i in range(rng.choice((500, 3000)))))]), \
            "props-many-keys"
    if pick == 3:
        return props([*base, ("DELAY", rng.choice(DELAYS))]), "props-delay"
    if pick == 4:
        extra = [("PGROUP", rng.choice(PGROUPS))] if rng.random() < 0.7 else []
        if rng.random() < 0.3:
            extra.append(("DELAY", rng.choice(DELAYS)))
        return props([*base, ("TRAN_MSG", rng.choice(("true", "TRUE", "True"))), *extra]), "props-tran-msg"
    if pick == 5:
        return props([*base, ("REAL_TOPIC", rng.choice((*TOPICS, *SYSTEM_NAMES, ""))),
                      ("REAL_QID", rng.choice(("999999", "-1", "abc", str(2**31)))),
                      ("DELAY", rng.choice(("1", "2")))]), "props-real-topic"
    if pick == 6:
        uniq = rng.choice(("", "zz", "0" * 5000, "../x", "\x00"))
        return props([*base, ("UNIQ_KEY", uniq)]), "props-uniq-key"
    if pick == 7:
        name = rng.choice(("MAX_RECONSUME_TIMES", "RECONSUME_TIME", "WAIT", "MIN_OFFSET", "MAX_OFFSET",
                           "__STARTDELIVERTIME", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "CLUSTER",
                           "TRANSACTION_CHECK_TIMES", "TRAN_PREPARED_QUEUE_OFFSET",
                           "CHECK_IMMUNITY_TIME_IN_SECONDS", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID"))
        value, _ = hostile_number(rng)
        return props([*base, (name, value), ("TRAN_MSG", "true"), ("PGROUP", rng.choice(PGROUPS))]
                     if rng.random() < 0.3 else [*base, (name, value)]), "props-number-field"
    if pick == 8:
        return props([("DELAY", "3"), ("DELAY", "abc"), ("TAGS", "a"), ("TAGS", "")]), "props-duplicate"
    if pick == 9:
        target = rng.choice((32_767, 32_768, 65_535, 65_536))
        head = props(base) + "KEYS\x01"
        return head + "k" * (target - len(head) - 1) + "\x02", f"props-length-{target}"
    if pick == 10:
        value, _ = odd_string(rng, json_header=False)
        return props([*base, ("TAGS", value)]), "props-odd-tags"
    if pick == 11:
        return props([("\x00", "\x00"), ("", "x"), (" ", " "), ("\n", "\n")]), "props-odd-names"
    if pick == 12:
        return "", "props-empty"
    if pick == 13:
        return props([*base, ("TRAN_MSG", "true"), ("PGROUP", rng.choice(PGROUPS)),
                      ("CHECK_IMMUNITY_TIME_IN_SECONDS", rng.choice(("abc", "-5", "1e9", str(2**63))))]), \
            "props-tran-immunity"
    value, _ = odd_string(rng, json_header=False)
    return props([*base, ("KEYS", value)]), "props-odd-keys"


# -- bodies ----------------------------------------------------------------------------------------
def message_body(rng: random.Random, big: bool) -> tuple[bytes, str]:
    roll = rng.random()
    if roll < 0.6:
        return rng.randbytes(rng.randint(1, 200)), "body-small"
    if roll < 0.75:
        return b"", "body-empty"
    if roll < 0.85:
        return rng.choice((b"\x00" * 1000, b"\xff" * 5000, b"{", "é".encode() * 3000)), "body-odd"
    if roll < 0.97 or not big:
        return rng.randbytes(rng.choice((4097, 65_536, 200_000))), "body-medium"
    size = rng.choice((1 << 20, (1 << 20) + 1, 4 * (1 << 20), 4 * (1 << 20) + 1, 16 * (1 << 20) - 4096))
    return b"\x00" * size, f"body-huge-{size}"


def batch_entry(flag: int, body: bytes, properties: bytes, size: int | None = None,
                body_len: int | None = None, props_len: int | None = None) -> bytes:
    size = 20 + len(body) + 2 + len(properties) if size is None else size
    body_len = len(body) if body_len is None else body_len
    props_len = len(properties) if props_len is None else props_len
    return (struct.pack(">iiiii", size, 0, 0, flag, body_len) + body
            + struct.pack(">h", max(-32768, min(32767, props_len))) + properties)


def batch_body(rng: random.Random) -> tuple[bytes, str]:
    good = [batch_entry(0, rng.randbytes(rng.randint(1, 50)), valid_properties(rng).encode())
            for _ in range(rng.randint(1, 4))]
    pick = rng.randrange(10)
    if pick == 0:
        return b"".join(good), "batch-valid"
    if pick == 1:
        whole = b"".join(good)
        return whole[: rng.randrange(1, len(whole))], "batch-truncated"
    if pick == 2:
        return batch_entry(0, b"x", b"", size=rng.choice((-1, 0, 21, 2**31 - 1))), "batch-bad-size"
    if pick == 3:
        return batch_entry(0, b"x", b"", body_len=rng.choice((-1, 2**31 - 1, 100))), "batch-bad-body-len"
    if pick == 4:
        return batch_entry(0, b"x", b"TAGS\x01a\x02", props_len=rng.choice((-1, -32768, 1000))), \
            "batch-bad-props-len"
    if pick == 5:
        return b"".join(batch_entry(0, b"", b"") for _ in range(rng.choice((1000, 5000)))), "batch-many-empty"
    if pick == 6:
        return batch_entry(rng.choice((2**31 - 1, -(2**31), -1)), b"x", b"\xff\xfe\x00"), "batch-non-utf8"
    if pick == 7:
        return batch_entry(0, b"x", props([("DELAY", "3")]).encode()), "batch-delay"
    if pick == 8:
        return batch_entry(0, b"x", hostile_properties(rng)[0].encode("utf-8", "replace")[:32767]), \
            "batch-hostile-props"
    return rng.randbytes(rng.randint(0, 100)), "batch-garbage"


def _hostile_json(rng: random.Random, shape: object) -> object:
    """``shape`` with one leaf, or the whole thing, replaced by something hostile."""
    if rng.random() < 0.15:
        return wrong_type(rng, numeric=False)[0]
    if isinstance(shape, dict) and shape:
        key = rng.choice(list(shape))
        out = dict(shape)
        out[key] = _hostile_json(rng, shape[key]) if rng.random() < 0.6 else hostile_any(rng)
        return out
    if isinstance(shape, list) and shape:
        out = list(shape)
        index = rng.randrange(len(out))
        out[index] = _hostile_json(rng, out[index])
        return out
    return hostile_any(rng)


def hostile_any(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.4:
        return hostile_number(rng)[0]
    if roll < 0.8:
        return odd_string(rng)[0]
    return wrong_type(rng, numeric=False)[0]


def json_shape(rng: random.Random, kind: str, now_ms: int) -> object:
    """A valid body of this kind, as Java and Go clients send it."""
    if kind == cat.HEARTBEAT:
        return {"clientID": rng.choice(CLIENT_IDS), "consumerDataSet": [{
            "groupName": rng.choice(GROUPS), "consumeType": "CONSUME_PASSIVELY",
            "messageModel": rng.choice(("CLUSTERING", "BROADCASTING", 1)),
            "consumeFromWhere": rng.choice(("CONSUME_FROM_LAST_OFFSET", 4)), "unitMode": False,
            "subscriptionDataSet": [{"topic": rng.choice(TOPICS), "subString": "*", "tagsSet": ["TagA"],
                                     "codeSet": [123], "subVersion": 1, "expressionType": "TAG"}]}],
            "producerDataSet": [{"groupName": rng.choice(PGROUPS)}]}
    if kind == cat.SUBGROUP:
        return {"groupName": rng.choice(GROUPS), "consumeEnable": True, "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}
    if kind == cat.LOCK_MQ:
        return {"consumerGroup": rng.choice(GROUPS), "clientId": rng.choice(CLIENT_IDS),
                "onlyThisBroker": False,
                "mqSet": [{"topic": rng.choice(TOPICS), "brokerName": rng.choice(BROKERS), "queueId": 0}]}
    if kind == cat.REGISTER:
        topic = rng.choice(TOPICS)
        return {"topicConfigSerializeWrapper": {
            "dataVersion": {"timestamp": now_ms, "counter": rng.randint(0, 9)},
            "topicConfigTable": {topic: {"topicName": topic, "readQueueNums": 4, "writeQueueNums": 4,
                                         "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                         "order": False}}},
            "filterServerList": []}
    if kind == cat.DATA_VERSION:
        return {"timestamp": now_ms, "counter": rng.randint(0, 9)}
    return {}


def json_body(rng: random.Random, kind: str, now_ms: int) -> tuple[bytes, str]:
    roll = rng.random()
    shape = json_shape(rng, kind, now_ms)
    if roll < 0.15:
        return json.dumps(shape).encode(), "body-json-valid"
    if roll < 0.65:
        return json.dumps(_hostile_json(rng, shape), allow_nan=True).encode(), "body-json-hostile-value"
    if roll < 0.75:
        depth = rng.choice((500, 5000, 100_000))
        return b"[" * depth + b"]" * depth, f"body-json-deep-{depth}"
    if roll < 0.85:
        return rng.choice((b"{", b"{\"a\":", b"\xff\xfe{}", b"null", b"[]", b"1", b"\"x\"", b"{a:1,}",
                           b"{\"a\":1}{", b"\x00")), "body-json-garbage"
    if roll < 0.92:
        text = json.dumps(shape)
        return text.replace('"', "")[: rng.randint(0, len(text))].encode(), "body-json-fastjson-ish"
    return rng.randbytes(rng.randint(0, 300)), "body-garbage"


def body_for(rng: random.Random, kind: str, big: bool, now_ms: int) -> tuple[bytes, str]:
    if kind == cat.MESSAGE:
        return message_body(rng, big)
    if kind == cat.BATCH:
        return batch_body(rng)
    if kind == cat.NO_BODY:
        return (b"", "") if rng.random() < 0.8 else message_body(rng, big=False)
    return json_body(rng, kind, now_ms)
