"""Dispatch of a run: the plain records of one topic just appended (a batch's, all of one queue;
or a burst of sends that one read of the event loop brought, of any queues), in one step each
for their ConsumeQueue units (a step a queue) and their index entries.

A SEND_BATCH_MESSAGE of 32 appends 32 records to one queue; dispatched one by one, each took a
Python call chain (its properties scanned, a unit packed, its keys hashed and written): about
half of what a broker spent on a batched message. Here the run is found, its units written and
its keys indexed by three functions, compiled (common/_dispatch_run.c) when the core is built,
with these pure twins as the reference the tests hold them to (same results, same bytes).

An entry is what ``CommitLog.appended`` holds for a record: (offset, size, store timestamp,
queue offset, topic, queue id, sysFlag, prepared offset, properties).
"""

from __future__ import annotations

from common import speedups
from storage.consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT
from storage.index_file import (
    HASH_SLOT,
    HASH_SLOT_SIZE,
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    index_key_hash,
)
from storage.message import dispatch_properties_pure, java_hash

_INT_MAX = 0x7FFFFFFF
MAX_RUN_KEYS = 1024  # keys of one message the compiled call takes; more go one by one


def _has_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: dispatched one by one
        return False
    return True


def plain_run_pure(entries: list, reput_from: int, readable: int) -> tuple[int, bool]:
    """How many leading ``entries`` form one run: each starts where the one before ended (the
    first at ``reput_from``) and ends within ``readable``; no transaction bits in its sysFlag;
    of the first entry's topic; properties that have UTF-8. And whether they are all of the
    first entry's queue too (a batch's records are)."""
    count = 0
    expect = reput_from
    first = None
    one_queue = True
    for entry in entries:
        if type(entry) is not tuple or len(entry) != 9:
            break
        offset, size, _, queue_offset, topic, queue_id, sys_flag, _, props = entry
        if (type(offset) is not int or type(size) is not int or type(queue_offset) is not int
                or type(queue_id) is not int or type(sys_flag) is not int):
            break
        if offset != expect or size <= 0 or offset + size > readable or sys_flag & 0xC \
                or not isinstance(topic, str):
            break
        if first is None:
            first = entry
        elif topic != first[4]:
            break
        if not isinstance(props, str) or not _has_utf8(props):
            break
        one_queue = one_queue and queue_id == first[5]
        expect = offset + size
        count += 1
    return count, one_queue


def consume_queue_units_into_pure(buf, position: int, entries: list, count: int) -> None:
    """Write the ConsumeQueue units of ``entries[:count]`` (a run) at ``buf[position:]``: each
    record's offset, size and tags code (Java's hashCode of its TAGS, 0 without)."""
    if not 0 <= count <= len(entries):
        raise ValueError("count is not within the entries")
    if position < 0 or position + count * CQ_STORE_UNIT_SIZE > len(buf):
        raise ValueError("the units do not fit the buffer")
    units = []
    for entry in entries[:count]:  # every entry read before a byte is written
        offset, size, props = entry[0], entry[1], entry[8]
        if not isinstance(props, str) or not _has_utf8(props) or not -2**31 <= size < 2**31:
            raise ValueError("an entry of the run is not a plain record's")
        tags = dispatch_properties_pure(props)[0]
        units.append(CQ_UNIT.pack(offset, size, java_hash(tags) if tags else 0))
    buf[position:position + count * CQ_STORE_UNIT_SIZE] = b"".join(units)


def index_keys_into_pure(buf, hash_slot_num: int, index_num: int, index_count: int, limit: int,
                         seed: int, begin_timestamp: int, last_indexed: int, entries: list,
                         count: int) -> tuple[int, int, int, int, int, int]:
    """Index the UNIQ_KEY and every non-empty space-separated KEYS value of the messages of
    ``entries[:count]``, message after message, as ``IndexService.build_index`` would:

    * a message at or below ``last_indexed`` is passed over (indexed before a failure);
    * one without either property writes nothing;
    * the file's first message with a key sets its begin timestamp; an entry's time is its
      store time's seconds after that, within [0, Integer.MAX_VALUE];
    * the run stops before a message whose keys would take the entry count past ``limit``,
      that has more than ``MAX_RUN_KEYS`` keys or whose properties have no UTF-8: the caller
      indexes it and what follows one by one.

    Returns (messages taken, new entry count, empty slots filled, run index of the first and of
    the last message that wrote an entry, of the last that had either property; -1 for none).
    The header is the caller's."""
    if hash_slot_num <= 0 or index_count < 1 or limit > index_num or not 0 <= count <= len(entries):
        raise ValueError("index_keys_into(): arguments out of range")
    entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
    if limit > 0 and len(buf) < entries_base + limit * INDEX_ENTRY_SIZE:
        raise ValueError("the index file's mapping is smaller than the limit")
    new_slots = 0
    first_keyed = last_keyed = last_touched = -1
    begin = begin_timestamp
    done = 0
    for done in range(count + 1):  # (done == count: all taken)
        if done == count:
            break
        entry = entries[done]
        if type(entry) is not tuple or len(entry) != 9:
            break
        offset, _, store_ts, *_, props = entry
        if (type(offset) is not int or type(store_ts) is not int or not isinstance(props, str)
                or not _has_utf8(props)):
            break
        if offset <= last_indexed:
            continue
        _, keys, uniq_key, _ = dispatch_properties_pure(props)
        if uniq_key is None and keys is None:
            continue
        names = ([uniq_key] if uniq_key else []) + [k for k in (keys or "").split(" ") if k]
        if len(names) > MAX_RUN_KEYS or index_count + len(names) > limit:
            break
        last_touched = done
        if not names:
            continue
        if index_count <= 1:
            begin = store_ts
        diff = (store_ts - begin) // 1000 if begin > 0 else 0
        diff = min(max(diff, 0), _INT_MAX)
        for name in names:
            key_hash = index_key_hash(name, seed)
            slot_pos = INDEX_HEADER_SIZE + (key_hash % hash_slot_num) * HASH_SLOT_SIZE
            (previous,) = HASH_SLOT.unpack_from(buf, slot_pos)
            if previous <= 0 or previous > index_count:
                previous = 0
            INDEX_ENTRY.pack_into(buf, entries_base + index_count * INDEX_ENTRY_SIZE, key_hash,
                                  offset, diff, previous)
            HASH_SLOT.pack_into(buf, slot_pos, index_count)
            new_slots += previous == 0
            index_count += 1
        if first_keyed < 0:
            first_keyed = done
        last_keyed = done
    return done, index_count, new_slots, first_keyed, last_keyed, last_touched


_core = speedups.store_core
plain_run = plain_run_pure if _core is None else _core.plain_run
consume_queue_units_into = (consume_queue_units_into_pure if _core is None
                            else _core.consume_queue_units_into)
index_keys_into = index_keys_into_pure if _core is None else _core.index_keys_into
