"""A pull's records copied out in one call (common/_pull_gather.c): the compiled gather against
its pure twin, and the store's read path with it against the read path without it, for pulls
of every shape: across CommitLog files, past fillers, at the transfer limits in memory and on
disk, past the readable end, from a deleted file."""

from __future__ import annotations

import importlib
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from export.columnar import _join_pure
from export.pull_reader import _record_starts_pure
from storage import get_message as get_message_module
from storage.get_message import FILLER_SIZE, gather_joined_pure, gather_records_pure
from storage.message import MessageExtBrokerInner
from storage.results import TagsFilter

try:
    core = importlib.import_module("common._storecore")
except ImportError:
    core = None
compiled = pytest.mark.skipif(core is None, reason="the compiled core is not built")

UNIT = struct.Struct(">qiq")


@st.composite
def pulls(draw):
    """Units into a 4 KiB file at 8192 (some elsewhere, fillers, damaged sizes) and limits."""
    units = []
    at = 8192 + draw(st.integers(0, 100))
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["record"] * 6 + ["filler", "elsewhere", "zero", "long",
                                                      "negative", "far", "below"]))
        size = draw(st.integers(1, 300))
        if kind == "filler":
            units.append(UNIT.pack(0, FILLER_SIZE, 0))
            continue
        # What a damaged or hostile ConsumeQueue could hold: any offset, any size.
        phy = {"elsewhere": 100, "far": 2**63 - 1, "below": -(2**63)}.get(kind, at)
        size = {"zero": 0, "long": 5000, "negative": -(2**31)}.get(kind, size)
        units.append(UNIT.pack(phy, size, 0))
        at += max(size, 0) if kind == "record" else 0
    limits = tuple(draw(st.integers(0, 3000)) for _ in range(4))
    return (b"".join(units), draw(st.integers(0, 3)), draw(st.integers(0, 4096)),
            draw(st.integers(8192, 20000)), draw(st.integers(0, 12000)), draw(st.integers(1, 40)),
            draw(st.integers(0, 3)), limits)


@pytest.mark.twins
@compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pulls())
def test_the_gathers_take_the_same_records(pull):
    units, start, readable, max_phy, memory_limit, max_nums, count, limits = pull
    mm = bytes(range(256)) * 16
    total = 100 * count
    outcomes = []
    for gather in (core.gather_records, gather_records_pure):
        records, offsets = [b"before"], [7]
        answer = gather(units, start, 1000, mm, 8192, readable, max_phy, memory_limit, max_nums,
                        count, total, limits, records, offsets)
        outcomes.append((answer, records, offsets))
    assert outcomes[0] == outcomes[1]


@pytest.mark.twins
@compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pulls())
def test_the_joined_gathers_take_the_same_records_in_one_piece(pull):
    """A pull's body gathered in one piece: the same units taken and the same decisions as the
    record-by-record gather, the records one after another (compiled and pure)."""
    units, start, readable, max_phy, memory_limit, max_nums, count, limits = pull
    mm = bytes(range(256)) * 16
    total = 100 * count
    records: list[bytes] = []
    answer = gather_records_pure(units, start, 1000, mm, 8192, readable, max_phy, memory_limit,
                                 max_nums, count, total, limits, records, [])
    want = (*answer, len(records), b"".join(records))
    for gather in (core.gather_joined, gather_joined_pure):
        assert gather(units, start, 1000, mm, 8192, readable, max_phy, memory_limit, max_nums,
                      count, total, limits) == want


# --- the read path with and without it ------------------------------------------------------
def _filled_store(store_factory, **config):
    store = store_factory(**config)
    for i in range(300):  # ~200-byte records in 4 KiB CommitLog files: a pull crosses files
        store.put_message(MessageExtBrokerInner(
            topic="Pulls", body=os.urandom(20 + i % 90), queue_id=i % 2,
            properties_string=f"TAGS\x01t{i % 3}\x02KEYS\x01k{i}\x02", born_timestamp=1))
    assert store.wait_dispatched()
    return store


def _limited_store(store_factory, on_disk: bool):
    """A filled store with small transfer limits; ``on_disk``: all but its newest records count
    as on disk (the disk limits apply)."""
    store = _filled_store(store_factory, max_transfer_count_on_message_in_memory=24,
                          max_transfer_bytes_on_message_in_memory=3000,
                          max_transfer_count_on_message_in_disk=6,
                          max_transfer_bytes_on_message_in_disk=900)
    if on_disk:
        store.memory_limit = 5000
    return store


def _all_pulls(store, max_nums: int):
    """Every pull's answer: unfiltered, subscribed to "*" (a consumer's usual), to one tag."""
    outcomes = []
    for queue_id in (0, 1, 2):
        for offset in range(-1, store.get_max_offset_in_queue("Pulls", queue_id) + 2, 7):
            for message_filter in (None, TagsFilter("*"), TagsFilter("t1")):
                result = store.get_message("g", "Pulls", queue_id, offset, max_nums,
                                           message_filter)
                outcomes.append((queue_id, offset, result))
    return outcomes


@pytest.mark.parametrize("max_nums", [1, 5, 32, 1000])
@pytest.mark.parametrize("on_disk", [False, True])
def test_the_read_path_answers_alike_with_and_without_the_gather(store_factory, monkeypatch,
                                                                 max_nums, on_disk):
    store = _limited_store(store_factory, on_disk)
    gathered = []
    real = get_message_module._gather_records
    if real is not None:  # (counted: the gather must be what answered most of these)
        monkeypatch.setattr(get_message_module, "_gather_records",
                            lambda *args: gathered.append(1) or real(*args))
    with_gather = _all_pulls(store, max_nums)
    monkeypatch.setattr(get_message_module, "_gather_records", None)
    assert _all_pulls(store, max_nums) == with_gather
    if real is not None:
        assert len(gathered) > len(with_gather) // 2  # unfiltered and "*" pulls alike


def _answers(store, max_nums: int, joined: bool) -> list[tuple]:
    """What a pull's answer is made of, for every pull of :func:`_all_pulls`."""
    answers = []
    for queue_id in (0, 1, 2):
        for offset in range(-1, store.get_max_offset_in_queue("Pulls", queue_id) + 2, 7):
            for message_filter in (None, TagsFilter("*"), TagsFilter("t1")):
                r = store.get_message("g", "Pulls", queue_id, offset, max_nums, message_filter,
                                      joined=joined)
                if joined:
                    assert r.queue_offsets == []
                answers.append((queue_id, offset, r.status, r.next_begin_offset, r.min_offset,
                                r.max_offset, r.suggest_pulling_from_slave, r.body,
                                r.message_count, r.buffer_total_size))
    return answers


@pytest.mark.parametrize("max_nums", [1, 5, 32, 1000])
@pytest.mark.parametrize("on_disk", [False, True])
@pytest.mark.parametrize("gather", ["compiled", "pure", "none"])
def test_a_pull_read_joined_answers_as_record_by_record(store_factory, monkeypatch, max_nums,
                                                         on_disk, gather):
    store = _limited_store(store_factory, on_disk)
    if gather == "compiled":
        if core is None:
            pytest.skip("the compiled core is not built")
        # (set here: a run on the pure path, ROCKETDESK_PURE=1, leaves the store without them)
        monkeypatch.setattr(get_message_module, "_gather_records", core.gather_records)
        monkeypatch.setattr(get_message_module, "_gather_joined", core.gather_joined)
    elif gather == "pure":
        monkeypatch.setattr(get_message_module, "_gather_records", gather_records_pure)
        monkeypatch.setattr(get_message_module, "_gather_joined", gather_joined_pure)
    elif gather == "none":
        monkeypatch.setattr(get_message_module, "_gather_records", None)
    joined_gathers = []
    real = get_message_module._gather_joined
    if gather != "none":  # (counted: the joined gather must be what answered most of them)
        monkeypatch.setattr(get_message_module, "_gather_joined",
                            lambda *args: joined_gathers.append(1) or real(*args))
    record_by_record = _answers(store, max_nums, joined=False)
    assert _answers(store, max_nums, joined=True) == record_by_record
    assert sum(answer[-2] for answer in record_by_record) > 100  # (records were found)
    if gather != "none":
        assert len(joined_gathers) > len(record_by_record) // 3  # unfiltered and "*" pulls


def test_a_pull_into_deleted_files_answers_alike(store_factory, monkeypatch):
    store = _filled_store(store_factory)
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) > 4
    removed = files[1:3]
    store.commit_log.mapped_file_queue.mapped_files = [files[0], *files[3:]]  # as if deleted
    try:
        with_gather = _all_pulls(store, 32)
        joined = _answers(store, 32, joined=True)  # (as the broker reads a pull)
        assert joined == _answers(store, 32, joined=False)
        monkeypatch.setattr(get_message_module, "_gather_records", None)
        without = _all_pulls(store, 32)
        assert without == with_gather
        assert _answers(store, 32, joined=True) == joined
        assert any(r.status.name == "MESSAGE_WAS_REMOVING" for _, _, r in with_gather)
    finally:
        store.commit_log.mapped_file_queue.mapped_files = [files[0], *removed, *files[3:]]


# --- the export's join of value ranges ------------------------------------------------------
@pytest.mark.twins
@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200),
       st.lists(st.tuples(st.integers(-3, 210), st.integers(-3, 210)), max_size=12))
def test_the_joins_of_value_ranges_agree(data, ranges):
    starts = np.array([s for s, _ in ranges], np.int64)
    lengths = np.array([n for _, n in ranges], np.int64)
    outcomes = []
    for join in (core.join_ranges, _join_pure):
        try:
            outcomes.append(join(data, starts, lengths))
        except (ValueError, OverflowError) as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]
    if isinstance(outcomes[0], tuple):
        offsets = np.frombuffer(outcomes[0][0], np.int32)
        assert offsets.tolist() == [0, *np.cumsum(lengths).tolist()]


# --- the export's walk of a pull response's records -----------------------------------------
@pytest.mark.twins
@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-40, 120), st.integers(-5, 60), st.integers(28, 90)),
                max_size=10),
       st.binary(max_size=40), st.integers(-3, 70))
def test_the_walks_of_a_pull_responses_records_agree(records, tail, end):
    """Records whose TOTALSIZE says what they take, or too little, too much, zero or less; queue
    offsets below, at and past the end; a torn tail: both walks stop at the same place."""
    body = b"".join(struct.pack(">i16xq", size, queue_offset) + bytes(length - 28)
                    for size, queue_offset, length in records) + tail
    starts, stop = core.record_starts(body, end)
    want_starts, want_stop = _record_starts_pure(body, end)
    assert np.frombuffer(starts, np.int64).tolist() == want_starts
    assert stop == want_stop
