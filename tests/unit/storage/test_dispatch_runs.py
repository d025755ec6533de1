"""Dispatch of a run (storage/dispatch_runs.py): the compiled functions against their pure twins,
byte for byte, and a store dispatching batches and bursts of sends by runs against one
dispatching them record by record: the same ConsumeQueue units, the same index entries, the
same arrivals told, a failure half-way retried without doubling anything."""

from __future__ import annotations

import importlib
import time
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import commitlog as commitlog_module
from storage.dispatch_runs import (
    consume_queue_units_into_pure,
    index_keys_into_pure,
    plain_run_pure,
)
from storage.index_file import INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, IndexFile
from storage.message import MessageExtBatch, MessageExtBrokerInner
from storage.message_store import DefaultMessageStore
from storage.record import BatchEntry, decode_record, encode_batch_body
from tests.conftest import make_message, small_config

try:
    core = importlib.import_module("common._storecore")
except ImportError:
    core = None
compiled = pytest.mark.skipif(core is None, reason="the compiled core is not built")

# Property values as clients send them, and the awkward ones: non-ASCII (an astral character
# is two UTF-16 units in Java's hash), empty values, spaces between keys, a lone surrogate.
_values = st.sampled_from(["a", "TagA", "é", "键", "🚀x", "k1 k2", " k3  k4 ", "", " ", "\ud800"])
_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "TAGSX"])
_props = st.lists(st.tuples(_names, _values), max_size=5).map(
    lambda pairs: "".join(f"{n}\x01{v}\x02" for n, v in pairs))


@st.composite
def runs(draw):
    """Entries as CommitLog.appended holds them: mostly a run, sometimes broken on purpose."""
    count = draw(st.integers(0, 12))
    offset, queue_offset = draw(st.integers(0, 10_000)), draw(st.integers(0, 500))
    entries = []
    for i in range(count):
        size = draw(st.integers(1, 300))
        topic, queue_id, sys_flag = "TopicTest", 3, draw(st.sampled_from([0, 0, 0, 1, 4, 8]))
        start, qo = offset, queue_offset + i
        breaks = draw(st.sampled_from([None] * 8 + ["gap", "topic", "queue", "qo", "blank"]))
        if breaks == "gap":
            start += 1
        elif breaks == "topic":
            topic = "Other"
        elif breaks == "queue":
            queue_id = 4
        elif breaks == "qo":
            qo += 1
        elif breaks == "blank":
            topic = None
        entries.append((start, size, 1_700_000_000_000 + draw(st.integers(0, 5000)) * i, qo,
                        topic, queue_id, sys_flag, 0, draw(_props)))
        offset = start + size
    return entries


@pytest.mark.twins
@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 1), st.integers(0, 4000))
def test_the_run_is_measured_alike(entries, shift, short):
    start = entries[0][0] + shift if entries else 0
    readable = (entries[-1][0] + entries[-1][1] - short) if entries else 0
    assert core.plain_run(entries, start, readable) == plain_run_pure(entries, start, readable)


@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 3))
def test_the_units_are_written_alike(entries, position):
    count, _ = plain_run_pure(entries, entries[0][0] if entries else 0, 1 << 62)
    pure, fast = bytearray(b"\xee" * 400), bytearray(b"\xee" * 400)
    consume_queue_units_into_pure(pure, position * 20, entries, count)
    core.consume_queue_units_into(fast, position * 20, entries, count)
    assert fast == pure


@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.sampled_from([1, 3, 17]), st.integers(1, 30), st.integers(1, 40),
       st.integers(-1, 12), st.sampled_from([0, 1_699_999_000_000, 1_700_000_003_000]))
def test_the_index_entries_are_written_alike(entries, slots, index_count, limit, skip, begin):
    index_num = 40
    limit = min(limit, index_num)
    index_count = min(index_count, index_num)
    size = INDEX_HEADER_SIZE + slots * 4 + index_num * INDEX_ENTRY_SIZE
    pure, fast = bytearray(size), bytearray(size)
    last_indexed = entries[skip][0] if 0 <= skip < len(entries) else -1
    count, _ = plain_run_pure(entries, entries[0][0] if entries else 0, 1 << 62)
    args = (slots, index_num, index_count, limit, 12345, begin, last_indexed, entries, count)
    assert core.index_keys_into(fast, *args) == index_keys_into_pure(pure, *args)
    assert fast == pure


def test_the_pure_index_run_writes_what_message_by_message_writes(tmp_path):
    """The pure twin is itself held to the index's own key-by-key writes."""
    entries = [(100 * i + 1000, 100, 1_700_000_000_000 + 700 * i, i, "T", 0, 0, 0,
                f"TAGS\x01t\x02KEYS\x01k{i} é{i}  \x02UNIQ_KEY\x01U{i}\x02" if i % 3 else "WAIT\x01x\x02")
               for i in range(12)]
    one_by_one = IndexFile(str(tmp_path / "20260101000000000"), 7, 60)
    run = IndexFile(str(tmp_path / "20260101000000001"), 7, 60)
    try:
        from storage.index_file import index_key_hash, topic_seed
        from storage.message import dispatch_properties_pure

        seed = topic_seed("T")
        for offset, _, store_ts, *_, props in entries:
            _, keys, uniq, _ = dispatch_properties_pure(props)
            for key in [k for k in [uniq, *(keys or "").split(" ")] if k]:
                assert one_by_one.put_key_hash(index_key_hash(key, seed), offset, store_ts)
        done, touched = run.put_keys_run(seed, entries, len(entries), -1, index_keys_into_pure)
        assert (done, touched) == (12, 11)
        assert run.mm[:] == one_by_one.mm[:]
        for name in ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset",
                     "hash_slot_count", "index_count"):
            assert getattr(run, name) == getattr(one_by_one, name), name
    finally:
        one_by_one.destroy(0)
        run.destroy(0)


# --- a store dispatching by runs, against one dispatching record by record ------------------
def _batches():
    """Batches as senders make them: tags, keys (non-ASCII too), some without keys, all UNIQ;
    one message with more keys than one call takes (they go one by one)."""
    for b in range(40):
        yield [BatchEntry(0, f"body {b}-{i}".encode() * 3,
                          f"TAGS\x01{'TagA' if i % 2 else '标签'}\x02"
                          + (f"KEYS\x01order-{b}-{i} 键{i}\x02" if i % 4 else "")
                          + ("KEYS\x01" + " ".join(f"m{k}" for k in range(1100)) + "\x02"
                             if (b, i) == (5, 2) else "")
                          + f"UNIQ_KEY\x01U{b:04d}{i:04d}\x02")
               for i in range(1 + b % 9)]


def _fill(store: DefaultMessageStore) -> None:
    for b, entries in enumerate(_batches()):
        store.put_messages(MessageExtBatch(topic="Runs", body=encode_batch_body(entries),
                                           queue_id=b % 3))
        store.reput.reput_inline()  # dispatch as the broker does, right after the put
        if store.running_flags.write_refusal() is not None:
            store.reput.do_reput()  # dispatch failed: the service's next round retries


def _views(store: DefaultMessageStore) -> tuple[dict, list]:
    """Every ConsumeQueue's bytes, and every index file's (headers included, as flushed)."""
    queues = {}
    for queue_id, queue in store.consume_queue_table["Runs"].items():
        files = queue.mapped_file_queue.mapped_files
        queues[queue_id] = b"".join(bytes(f.mm[:f.wrote_position]) for f in files)
    indexes = []
    for index in store.index_service.index_files:
        index.flush()
        indexes.append(bytes(index.mm[:]))
    return queues, indexes


@pytest.fixture
def still_clock(monkeypatch):
    """One store time for every put: two stores then write the same index bytes."""
    clock = types.SimpleNamespace(time=lambda: 1_700_000_000.0, monotonic=time.monotonic)
    monkeypatch.setattr(commitlog_module, "time", clock)


def _store(tmp_path, name: str, runs_on: bool) -> DefaultMessageStore:
    # ConsumeQueue files of 30 units: most runs fit the last file, some cross into the next;
    # index files of 256 entries: the keys fill several.
    store = DefaultMessageStore(small_config(tmp_path / name, mapped_file_size_commit_log=1 << 20,
                                             mapped_file_size_consume_queue=20 * 30))
    store.load()  # not started: dispatch happens here, in order, only when asked
    if not runs_on:
        store.reput.dispatch_plain_run = None
    return store


def _runs_taken(store: DefaultMessageStore) -> list:
    """(count, one queue) of every run the store's dispatch takes from now on."""
    taken: list = []
    original = store.dispatchers.dispatch_plain_run
    store.reput.dispatch_plain_run = (
        lambda run, count, one_queue: taken.append((count, one_queue))
        or original(run, count, one_queue))
    return taken


def test_a_store_dispatching_runs_writes_what_record_by_record_writes(tmp_path, still_clock):
    by_runs, one_by_one = _store(tmp_path, "runs", True), _store(tmp_path, "records", False)
    taken = _runs_taken(by_runs)
    try:
        _fill(by_runs)
        _fill(one_by_one)
        assert max(taken, default=(0, True)) == (9, True)  # whole batches, one queue each
        views = _views(by_runs)
        assert len(views[1]) >= 6  # (the runs crossed index files)
        assert views == _views(one_by_one)
        queue = by_runs.consume_queue_table["Runs"][1]
        assert queue.get_max_offset_in_queue() == sum(1 + b % 9 for b in range(40) if b % 3 == 1)
        found = by_runs.query_message("Runs", "键3", 50, 0, 1 << 62)
        bodies = sorted(decode_record(raw).body for raw in found.messages)
        assert bodies == sorted(b"body %d-3" % b * 3 for b in range(40) if 1 + b % 9 > 3)
    finally:
        by_runs.shutdown()
        one_by_one.shutdown()


def test_a_run_failing_half_way_is_retried_without_doubling(tmp_path, still_clock, monkeypatch):
    failing, reference = _store(tmp_path, "failing", True), _store(tmp_path, "reference", False)
    try:
        index = failing.index_service
        real = type(index).build_index_run
        calls = []

        def full_disk_once(self, topic, run, count, keys_into):
            calls.append(count)
            if len(calls) == 5:  # the units of this run are in already: only the keys fail
                raise OSError(28, "No space left on device")
            return real(self, topic, run, count, keys_into)

        monkeypatch.setattr(type(index), "build_index_run", full_disk_once)
        _fill(failing)
        _fill(reference)
        assert len(calls) > 5
        assert _views(failing) == _views(reference)
    finally:
        failing.shutdown()
        reference.shutdown()


def _fill_bursts(store: DefaultMessageStore) -> list:
    """Sends to several queues, dispatched a burst at a time, as the broker's loop does after
    each read (tags, keys, one with no keys; a burst of one now and then). Returns what the
    arrival listeners heard after each burst: the newest queue offset of each queue."""
    heard: dict = {}
    store.reput.arrival_listeners.append(lambda arrivals: heard.update(
        ((arrival.topic, arrival.queue_id), arrival.consume_queue_offset)
        for arrival in arrivals))
    told = []
    number = 0
    for burst in range(60):
        for _ in range(1 + burst % 7):
            props = (f"TAGS\x01{'TagA' if number % 3 else 'é'}\x02"
                     + (f"KEYS\x01key-{number} 键\x02" if number % 5 else "")
                     + f"UNIQ_KEY\x01S{number:06d}\x02")
            store.put_message(MessageExtBrokerInner(
                topic="Runs", body=f"send {number}".encode(), queue_id=(number * 5) % 4,
                properties_string=props, born_timestamp=1_700_000_000_000))
            number += 1
        store.reput.reput_inline()
        told.append(dict(heard))
        heard.clear()
    return told


def test_bursts_of_sends_to_several_queues_write_what_record_by_record_writes(tmp_path, still_clock):
    by_runs, one_by_one = _store(tmp_path, "runs", True), _store(tmp_path, "records", False)
    taken = _runs_taken(by_runs)
    try:
        told = _fill_bursts(by_runs)
        assert told == _fill_bursts(one_by_one)  # each queue's newest, after every burst
        assert any(not one_queue for _, one_queue in taken)  # bursts of several queues too
        assert _views(by_runs) == _views(one_by_one)
        assert set(told[-1]) == {("Runs", q) for q in range(4)}
    finally:
        by_runs.shutdown()
        one_by_one.shutdown()


def test_a_queue_takes_a_run_only_right_after_its_last_unit(tmp_path):
    store = _store(tmp_path, "queue", True)
    try:
        _fill(store)
        queue = store.consume_queue_table["Runs"][0]
        next_unit = queue.get_max_offset_in_queue()
        physical = store.commit_log.get_max_offset()

        def entries(*queue_offsets):
            return [(physical + 100 * i, 100, 0, qo, "Runs", 0, 0, 0, "TAGS\x01a\x02")
                    for i, qo in enumerate(queue_offsets)]

        before = _views(store)
        for run in (entries(next_unit, next_unit + 2),  # a gap between them
                    entries(next_unit + 1, next_unit + 2),  # a gap before them
                    entries(next_unit - 1, next_unit)):  # the first one is there already
            assert not queue.put_run(run, len(run), consume_queue_units_into_pure)
        assert _views(store) == before
        assert queue.put_run(entries(next_unit, next_unit + 1), 2, consume_queue_units_into_pure)
        assert queue.get_max_offset_in_queue() == next_unit + 2
    finally:
        store.shutdown()


def test_a_run_failing_in_its_one_by_one_tail_is_retried_without_doubling(tmp_path, still_clock,
                                                                           monkeypatch):
    """The run indexes the messages before the one with 1,100 keys, then that one goes by
    itself and fails (disk full): the retry indexes it and what follows, nothing twice."""
    failing, reference = _store(tmp_path, "failing", True), _store(tmp_path, "reference", False)
    try:
        index = failing.index_service
        real = type(index).build_index
        failed = []

        def full_disk_once(self, topic, keys, uniq_key, phy_offset, store_ts):
            if self is index and keys and "m1050" in keys and not failed:
                failed.append(phy_offset)
                raise OSError(28, "No space left on device")
            return real(self, topic, keys, uniq_key, phy_offset, store_ts)

        monkeypatch.setattr(type(index), "build_index", full_disk_once)
        _fill(failing)
        _fill(reference)
        assert failed
        assert _views(failing) == _views(reference)
    finally:
        failing.shutdown()
        reference.shutdown()


def test_delayed_messages_are_not_tried_as_runs(tmp_path):
    store = _store(tmp_path, "delayed", True)
    tried = _runs_taken(store)
    try:
        for _ in range(5):
            store.put_message(MessageExtBrokerInner(
                topic="Later", body=b"x", queue_id=0, properties={"DELAY": "3"},
                properties_string="DELAY\x013\x02", born_timestamp=1))
        store.reput.reput_inline()
        assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 5
        assert tried == []  # a unit's tags code there is a time: never a run
    finally:
        store.shutdown()


def test_a_put_between_the_heads_iterator_and_its_copy_does_not_fail_the_round(tmp_path,
                                                                            still_clock,
                                                                            monkeypatch):
    # The dispatch thread copies the head of CommitLog.appended while the put path may append
    # (another thread). The interpreter can switch threads between making the deque's iterator
    # and reading it; the append then makes the iterator raise "deque mutated during
    # iteration", which used to fail the dispatch round. Here the put lands exactly there.
    from storage import dispatch

    store = _store(tmp_path, "race", True)
    real_islice = dispatch.islice
    raced = []

    def islice_then_a_put(iterable, *args):
        sliced = real_islice(iterable, *args)
        if not raced:
            raced.append(True)
            store.put_message(make_message(topic="Runs", queue_id=0, body=b"raced"))
        return sliced

    try:
        for body in (b"a", b"b", b"c"):
            store.put_message(make_message(topic="Runs", queue_id=0, body=body))
        monkeypatch.setattr(dispatch, "islice", islice_then_a_put)
        assert store.reput.do_reput() == 4  # (the three, and the one put during the copy)
        assert raced
        queue = store.consume_queue_table["Runs"][0]
        assert queue.get_max_offset_in_queue() == 4
        assert store.running_flags.write_refusal() is None
    finally:
        store.shutdown()
