"""What a message is to the store: properties, sysFlag bits, tag hashes and the inner message.

The property keys and separators are RocketMQ's ``MessageConst`` / ``MessageDecoder`` facts; the
flag bits are ``MessageSysFlag``. ``MessageExtBrokerInner`` is the message as the broker hands it
to the store (RocketMQ's class of the same name).
"""

from __future__ import annotations

import sys
import zlib
from array import array
from dataclasses import dataclass, field
from functools import lru_cache
from operator import mul

from common import speedups

# --- property keys (MessageConst) ---------------------------------------------------------
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Written by the broker's check-back on the half messages it puts back; stripped from what
# producers send and from committed messages, so no message passes for such a copy.
TRANSACTION_CHECK_PROPERTIES = (PROPERTY_TRANSACTION_CHECK_TIMES, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)

KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# --- sysFlag bits (MessageSysFlag) ----------------------------------------------------------
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

# The times, in ms since the epoch, every reader's time type holds: years 1 to 9999
# (protobuf's Timestamp, Python's datetime, what Spark formats). A stored time is whatever the
# producer sent as its born time (any int64): readers show one past these at the nearest end.
TIME_RANGE_MS = (-62_135_596_800_000, 253_402_300_799_999)

def timer_number(text: str | None) -> int | None:
    """A timer property's value (TIMER_DELIVER_MS, TIMER_DELAY_MS, TIMER_DELAY_SEC) as the broker
    reads it: a whole number of at most 18 ASCII digits, spaces around it allowed; None for
    anything else ("²" is a digit to str.isdigit, and no number to int)."""
    if text is None:
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


# A compressed body is inflated to at most this by readers that hand bodies on (the console,
# an export, our client): a body a producer compressed is at most maxMessageSize (4 MiB)
# before; a "compressed" body that inflates past this is a bomb, and any client may send one.
MAX_INFLATED_BODY = 64 * 1024 * 1024


def inflated(body: bytes, limit: int = MAX_INFLATED_BODY) -> bytes | None:
    """A body its producer compressed (COMPRESSED_FLAG), as it sent it; None when it does not
    inflate within ``limit`` bytes or is not zlib at all (any client may set the flag on any
    bytes): the reader then keeps the body as stored rather than fail on the message."""
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, limit)
    except zlib.error:
        return None
    return plain if inflater.eof and not inflater.unconsumed_tail else None


# Topics the store itself writes to (TopicValidator / ScheduleMessageService).
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# 5.x timer messages wait here until due (any delivery time, not a delay level).
TIMER_TOPIC = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
# The system group whose offsets on those two queues record how far the check-back has come.
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of a sysFlag (0x0, 0x4, 0x8 or 0xC)."""
    return sys_flag & TRANSACTION_TYPE_MASK


def reset_transaction_type(sys_flag: int, tran_type: int) -> int:
    """``sys_flag`` with its transaction bits replaced by ``tran_type``."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | tran_type


# --- properties string ----------------------------------------------------------------------
def properties_to_string(properties: dict[str, str]) -> str:
    """Serialise properties as RocketMQ does: ``name\\x01value\\x02`` for every pair."""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items() if v is not None)


def string_to_properties(text: str) -> dict[str, str]:
    """Parse a properties string; malformed segments are skipped as RocketMQ skips them."""
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


def properties_normalized_pure(text: str) -> bool:
    """Whether ``text`` is already what :func:`properties_to_string` writes for its own parse:
    a message whose properties are can be stored with the string as it came (see
    :func:`properties_normalized`)."""
    return properties_to_string(string_to_properties(text)) == text


def properties_normalized(text: str) -> bool:
    """:func:`properties_normalized_pure`, in one pass of C when the compiled core is built
    (which may say False for what it does not check itself, such as over 64 pairs; a False is
    only ever a slower path, never a different result)."""
    if _properties_normalized_compiled is not None:
        return _properties_normalized_compiled(text)
    return properties_normalized_pure(text)


def property_from_string(text: str, name: str) -> str | None:
    """One property's value without parsing the whole string (the put and dispatch paths).

    Agrees with :func:`string_to_properties`: the last non-empty occurrence wins.
    """
    needle = name + NAME_VALUE_SEPARATOR
    stop = len(text)
    while True:
        i = text.rfind(needle, 0, stop)
        if i < 0:
            return None
        if i == 0 or text[i - 1] == PROPERTY_SEPARATOR:
            begin = i + len(needle)
            end = text.find(PROPERTY_SEPARATOR, begin)
            value = text[begin:] if end < 0 else text[begin:end]
            if value:
                return value
        stop = i + len(needle) - 1


def dispatch_properties_pure(text: str) -> tuple[str | None, str | None, str | None, str | None]:
    """(TAGS, KEYS, UNIQ_KEY, DELAY) of a properties string: what dispatch reads of a record."""
    return (
        property_from_string(text, PROPERTY_TAGS),
        property_from_string(text, PROPERTY_KEYS),
        property_from_string(text, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        property_from_string(text, PROPERTY_DELAY_TIME_LEVEL),
    )


def dispatch_properties(text: str) -> tuple[str | None, str | None, str | None, str | None]:
    """:func:`dispatch_properties_pure` in one pass of C when the compiled core is built (it
    returns None for text it cannot read as UTF-8: the pure scan copes with that)."""
    if _dispatch_properties_compiled is not None:
        found = _dispatch_properties_compiled(text)
        if found is not None:
            return found
    return dispatch_properties_pure(text)


_dispatch_properties_compiled = (None if speedups.store_core is None
                                 else speedups.store_core.dispatch_properties)
_properties_normalized_compiled = (None if speedups.store_core is None
                                   else speedups.store_core.properties_normalized)


# --- Java String.hashCode -------------------------------------------------------------------
_MASK32 = 0xFFFFFFFF
_POWERS: list[tuple[int, ...]] = [()]


def _powers(n: int) -> tuple[int, ...]:
    # Coefficients 31^(n-1) .. 31^0 mod 2^32: the hash is then one C-level dot product.
    while len(_POWERS) <= n:
        m = len(_POWERS)
        _POWERS.append(tuple(pow(31, m - 1 - i, 1 << 32) for i in range(m)))
    return _POWERS[n]


def _utf16_units(text: str) -> array:
    units = array("H", text.encode("utf-16-le"))
    if sys.byteorder == "big":
        units.byteswap()
    return units


def java_hash_unsigned_pure(text: str, seed: int = 0) -> int:
    """Java's ``String.hashCode`` as an unsigned 32-bit int, continuing from hash ``seed``.

    ``java_hash_unsigned(b, java_hash_unsigned(a)) == java_hash_unsigned(a + b)``: the index
    hashes ``topic#key`` without building the string or rehashing the topic.
    """
    units = text.encode("ascii") if text.isascii() else _utf16_units(text)
    n = len(units)
    coefficients = _powers(n) if n <= 1024 else tuple(pow(31, n - 1 - i, 1 << 32) for i in range(n))
    h = sum(map(mul, coefficients, units))
    if seed:
        h += seed * pow(31, n, 1 << 32)
    return h & _MASK32


# The compiled twin when it is built (common/speedups.py): the same results, the same errors,
# without a Python-level loop. Chosen once, here; callers import the name below.
java_hash_unsigned = (java_hash_unsigned_pure if speedups.core is None
                      else speedups.core.java_hash_unsigned)


def java_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, as a signed 32-bit int."""
    h = java_hash_unsigned(text)
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def tags_string_to_tags_code(tags: str | None) -> int:
    """The ConsumeQueue tagsCode of a TAGS value (0 without tags)."""
    if not tags:
        return 0
    return java_hash(tags)


def wait_store_msg_ok(text: str) -> bool:
    """Whether a message with the properties string ``text`` waits for its flush and slave:
    unless WAIT is present and not "true" (any case), as RocketMQ reads it."""
    if "WAIT\x01" not in text:
        return True
    if text.count("WAIT\x01") == 1 and (text.startswith("WAIT\x01true\x02")
                                         or "\x02WAIT\x01true\x02" in text):
        return True  # what every RocketMQ producer sends, read without parsing
    value = property_from_string(text, PROPERTY_WAIT_STORE_MSG_OK)
    return value is None or value.lower() == "true"


# --- the message handed to the store --------------------------------------------------------
class MessageExtBrokerInner:
    """A message as the broker hands it to the store (RocketMQ's ``MessageExtBrokerInner``).

    ``properties_string`` is what goes on disk; ``properties`` is its parsed view, built only
    when asked for: the broker has the string from the wire, and the put path reads the few
    properties it needs straight from it.
    """

    __slots__ = (
        "_properties", "_wait", "body", "born_host", "born_timestamp", "commit_log_offset", "flag",
        "prepared_transaction_offset", "properties_string", "queue_id", "queue_offset",
        "reconsume_times", "store_timestamp", "sys_flag", "topic",
    )

    def __init__(
        self,
        topic: str,
        body: bytes = b"",
        queue_id: int = 0,
        flag: int = 0,
        properties: dict[str, str] | None = None,
        properties_string: str | None = None,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body
        self.queue_id = queue_id
        self.flag = flag
        if properties_string is None:
            properties = properties or {}
            properties_string = properties_to_string(properties)
        self._properties = properties
        self._wait: bool | None = None  # wait_store_msg_ok, once asked
        self.properties_string = properties_string
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        # Set by the store when it writes the record.
        self.store_timestamp = 0
        self.queue_offset = 0
        self.commit_log_offset = 0

    def __repr__(self) -> str:
        return (f"MessageExtBrokerInner(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"body={len(self.body)} bytes, properties={self.properties_string!r})")

    @property
    def properties(self) -> dict[str, str]:
        if self._properties is None:
            self._properties = string_to_properties(self.properties_string)
        return self._properties

    def get_property(self, name: str) -> str | None:
        """One property, without parsing all of them."""
        if self._properties is not None:
            return self._properties.get(name)
        return property_from_string(self.properties_string, name)

    def put_property(self, name: str, value: str) -> None:
        """Set one property and re-serialise the properties string."""
        self._wait = None
        self.properties[name] = value
        self.properties_string = properties_to_string(self.properties)

    def replace_properties(self, properties: dict[str, str], text: str) -> None:
        """Take ``properties`` and their string ``text`` at once (the store's delay rewrite,
        applied once the put has succeeded). A parsed view the caller holds is updated in place."""
        self._wait = None
        if self._properties is not None and self._properties is not properties:
            self._properties.clear()
            self._properties.update(properties)
        else:
            self._properties = properties
        self.properties_string = text

    def clear_property(self, name: str) -> None:
        """Remove one property and re-serialise the properties string."""
        self._wait = None
        if self.properties.pop(name, None) is not None:
            self.properties_string = properties_to_string(self.properties)

    @property
    def tags(self) -> str | None:
        return self.get_property(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.get_property(PROPERTY_KEYS)

    @property
    def delay_time_level(self) -> int:
        if self._properties is None and "DELAY\x01" not in self.properties_string:
            return 0  # the put path asks this of every message; most have no delay
        value = self.get_property(PROPERTY_DELAY_TIME_LEVEL)
        try:
            return int(value) if value else 0
        except ValueError:
            return 0

    @property
    def wait_store_msg_ok(self) -> bool:
        """RocketMQ waits for flush/replication unless WAIT is present and not "true"."""
        wait = self._wait
        if wait is None:  # asked twice a put (the flush request, the answer): read once
            if self._properties is None:
                wait = wait_store_msg_ok(self.properties_string)
            else:
                value = self._properties.get(PROPERTY_WAIT_STORE_MSG_OK)
                wait = value is None or value.lower() == "true"
            self._wait = wait
        return wait


@dataclass(slots=True)
class MessageExtBatch:
    """A batch as the broker hands it to the store: the SEND_BATCH_MESSAGE body plus its header.

    ``body`` holds the inner messages in RocketMQ's batch encoding (``record.encode_batch_body``).
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    store_timestamp: int = 0
