"""Dispatch of one plain record, compiled (common/_dispatch_one.c) against its Python twin
(``Dispatchers.dispatch_plain_pure``): the same answer, the same ConsumeQueue and index bytes,
the same attributes after every entry; and where the compiled call declines (None), nothing
changed, so the Python way that follows does all of it."""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import tempfile
import time
import types
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import commitlog as commitlog_module
from storage import consume_queue as consume_queue_module
from storage import dispatchers as dispatchers_module
from storage import index_file as index_file_module
from storage.dispatch import TIMED_TOPICS
from storage.mapped_file import MappedFile
from storage.message import SCHEDULE_TOPIC, TIMER_TOPIC
from storage.message_store import DefaultMessageStore
from tests.conftest import make_message, small_config

one = dispatchers_module._dispatch_plain_one
each = dispatchers_module._dispatch_units_each
compiled = pytest.mark.skipif(one is None, reason="the compiled core is not built")

# Values as clients send them, and the awkward ones: non-ASCII (an astral character is two
# UTF-16 units in Java's hash), empty values, spaces only, many keys. (A lone surrogate cannot
# come from a record's UTF-8; the compiled call declines it, below.)
_values = st.sampled_from(["a", "TagA", "é", "键", "🚀x", "k1 k2", " k3  k4 ", "", " ",
                           " ".join(f"m{k}" for k in range(300))])
_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "KEYSX"])
_props = st.lists(st.tuples(_names, _values), max_size=5).map(
    lambda pairs: "".join(f"{n}\x01{v}\x02" for n, v in pairs))


@st.composite
def entries(draw):
    """Entries as CommitLog.appended holds them, one record each: in log order, each queue's
    offsets mostly consecutive, with what dispatch meets now and then (a record dispatched
    again, a gap in a queue, transaction bits, a timed topic, a store time before the index
    file's begin)."""
    out = []
    offset = draw(st.integers(0, 1000))
    next_unit: dict = {}
    for _ in range(draw(st.integers(1, 40))):
        topic = draw(st.sampled_from(["TopicTest"] * 6 + ["Other", "主题", SCHEDULE_TOPIC,
                                                          TIMER_TOPIC]))
        queue_id = draw(st.integers(0, 2))
        unit = next_unit.get((topic, queue_id), 0)
        event = draw(st.sampled_from([None] * 10 + ["again", "gap", "back", "prepared",
                                                    "rollback"]))
        if event == "again" and out:
            out.append(out[-1])
            continue
        if event == "gap":
            unit += 1
        elif event == "back":  # (a queue offset dispatched before)
            unit = max(0, unit - 2)
        size = draw(st.integers(1, 400))
        sys_flag = {"prepared": 4, "rollback": 0xC}.get(event, draw(st.sampled_from([0, 0, 8, 1])))
        # Store times a few seconds apart, and now and then what the clamps are for: none
        # (0), before 1970, and past what 31 bits of seconds after the file's begin hold.
        store_ts = draw(st.one_of(
            st.integers(-3000, 4_000_000).map(lambda ms: 1_700_000_000_000 + ms),
            st.sampled_from([0, -5, 1_700_000_000_000 + (1 << 31) * 1000 + 7, 1 << 62])))
        props = draw(_props)
        if draw(st.integers(0, 15)) == 0:  # (no UTF-8 for the compiled calls: declined)
            props += "WAIT\x01\ud800\x02"
        out.append((offset, size, store_ts, unit, topic, queue_id, sys_flag, 0, props))
        next_unit[(topic, queue_id)] = unit + 1
        offset += size
    return out


def _store(root: str, **overrides) -> DefaultMessageStore:
    # ConsumeQueue files of 10 units and index files of 256 entries: entries cross into new
    # files often, where the compiled call declines.
    store = DefaultMessageStore(small_config(root, **overrides))
    store.load()  # not started: nothing dispatches but the test
    return store


def _state(store: DefaultMessageStore) -> tuple:
    """Every ConsumeQueue's bytes and positions, every index file's bytes and header fields."""
    queues = {}
    for topic, table in store.consume_queue_table.items():
        for queue_id, queue in table.items():
            files = queue.mapped_file_queue.mapped_files
            queues[(topic, queue_id)] = (
                queue.max_physic_offset,
                [(f.file_from_offset, f.wrote_position, f.allocated_position, bytes(f.mm[:]))
                 for f in files])
    index = store.index_service
    indexes = [(f.index_count, f.hash_slot_count, f.begin_timestamp, f.begin_phy_offset,
                f.end_timestamp, f.end_phy_offset, f.mapped_file.allocated_position,
                bytes(f.mm[:])) for f in index.index_files]
    return queues, indexes, index.last_indexed_offset


@compiled
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries(), st.booleans(), st.sampled_from([None, 50]))
def test_one_record_is_dispatched_alike(sequence, indexing, claim_ahead):
    with tempfile.TemporaryDirectory() as root, contextlib.ExitStack() as patches:
        if claim_ahead is not None:  # blocks claimed a few units and entries at a time
            patches.enter_context(mock.patch.object(consume_queue_module, "CQ_ALLOCATE_AHEAD",
                                                    claim_ahead))
            patches.enter_context(mock.patch.object(
                index_file_module, "MappedFile",
                functools.partial(MappedFile, allocate_ahead=claim_ahead)))
        fast = _store(f"{root}/fast", message_index_enable=indexing)
        pure = _store(f"{root}/pure", message_index_enable=indexing)
        try:
            declined = 0
            for entry in sequence:
                before = _state(fast)
                index = fast.index_service if indexing else None
                done = one(entry, fast.consume_queue_table, index, TIMED_TOPICS)
                if done is None:  # nothing changed: the Python way does it all
                    declined += 1
                    assert _state(fast) == before
                    done = fast.dispatchers.dispatch_plain_pure(entry)
                assert done == pure.dispatchers.dispatch_plain_pure(entry)
                assert done == (not entry[6] & 0xC and entry[4] not in TIMED_TOPICS)
                assert _state(fast) == _state(pure)
        finally:
            fast.shutdown()
            pure.shutdown()


@pytest.fixture
def sends(monkeypatch):
    """``send(fast, pure, messages, burst=1)``: the messages put into both stores ``burst`` at a
    time, each burst dispatched right after its puts as a broker dispatches a read's sends: by
    the compiled calls in ``fast``, the Python way in ``pure``; the two compared after every
    burst. Returns the one-record call's answers, and the indices the run's units call left."""
    # One store time for every put: the two stores then write the same index bytes.
    monkeypatch.setattr(commitlog_module, "time", types.SimpleNamespace(
        time=lambda: 1_700_000_000.0, monotonic=time.monotonic))
    calls: list = []
    left: list = []

    def counted(*args):
        calls.append(one(*args))
        return calls[-1]

    def counted_each(*args):
        left.append(each(*args))
        return left[-1]

    def send(fast: DefaultMessageStore, pure: DefaultMessageStore, messages,
             burst: int = 1) -> tuple[list, list]:
        for start in range(0, len(messages), burst):
            for store, one_call, each_call in ((fast, counted, counted_each), (pure, None, None)):
                monkeypatch.setattr(dispatchers_module, "_dispatch_plain_one", one_call)
                monkeypatch.setattr(dispatchers_module, "_dispatch_units_each", each_call)
                for message in messages[start:start + burst]:
                    store.put_message(copy.copy(message))
                store.reput.reput_inline()
                assert store.reput.behind() == 0
            assert _state(fast) == _state(pure)
        return calls, left

    return send


def _sends(count: int, first_keys: str | None = None, queues: int = 3) -> list:
    """Sends to ``queues`` queues in turn; with ``first_keys``, the first three (one a queue:
    the Python way makes each queue) have those KEYS and no UNIQ_KEY."""
    first = 3 if first_keys is not None else 0
    return [make_message(topic="Sends", queue_id=i % queues, tags="TagA" if i % 2 else "标签",
                         keys=(first_keys if i < first else
                               f"order-{i} 键{i % 7}" if i % 5 else None),
                         uniq=None if i < first else f"U{i:06d}", body=b"x" * (i % 50))
            for i in range(count)]


@compiled
def test_a_sender_s_records_are_dispatched_by_the_compiled_call(tmp_path, sends):
    """Through the store as a broker uses it: the compiled call takes all but the few that
    need a new file, and the views are those of a store dispatching the Python way."""
    fast, pure = _store(tmp_path / "fast"), _store(tmp_path / "pure")
    try:
        calls, _ = sends(fast, pure, _sends(300))
        assert len(calls) == 300
        assert calls.count(True) > 250
        assert calls.count(False) == 0
        found = fast.query_message("Sends", "键3", 100, 0, 1 << 62)
        assert len(found.messages) == sum(1 for i in range(300) if i % 5 and i % 7 == 3)
    finally:
        fast.shutdown()
        pure.shutdown()


@compiled
def test_claims_and_an_index_file_s_first_keys_go_as_in_python(tmp_path, monkeypatch, sends):
    """Files whose blocks are claimed a few KiB at a time: the compiled call leaves each claim
    to Python (so the blocks are there before a byte goes in). And an index file that a
    message without a key began (KEYS of spaces only): the first keys in it set its begin."""
    monkeypatch.setattr(consume_queue_module, "CQ_ALLOCATE_AHEAD", 4096)
    monkeypatch.setattr(index_file_module, "MappedFile",
                        functools.partial(MappedFile, allocate_ahead=4096))
    config = {"mapped_file_size_consume_queue": 20 * 1000, "max_index_num": 2000}
    fast, pure = _store(tmp_path / "fast", **config), _store(tmp_path / "pure", **config)
    try:
        calls, _ = sends(fast, pure, _sends(1200, first_keys="  "))
        assert calls.count(None) > 10  # (the claims, and the index files' rolls)
        assert calls.count(True) > 1100
        index_files = fast.index_service.index_files
        assert len(index_files) == 2
        assert index_files[0].begin_phy_offset > 0
    finally:
        fast.shutdown()
        pure.shutdown()


@compiled
def test_a_burst_to_many_queues_puts_its_units_as_in_python(tmp_path, monkeypatch, sends):
    """Bursts of sends to queues in turn, dispatched as runs: each record's unit goes into its
    own queue by one call for the run; those it leaves (a queue to make, a new file, blocks to
    claim, and every later one of that queue) go the Python way, in log order."""
    monkeypatch.setattr(consume_queue_module, "CQ_ALLOCATE_AHEAD", 100)  # 5 units a claim
    fast, pure = _store(tmp_path / "fast"), _store(tmp_path / "pure")
    try:
        messages = _sends(700, queues=7)
        for i in (100, 101, 102):  # a burst that is not all plain: runs break around these
            messages[i].sys_flag = 4  # (a transaction's prepare)
        _, left = sends(fast, pure, messages, burst=16)
        assert len(left) > 30  # (runs of records of several queues)
        taken = sum(16 - len(indices) for indices in left)
        assert 0 < sum(map(len, left)) < taken  # most taken by the call, some left
        assert all(indices == sorted(indices) for indices in left)
        queue = fast.consume_queue_table["Sends"][3]
        assert queue.get_max_offset_in_queue() == 99  # 100, one a prepare (no slot)
    finally:
        fast.shutdown()
        pure.shutdown()


def _put_run_both(fast: DefaultMessageStore, pure: DefaultMessageStore, run: list) -> list:
    """The run's units put in ``fast`` by the compiled call (and what it leaves the Python way,
    in order) and in ``pure`` all the Python way; the two compared. Returns what it left."""
    left = each(run, len(run), fast.consume_queue_table)
    for index in left:
        fast.dispatchers._put_unit(run[index])
    for entry in run:
        pure.dispatchers._put_unit(entry)
    assert _state(fast) == _state(pure)
    return left


def _first_units(*stores: DefaultMessageStore) -> None:
    """Queues T-0 and T-1 made, each with its first unit (the compiled calls' fast step is
    the next unit of a file already begun)."""
    for store in stores:
        for queue_id in (0, 1):
            store.dispatchers._put_unit((queue_id * 50, 10, 1, 0, "T", queue_id, 0, 0, ""))


@compiled
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries(), st.sampled_from([None, 50]))
def test_a_run_s_units_are_put_alike(sequence, claim_ahead):
    """The run's units call against putting each unit the Python way, on runs of plain
    records of one topic (whatever the queue offsets: gaps, repeats)."""
    run = [entry for entry in sequence if entry[4] == "TopicTest" and not entry[6] & 0xC]
    with tempfile.TemporaryDirectory() as root, contextlib.ExitStack() as patches:
        if claim_ahead is not None:
            patches.enter_context(mock.patch.object(consume_queue_module, "CQ_ALLOCATE_AHEAD",
                                                    claim_ahead))
        fast, pure = _store(f"{root}/fast"), _store(f"{root}/pure")
        try:
            for store in (fast, pure):  # queues 0 and 1 made, 2 not yet
                for queue_id in (0, 1):
                    store.find_consume_queue("TopicTest", queue_id)
            for _ in range(2):  # the second time: every unit held already
                left = _put_run_both(fast, pure, run)
                assert left == sorted(set(left))
        finally:
            fast.shutdown()
            pure.shutdown()


@compiled
def test_the_compiled_call_declines_what_is_not_its_to_take(tmp_path):
    store = _store(tmp_path)
    try:
        table, index = store.consume_queue_table, store.index_service
        first = (0, 100, 1_700_000_000_000, 0, "T", 0, 0, 0, "KEYS\x01k\x02")
        assert one(first, table, index, TIMED_TOPICS) is None  # no queue yet
        store.find_consume_queue("T", 0)
        assert one(first, table, index, TIMED_TOPICS) is None  # a new file: not the fast step
        assert store.dispatchers.dispatch_plain_pure(first) is True
        plain = (100, 100, 1_700_000_000_000, 1, "T", 0, 0, 0, "KEYS\x01k\x02")
        assert one((*plain[:6], 4, *plain[7:]), table, index, TIMED_TOPICS) is False
        assert one((*plain[:4], SCHEDULE_TOPIC, *plain[5:]), table, index, TIMED_TOPICS) is False
        before = _state(store)
        for odd in [plain[:8], [*plain], (*plain[:8], b"KEYS\x01k\x02"),
                    (*plain[:8], "KEYS\x01\ud800\x02"), (*plain[:4], "\ud800", *plain[5:]),
                    (-1, *plain[1:]), (*plain[:1], 0, *plain[2:]),
                    (*plain[:1], 1 << 40, *plain[2:]), (*plain[:3], 1 << 70, *plain[4:]),
                    (*plain[:3], 2, *plain[4:]), (*plain[:4], b"T", *plain[5:]),
                    (*plain[:3], 1.0, *plain[4:])]:
            assert one(odd, table, index, TIMED_TOPICS) is None, odd
        assert _state(store) == before
        odd_run = [plain[:8], (*plain[:8], b"KEYS\x01k\x02"), (*plain[:8], "KEYS\x01\ud800\x02"),
                   (-1, *plain[1:]), (*plain[:3], 1 << 70, *plain[4:]),
                   (*plain[:3], 2, *plain[4:]), (*plain[:5], 9, *plain[6:])]
        assert each(odd_run, 7, table) == list(range(7))
        assert _state(store) == before
        class QueueId(int):  # (its lookup could run Python code: declined unlooked)
            def __eq__(self, other):
                table.clear()
                return NotImplemented

            __hash__ = int.__hash__

        assert one((*plain[:5], QueueId(0), *plain[6:]), table, index, TIMED_TOPICS) is None
        assert each([(*plain[:5], QueueId(0), *plain[6:])], 1, table) == [0]
        tail = store.consume_queue_table["T"][0].mapped_file_queue.mapped_files[-1]
        tail.write_buffer = bytearray(tail.file_size)  # (written through a buffer: Python's)
        assert one(plain, table, index, TIMED_TOPICS) is None
        assert each([plain], 1, table) == [0]
        tail.write_buffer = None
        last = store.index_service.index_files[-1]
        last.hash_slot_num = 10**8  # counts the mapping cannot hold: declined, not written
        assert one(plain, table, index, TIMED_TOPICS) is None
        last.hash_slot_num = 1 << 40
        assert one(plain, table, index, TIMED_TOPICS) is None
        last.hash_slot_num = 64
        assert _state(store) == before
        with pytest.raises(TypeError):
            one(plain, table, index)
        with pytest.raises(TypeError):
            each(tuple(odd_run), 1, table)
        with pytest.raises(ValueError, match="count"):
            each(odd_run, 8, table)
        assert one(plain, table, index, TIMED_TOPICS) is True
        assert one(plain, table, index, TIMED_TOPICS) is True  # again: held already, skipped
        assert store.consume_queue_table["T"][0].get_max_offset_in_queue() == 2
        assert store.index_service.index_files[-1].index_count == 3  # k twice, from 1
    finally:
        store.shutdown()


@compiled
def test_one_call_takes_up_to_1024_keys_and_holds_no_reference(tmp_path):
    store = _store(tmp_path, max_index_num=5000)
    try:
        table, index = store.consume_queue_table, store.index_service
        entries = [(i * 100, 100, 1_700_000_000_000, i, "T", 0, 0, 0,
                    "KEYS\x01" + " ".join(f"k{i}-{k}" for k in range(keys)) + "\x02")
                   for i, keys in enumerate([1, 1024, 1025, 3])]
        store.dispatchers.dispatch_plain_pure(entries[0])  # (the files made)
        assert one(entries[1], table, index, TIMED_TOPICS) is True
        assert index.index_files[-1].index_count == 1 + 1 + 1024
        assert one(entries[2], table, index, TIMED_TOPICS) is None  # more than one call takes
        assert store.dispatchers.dispatch_plain_pure(entries[2]) is True
        queue, index_file = table["T"][0], index.index_files[-1]
        counts = [sys.getrefcount(item) for item in (queue, index_file, entries[3], table, index)]
        for _ in range(3):  # taken, then held already
            assert one(entries[3], table, index, TIMED_TOPICS) is True
            assert each(entries[3:], 1, table) == []
            assert each([entries[3], entries[3]], 2, table) == []  # (one queue, twice)
        for _ in range(3):  # declined
            assert one((*entries[3][:5], 7, *entries[3][6:]), table, index, TIMED_TOPICS) is None
        assert counts == [sys.getrefcount(item)
                          for item in (queue, index_file, entries[3], table, index)]
        assert index_file.index_count == 1 + 1 + 1024 + 1025 + 3
    finally:
        store.shutdown()


@compiled
def test_a_message_whose_keys_pass_the_claimed_blocks_is_left_to_python(tmp_path, monkeypatch):
    """Blocks are claimed for every key before one is written (put_keys counts a KEYS value's
    spaces): 300 keys where 190 entries are claimed go the Python way, which claims first."""
    monkeypatch.setattr(index_file_module, "MappedFile",
                        functools.partial(MappedFile, allocate_ahead=4096))
    store = _store(tmp_path, max_index_num=5000)
    try:
        table, index = store.consume_queue_table, store.index_service
        first = (0, 100, 1_700_000_000_000, 0, "T", 0, 0, 0, "KEYS\x01k\x02")
        many = (100, 100, 1_700_000_000_000, 1, "T", 0, 0, 0,
                "KEYS\x01" + " ".join(f"k{k}" for k in range(300)) + "\x02")
        store.dispatchers.dispatch_plain_pure(first)  # (the files made, 4 KiB claimed)
        claimed = index.index_files[-1].mapped_file.allocated_position
        assert claimed < index.index_files[-1]._entries_base + 300 * 20
        assert one(many, table, index, TIMED_TOPICS) is None
        assert store.dispatchers.dispatch_plain(many) is True
        assert index.index_files[-1].mapped_file.allocated_position > claimed
        assert index.index_files[-1].index_count == 1 + 1 + 300
    finally:
        store.shutdown()


@compiled
def test_a_run_over_more_queues_than_one_call_tracks_leaves_the_rest(tmp_path):
    """One call follows 256 queues (a run is at most 256 records); the units of any more, and
    of a queue whose position is not an int, are left to Python, in order."""
    store = _store(tmp_path)
    try:
        table = store.consume_queue_table
        first = [(q * 100, 100, 1_700_000_000_000, 0, "T", q, 0, 0, "TAGS\x01a\x02")
                 for q in range(300)]
        for entry in first:  # (each queue's file made, its first unit in)
            assert store.dispatchers.dispatch_plain_pure(entry) is True
        table["T"][5].max_physic_offset = 1 << 70  # (Python's int, past what C reads)
        second = [(30_000 + q * 100, 100, 1_700_000_000_000, 1, "T", q, 0, 0, "TAGS\x01b\x02")
                  for q in range(300)]
        before = _state(store)
        assert each(second, 300, table) == [5, *range(256, 300)]
        for index in [5, *range(256, 300)]:
            store.dispatchers._put_unit(second[index])
        assert _state(store) != before
        for q in range(300):
            assert table["T"][q].get_max_offset_in_queue() == (1 if q == 5 else 2)  # (5: "held")
    finally:
        store.shutdown()


@compiled
@pytest.mark.parametrize("run", [
    [(100, 100, 1, 2, "T", 0, 0, 0, "TAGS\x01b\x02"), (200, 100, 1, 1, "T", 0, 0, 0, "")],
    [(100, 100, 1, 1, "T", 0, 0, 0, "WAIT\x01\ud800\x02"), (200, 100, 1, 1, "T", 0, 0, 0, "")],
    [(1 << 62, 100, 1, 1, "T", 0, 0, 0, ""), (200, 100, 1, 1, "T", 0, 0, 0, "")],
    [(100, 100, 1, 1, "T", True, 0, 0, ""), (200, 100, 1, 1, "T", 1, 0, 0, "")],
    [(True, 99, 1, 1, "T", 0, 0, 0, ""), (200, 100, 1, 1, "T", 0, 0, 0, "")],
], ids=["offsets back", "no UTF-8", "huge offset", "a bool queue", "a bool offset"])
def test_after_a_unit_it_leaves_its_queue_s_later_units_are_left_too(tmp_path, run):
    """Python puts a left unit after the call: a later unit of its queue (or of a queue the
    call could not tell) must not take its place first."""
    fast, pure = _store(tmp_path / "fast"), _store(tmp_path / "pure")
    try:
        _first_units(fast, pure)
        _put_run_both(fast, pure, run)
    finally:
        fast.shutdown()
        pure.shutdown()


@compiled
def test_a_run_failing_half_way_is_put_whole_on_its_retry(tmp_path):
    fast, pure = _store(tmp_path / "fast"), _store(tmp_path / "pure")
    try:
        run = [(1000 + i * 100, 100, 1, 1 + i // 2, "T", i % 2, 0, 0, "TAGS\x01t\x02")
               for i in range(10)]
        _first_units(fast, pure)
        broken = fast.consume_queue_table["T"][1]
        files = broken.mapped_file_queue
        broken.mapped_file_queue = None  # (the second queue's files cannot be read)
        with pytest.raises(AttributeError):
            each(run, len(run), fast.consume_queue_table)
        broken.mapped_file_queue = files
        _put_run_both(fast, pure, run)
    finally:
        fast.shutdown()
        pure.shutdown()
