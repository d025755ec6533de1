"""From a SEND_BATCH_MESSAGE body to CommitLog records, in two steps around the put lock.

:func:`batch_layout` (before the lock) checks the body and says how many records it makes and
how many bytes they take; :func:`encode_batch_into` (under the lock, once the file has room)
writes them back to back with consecutive queue offsets and returns what dispatch and the
sender need of each: its entry for ``CommitLog.appended`` and its offset msgId.

Every record's properties are its entry's own, plus ``CLUSTER`` when the batch names a cluster
and the entry does not (RocketMQ's ``MessageExtBatch`` carries it once for all). Bodies and
properties are read from the request's bytes with no Python object per message in the compiled
core (``common/_storecore.c``); the pure functions here are its reference and its fallback.
"""

from __future__ import annotations

from common import speedups
from storage import put_checks
from storage.errors import MessageIllegalError
from storage.message_id import create_message_id
from storage.record import body_crc, decode_batch_body, encode_record_into_pure

AppendedEntry = tuple  # (offset, size, store time, queue offset, topic, queue id, sysFlag, 0, properties)


def entry_properties(properties: str, cluster: str | None) -> str:
    """An inner message's properties as written: CLUSTER added when the batch has one."""
    if cluster and "CLUSTER\x01" not in properties:
        if properties and not properties.endswith("\x02"):
            properties += "\x02"
        properties += f"CLUSTER\x01{cluster}\x02"
    return properties


def _cluster_text(cluster: bytes | None) -> str | None:
    return None if cluster is None else cluster.decode("utf-8")


def batch_layout_pure(body: bytes, cluster: bytes | None, overhead: int) -> tuple[int, int]:
    """(records, bytes) of a batch body, each record ``overhead`` bytes plus its body and
    properties. Raises MessageIllegalError for a malformed body, PropertiesSizeExceededError
    for properties over 32,767 bytes."""
    entries = decode_batch_body(body)
    name = _cluster_text(cluster)
    total = 0
    for entry in entries:
        props = put_checks.properties_bytes(entry_properties(entry.properties_string, name))
        total += overhead + len(entry.body) + len(props)
    return len(entries), total


def encode_batch_into_pure(
    target, pos: int, body: bytes, cluster: bytes | None, topic: bytes, topic_name: str,
    queue_id: int, queue_offset: int, physical_offset: int, sys_flag: int, born_timestamp: int,
    born_host: bytes, store_timestamp: int, store_host: bytes, reconsume_times: int,
) -> tuple[list[AppendedEntry], list[str]]:
    """Write the records of a body :func:`batch_layout` accepted; returns their dispatch
    entries and msgIds. Raises ValueError when they do not fit ``target``."""
    try:
        inner = decode_batch_body(body)
    except MessageIllegalError as exc:
        raise ValueError(str(exc)) from exc
    name = _cluster_text(cluster)
    entries: list[AppendedEntry] = []
    ids: list[str] = []
    physical = physical_offset
    for index, entry in enumerate(inner):
        props = entry_properties(entry.properties_string, name)
        size = encode_record_into_pure(
            target, pos, body_crc(entry.body), queue_id, entry.flag, queue_offset + index,
            physical, sys_flag, born_timestamp, born_host, store_timestamp, store_host,
            reconsume_times, 0, entry.body, topic, props.encode("utf-8"))
        entries.append((physical, size, store_timestamp, queue_offset + index, topic_name,
                        queue_id, sys_flag, 0, props))
        ids.append(create_message_id(store_host, physical))
        pos += size
        physical += size
    return entries, ids


_compiled = speedups.store_core


def batch_layout(body: bytes, cluster: bytes | None, overhead: int) -> tuple[int, int]:
    """:func:`batch_layout_pure`, in C when it is built (which hands any body it would refuse
    to the pure function, for the refusal's own sentence)."""
    if _compiled is not None:
        layout = _compiled.batch_layout(body, cluster, overhead)
        if layout is not None:
            return layout
    return batch_layout_pure(body, cluster, overhead)


encode_batch_into = encode_batch_into_pure if _compiled is None else _compiled.encode_batch_into
