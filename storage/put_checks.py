"""Checks a put passes before the put lock is taken.

Two kinds, as in RocketMQ's ``DefaultMessageStore.checkStoreStatus`` and ``checkMessage``:

* the store's state (:func:`check_store_status`): shut down, slave role, a raised running flag
  (disk full, a service that cannot write), the page cache busy;
* the message's fields (:func:`message_fields`, :func:`batch_fields`): every value must fit its
  slot in the record (QUEUEID, FLAG, SYSFLAG and RECONSUMETIMES are int32, BORNTIMESTAMP and
  PREPARED TX OFFSET int64, BODYLEN int32), the topic 127 bytes of UTF-8 at most, the properties
  32,767. A value that does not fit is refused here with a sentence that names the field, never
  found out by ``struct.pack_into`` halfway through writing a record under the lock.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import cast

from storage.config import BrokerRole
from storage.errors import (
    MessageIllegalError,
    OSPageCacheBusyError,
    PropertiesSizeExceededError,
    ServiceNotAvailableError,
)
from storage.message_id import host_to_bytes
from storage.record import MAX_PROPERTIES_LENGTH
from storage.record import MAX_TOPIC_LENGTH_V1 as MAX_TOPIC_LENGTH

_INT32 = (-(1 << 31), (1 << 31) - 1)
_SLAVE = BrokerRole.SLAVE  # (read once: a member read through its class costs ~70 ns)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def check_store_status(store) -> None:
    """Refuse a put the store cannot take now (``DefaultMessageStore.checkStoreStatus``)."""
    if store._shutdown:
        raise ServiceNotAvailableError("the message store has shut down")
    if store.config.broker_role is _SLAVE:
        raise ServiceNotAvailableError("the message store is a slave: it takes no writes")
    refusal = store.running_flags.write_refusal()
    if refusal is not None:
        raise ServiceNotAvailableError(refusal)
    begin = store.commit_log.begin_time_in_lock
    if begin and (time.monotonic() - begin) * 1000 > store.config.os_page_cache_busy_time_out_mills:
        raise OSPageCacheBusyError("the page cache is busy: a put has held the lock for over 1 s")


def check_body_size(body: object, limit: int) -> None:
    """Refuse a body over ``maxMessageSize`` (RocketMQ's MESSAGE_ILLEGAL)."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise MessageIllegalError(f"the body must be bytes, not {type(body).__name__}")
    size = len(body)
    if size > limit:
        raise MessageIllegalError(f"body of {size} bytes exceeds maxMessageSize {limit}")


def check_batch_rules(batch, limit: int) -> None:
    """What a batch may not be: delayed, sent to a retry topic, larger than ``maxMessageSize``."""
    if not isinstance(batch.properties, dict):
        raise MessageIllegalError("the batch's properties must be a mapping")
    if batch.properties.get("DELAY"):
        raise MessageIllegalError("a batch cannot carry a delay level")
    topic_bytes(batch.topic)
    if batch.topic.startswith("%RETRY%"):
        raise MessageIllegalError("a batch cannot be sent to a retry topic")
    size = len(body_of(batch.body))
    if size > limit:
        raise MessageIllegalError(f"batch of {size} bytes exceeds maxMessageSize {limit}")


def check_int(name: str, value: object, bits: int = 32) -> int:
    """``value`` when it is an integer that fits a signed ``bits``-bit field."""
    low, high = _INT32 if bits == 32 else _INT64
    if not isinstance(value, int):
        raise MessageIllegalError(f"{name} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise MessageIllegalError(
            f"{name} {value} does not fit the record's {bits}-bit field ({low}..{high})"
        )
    return value


def _text_bytes(name: str, value: object, limit: int, error=MessageIllegalError) -> bytes:
    if not isinstance(value, str):
        raise MessageIllegalError(f"the {name} must be text, not {type(value).__name__}")
    encoded = utf8(name, value)
    if len(encoded) > limit:
        raise error(f"{name} {value[:40]!r}… is {len(encoded)} bytes long; the limit is {limit}")
    return encoded


def topic_bytes(topic: object) -> bytes:
    """The topic as written: UTF-8, at most 127 bytes (TOPICLEN is one byte)."""
    if type(topic) is str:
        return _topic_bytes_cached(topic)
    return _text_bytes("topic", topic, MAX_TOPIC_LENGTH)


@lru_cache(maxsize=4096)
def _topic_bytes_cached(topic: str) -> bytes:
    # A broker writes the same few topics all day (a refusal raises, and is not cached).
    return _text_bytes("topic", topic, MAX_TOPIC_LENGTH)


def properties_bytes(properties: object) -> bytes:
    """The properties string as written: UTF-8, at most 32,767 bytes (PROPERTIESLEN is an int16)."""
    return _text_bytes("properties", properties, MAX_PROPERTIES_LENGTH, PropertiesSizeExceededError)


def body_of(body: object) -> bytes:
    """The body as bytes, at most an int32 long (bytes are taken as they are: no copy)."""
    if type(body) is not bytes:
        if not isinstance(body, bytes | bytearray | memoryview):
            raise MessageIllegalError(f"the body must be bytes, not {type(body).__name__}")
        body = bytes(body)
    if len(body) > _INT32[1]:
        raise MessageIllegalError(f"a body of {len(body)} bytes does not fit BODYLEN (int32)")
    return body


def born_host_bytes(born_host: object) -> bytes:
    """The 8- or 20-byte BORNHOST of an (ip, port) pair."""
    try:
        ip, port = cast("tuple[str, int]", born_host)  # any shape: a bad one raises below
        check_int("the born host's port", port)
        return host_to_bytes(ip, port)
    except MessageIllegalError:
        raise
    except (TypeError, ValueError) as exc:
        raise MessageIllegalError(
            f"born host {born_host!r} is not an IP address and a port"
        ) from exc


def _shared_fields(msg) -> None:
    """The numeric fields a message and a batch both carry into every record."""
    check_int("queueId", msg.queue_id)
    check_int("flag", msg.flag)
    check_int("sysFlag", msg.sys_flag)
    check_int("reconsumeTimes", msg.reconsume_times)
    check_int("bornTimestamp", msg.born_timestamp, 64)


def message_fields(msg) -> None:
    """Refuse a message whose numeric fields do not fit the record."""
    queue_id, flag, sys_flag = msg.queue_id, msg.flag, msg.sys_flag
    reconsume, born, prepared = msg.reconsume_times, msg.born_timestamp, msg.prepared_transaction_offset
    if (  # every field fits: one test (the put path runs it for every message)
        type(queue_id) is int and type(flag) is int and type(sys_flag) is int
        and type(reconsume) is int and type(born) is int and type(prepared) is int
        and type(msg.properties_string) is str
        and -0x80000000 <= queue_id <= 0x7FFFFFFF and -0x80000000 <= flag <= 0x7FFFFFFF
        and -0x80000000 <= sys_flag <= 0x7FFFFFFF and -0x80000000 <= reconsume <= 0x7FFFFFFF
        and _INT64[0] <= born <= _INT64[1] and _INT64[0] <= prepared <= _INT64[1]
    ):
        return
    # Something does not: find which, and say so.
    _shared_fields(msg)
    check_int("preparedTransactionOffset", msg.prepared_transaction_offset, 64)
    if not isinstance(msg.properties_string, str):
        raise MessageIllegalError(
            f"the properties must be text, not {type(msg.properties_string).__name__}"
        )


def batch_fields(batch) -> None:
    """Refuse a batch whose header fields do not fit the records made of it."""
    _shared_fields(batch)
    cluster = batch.properties.get("CLUSTER")
    if cluster is not None and not isinstance(cluster, str):
        raise MessageIllegalError(f"the CLUSTER property must be text, not {type(cluster).__name__}")


def utf8(what: str, text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MessageIllegalError(
            f"the {what} cannot be written as UTF-8: {exc.reason} at character {exc.start}"
        ) from exc
