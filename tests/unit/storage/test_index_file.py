"""IndexFile and IndexService (storage/index_file.py) against the layout of reference §5.3."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage import index_file as index_file_module
from storage.index_file import IndexFile, IndexService, index_key_hash, topic_seed
from storage.message import java_hash
from storage.owed_deletions import OWED

T0 = 1_700_000_000_000  # a whole second
NAME = "20240101000000000"


def _index(tmp_path, slots: int = 8, entries: int = 16) -> IndexFile:
    return IndexFile(str(tmp_path / NAME), slots, entries)


def _raw(index: IndexFile) -> bytes:
    with open(index.path, "rb") as f:
        return f.read()


def _flushed(index: IndexFile) -> bytes:
    """The file once flushed (the header is written then)."""
    index.flush()
    return _raw(index)


def _entry(raw: bytes, slots: int, number: int) -> tuple[int, int, int, int]:
    return struct.unpack_from(">iqii", raw, 40 + slots * 4 + number * 20)


def _slot(raw: bytes, number: int) -> int:
    return struct.unpack_from(">i", raw, 40 + number * 4)[0]


# --- IndexFile layout -------------------------------------------------------------------------------
def test_file_is_header_then_slot_table_then_entries(tmp_path):
    index = _index(tmp_path, 8, 16)
    assert os.path.getsize(index.path) == 40 + 8 * 4 + 16 * 20
    assert index.index_count == 1  # entry 0 is never used
    assert _raw(index) == bytes(40 + 8 * 4 + 16 * 20)


def test_header_is_begin_end_times_begin_end_offsets_slot_count_and_index_count(tmp_path):
    index = _index(tmp_path)
    assert index.put_key("T#a", 100, T0)
    assert struct.unpack(">qqqqii", _raw(index)[:40]) == (0,) * 6  # written at flush
    index.flush()
    assert struct.unpack(">qqqqii", _raw(index)[:40]) == (T0, T0, 100, 100, 1, 2)
    assert index.put_key("T#a", 250, T0 + 7_000)
    index.flush()
    assert struct.unpack(">qqqqii", _raw(index)[:40]) == (T0, T0 + 7_000, 100, 250, 1, 3)


def test_slots_point_at_the_newest_entry_and_entries_hold_hash_offset_seconds_and_previous(tmp_path):
    index = _index(tmp_path, 8, 16)
    keys = ["T#a", "T#b", "T#a"]
    for number, key in enumerate(keys, start=1):
        index.put_key(key, number * 1000, T0 + number * 2_500)
    raw = _flushed(index)
    ha, hb = index_key_hash("T#a"), index_key_hash("T#b")
    assert ha % 8 != hb % 8  # the keys land in different slots
    assert _slot(raw, ha % 8) == 3
    assert _slot(raw, hb % 8) == 2
    # time diff in whole seconds from beginTimestamp (the first entry's time, T0 + 2.5 s)
    assert _entry(raw, 8, 1) == (ha, 1000, 0, 0)
    assert _entry(raw, 8, 2) == (hb, 2000, 2, 0)
    assert _entry(raw, 8, 3) == (ha, 3000, 5, 1)
    assert _entry(raw, 8, 0) == (0, 0, 0, 0)
    assert struct.unpack_from(">i", raw, 32)[0] == 2  # two slots in use


def test_time_diff_is_clamped_at_zero_for_a_store_time_before_the_begin(tmp_path):
    index = _index(tmp_path)
    index.put_key("T#a", 100, T0)
    index.put_key("T#b", 200, T0 - 60_000)
    assert _entry(_raw(index), 8, 2)[2] == 0


def test_a_full_file_refuses_keys(tmp_path):
    index = _index(tmp_path, 4, 4)
    assert [index.put_key(f"T#{i}", i, T0) for i in range(4)] == [True, True, True, False]
    assert index.is_write_full()
    assert index.index_count == 4


def test_reopened_file_keeps_its_header_and_answers_queries(tmp_path):
    index = _index(tmp_path)
    index.put_key("T#a", 100, T0)
    index.put_key("T#a", 200, T0 + 1000)
    index.flush()
    index.close()
    again = _index(tmp_path)
    assert (again.index_count, again.end_phy_offset, again.begin_timestamp) == (3, 200, T0)
    assert again.select_phy_offset("T#a", 10, 0, T0 + 10_000) == [200, 100]


# --- chains and queries ---------------------------------------------------------------------------
def test_colliding_keys_chain_newest_first_and_only_matching_hashes_return(tmp_path):
    index = _index(tmp_path, 1, 32)  # one slot: every key collides
    keys = ["T#x", "T#y", "T#x", "T#z", "T#x", "T#y"]
    for number, key in enumerate(keys, start=1):
        index.put_key(key, number * 10, T0 + number * 1000)
    raw = _flushed(index)
    assert _slot(raw, 0) == 6
    assert [_entry(raw, 1, n)[3] for n in range(1, 7)] == [0, 1, 2, 3, 4, 5]
    assert struct.unpack_from(">i", raw, 32)[0] == 1
    assert index.select_phy_offset("T#x", 10, 0, T0 + 60_000) == [50, 30, 10]
    assert index.select_phy_offset("T#y", 10, 0, T0 + 60_000) == [60, 20]
    assert index.select_phy_offset("T#nothing", 10, 0, T0 + 60_000) == []
    assert index.select_phy_offset("T#x", 2, 0, T0 + 60_000) == [50, 30]


@pytest.mark.parametrize(
    ("begin", "end", "expected"),
    [
        (T0, T0 + 30_000, [40, 30, 20, 10]),
        (T0 + 10_000, T0 + 20_000, [30, 20]),  # both bounds inclusive
        (T0 + 10_001, T0 + 20_999, [30]),
        (T0 + 31_000, T0 + 90_000, []),
        (0, T0 - 1, []),
    ],
)
def test_queries_return_only_entries_stored_within_the_time_range(tmp_path, begin, end, expected):
    index = _index(tmp_path)
    for i in range(4):
        index.put_key("T#k", (i + 1) * 10, T0 + i * 10_000)
    assert index.select_phy_offset("T#k", 10, begin, end) == expected


# --- key hashes -------------------------------------------------------------------------------------
def test_a_key_whose_java_hash_is_integer_min_value_hashes_to_zero(tmp_path):
    assert java_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0
    index = _index(tmp_path, 8, 16)
    index.put_key("polygenelubricants", 4242, T0)
    raw = _raw(index)
    assert _slot(raw, 0) == 1
    assert _entry(raw, 8, 1)[:2] == (0, 4242)
    assert index.select_phy_offset("polygenelubricants", 4, 0, T0) == [4242]


@settings(max_examples=300)
@given(st.text(max_size=30), st.text(max_size=30))
@example("", "polygenelubricants")
@example("T", "TagA")
def test_key_hash_is_abs_java_hash_and_a_topic_seed_continues_it(topic, key):
    full = f"{topic}#{key}"
    h = java_hash(full)
    expected = 0 if h == -(2**31) else abs(h)
    assert index_key_hash(full) == expected
    assert index_key_hash(key, topic_seed(topic)) == expected


# --- IndexService -----------------------------------------------------------------------------------
def _service(tmp_path, slots: int = 4, entries: int = 4, batch: int = 64) -> IndexService:
    return IndexService(str(tmp_path / "index"), slots, entries, batch)


def test_index_service_rolls_to_a_new_file_when_the_current_one_is_full(tmp_path):
    service = _service(tmp_path)  # 3 usable entries a file
    for i in range(3):
        service.build_index("T", f"k{i}", None, i * 100, T0 + i * 1000)
    assert len(service.index_files) == 1
    assert service.index_files[0].is_write_full()
    service.build_index("T", "k3", None, 300, T0 + 3000)
    assert len(service.index_files) == 2
    newest = service.index_files[1]
    assert (newest.begin_phy_offset, newest.end_phy_offset, newest.index_count) == (300, 300, 2)
    assert len(os.listdir(tmp_path / "index")) == 2
    assert all(name.isdigit() and len(name) == 17 for name in os.listdir(tmp_path / "index"))


def test_a_new_index_file_inherits_the_previous_end_offset_and_timestamp(tmp_path):
    service = _service(tmp_path)
    for i in range(3):
        service.build_index("T", f"k{i}", None, i * 100, T0 + i * 1000)
    # Before its first entry the new file already covers the previous file's end: a crash here
    # must not make recovery re-index from offset 0. (_last_file_for_write is the roll itself.)
    fresh = service._last_file_for_write()
    assert fresh is service.index_files[1]
    header = struct.unpack(">qqqqii", _raw(fresh)[:40])
    assert header == (T0 + 2000, T0 + 2000, 200, 200, 0, 1)
    assert service.end_phy_offset() == 200
    service.shutdown()
    reloaded = _service(tmp_path)
    reloaded.load(True, 0)
    assert [f.end_phy_offset for f in reloaded.index_files] == [200, 200]
    assert reloaded.end_phy_offset() == 200


def test_query_offset_walks_files_newest_first(tmp_path):
    service = _service(tmp_path)
    for i in range(8):  # two keys a message: messages straddle files
        service.build_index("T", f"k{i} common", None, i * 100, T0 + i * 1000)
    assert len(service.index_files) == 6
    offsets, last_ts, last_phy = service.query_offset("T", "common", 64, 0, T0 + 60_000)
    assert offsets == [700, 600, 500, 400, 300, 200, 100, 0]
    assert (last_ts, last_phy) == (T0 + 7000, 700)
    assert service.query_offset("T", "common", 3, 0, T0 + 60_000)[0] == [700, 600, 500]
    assert service.query_offset("T", "k2", 64, 0, T0 + 60_000)[0] == [200]
    assert service.query_offset("T", "common", 64, T0 + 5000, T0 + 6000)[0] == [600, 500]
    assert service.query_offset("U", "common", 64, 0, T0 + 60_000)[0] == []


def test_query_offset_caps_results_at_max_msgs_num_batch(tmp_path):
    service = _service(tmp_path, batch=2)
    for i in range(5):
        service.build_index("T", "same", None, i * 100, T0 + i * 1000)
    assert service.query_offset("T", "same", 64, 0, T0 + 60_000)[0] == [400, 300]


def test_query_offset_filters_keys_of_other_topics_sharing_a_slot(tmp_path):
    service = _service(tmp_path, slots=1, entries=32)
    service.build_index("T", "k", None, 100, T0)
    service.build_index("U", "k", None, 200, T0)
    service.build_index("T", None, "UNIQ1", 300, T0)
    assert service.query_offset("T", "k", 64, 0, T0)[0] == [100]
    assert service.query_offset("U", "k", 64, 0, T0)[0] == [200]
    assert service.query_offset("T", "UNIQ1", 64, 0, T0)[0] == [300]


def test_a_query_reads_at_most_its_budget_of_chain_entries(tmp_path, monkeypatch):
    # A hot key asked for a time far back read every newer entry of its chain first, on the
    # event loop: millions of them held the loop for seconds.
    monkeypatch.setattr(index_file_module, "MAX_QUERY_CHAIN_STEPS", 10)
    service = _service(tmp_path, slots=4, entries=64)
    for i in range(30):
        service.build_index("T", "hot", None, i * 100, T0 + i * 1000)
    assert len(service.index_files) == 1
    assert service.query_offset("T", "hot", 64, T0, T0)[0] == []  # thirty entries back
    monkeypatch.setattr(index_file_module, "MAX_QUERY_CHAIN_STEPS", 100)
    assert service.query_offset("T", "hot", 64, T0, T0)[0] == [0]


def test_the_query_budget_is_shared_by_every_file_it_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(index_file_module, "MAX_QUERY_CHAIN_STEPS", 10)
    service = _service(tmp_path, slots=4, entries=8)  # 7 entries a file: none reaches 10
    for i in range(30):
        service.build_index("T", "hot", None, i * 100, T0 + i * 1000)
    assert len(service.index_files) > 2
    assert service.query_offset("T", "hot", 64, 0, T0 + 60_000)[0] == [
        2900, 2800, 2700, 2600, 2500, 2400, 2300, 2200, 2100, 2000]


def test_a_chain_walk_stops_at_its_step_limit(tmp_path):
    index = _index(tmp_path, 1, 32)
    for number in range(1, 21):
        index.put_key("T#x", number * 10, T0 + number * 1000)
    assert index.walk_chain("T#x", 64, 0, T0 + 60_000, 5) == ([200, 190, 180, 170, 160], 5)
    assert index.select_phy_offset("T#x", 64, 0, T0 + 1000, max_steps=19) == []
    assert index.select_phy_offset("T#x", 64, 0, T0 + 1000, max_steps=20) == [10]


def test_build_index_ignores_a_message_already_indexed(tmp_path):
    service = _service(tmp_path, slots=8, entries=32)
    service.build_index("T", "k", None, 100, T0)
    service.build_index("T", "k", None, 100, T0)  # dispatched again
    service.build_index("T", "k", None, 50, T0)  # older than the newest indexed
    assert service.index_files[0].index_count == 2
    assert service.query_offset("T", "k", 64, 0, T0)[0] == [100]


def test_a_crash_after_an_index_roll_keeps_the_full_file(tmp_path):
    # The index is flushed rarely (flush.py); a file that fills is flushed as the next starts,
    # and its time is what the checkpoint takes until the next thorough flush.
    from storage.index_file import IndexService

    path = str(tmp_path / "index")
    service = IndexService(path, hash_slot_num=100, index_num=400)
    for i in range(450):
        service.build_index("T", f"k{i}", None, 100 + i, 1000 + i)
    full, _newest = service.index_files
    assert service.flushed_timestamp == full.end_timestamp > 0
    checkpoint_index_ts = service.flushed_timestamp  # what the next flush round persists
    for index_file in service.index_files:
        index_file.close()
    reopened = IndexService(path, hash_slot_num=100, index_num=400)
    reopened.load(last_exit_ok=False, index_msg_timestamp=checkpoint_index_ts)
    assert [f.mapped_file.file_name for f in reopened.index_files][:1] == [
        full.mapped_file.file_name]
    assert reopened.index_files[0].end_phy_offset == full.end_phy_offset
    reopened.destroy()


def test_index_files_a_query_holds_are_deleted_once_it_lets_go(tmp_path):
    service = _service(tmp_path)  # 3 usable entries a file
    for i in range(9):
        service.build_index("T", f"k{i}", None, i * 100, T0 + i * 1000)
    assert len(service.index_files) == 3
    expired, middle, cut = service.index_files
    assert cut.mapped_file.hold()
    assert expired.mapped_file.hold()
    service.truncate_after(600)  # the newest file starts at the cut: dropped, but held
    service.delete_expired_file(300)  # the oldest file: below the CommitLog's minimum, held
    assert service.index_files == [middle]
    assert len(os.listdir(tmp_path / "index")) == 3  # still there: a query reads them
    assert len(OWED.under(str(tmp_path))) == 2
    cut.mapped_file.release()
    expired.mapped_file.release()
    service.delete_expired_file(300)  # the next round deletes what was let go
    assert os.listdir(tmp_path / "index") == [os.path.basename(middle.mapped_file.path)]
    assert OWED.under(str(tmp_path)) == []
    service.shutdown()


@pytest.mark.parametrize("slots", [1, 7])
def test_keys_indexed_after_the_last_flush_are_indexed_again_after_a_kill_and_older_ones_stay(
        tmp_path, slots):
    """Entries and slots reach the mapping as keys come, the header at flush. A process killed
    between the two leaves slots naming entries the header does not count; dispatch indexes
    those keys again, and every key is found afterwards, older ones of the same slot too."""
    folder = str(tmp_path / "index")
    service = IndexService(folder, slots, 64)
    service.load(True, 0)
    base = 1_700_000_000_000
    for i in range(10):
        service.build_index("T", f"k{i}", None, 100 * i, base + i)
    service.flush()
    for i in range(10, 16):
        service.build_index("T", f"k{i}", None, 100 * i, base + i)
    service.close()  # killed: the header still counts the first ten keys
    again = IndexService(folder, slots, 64)
    again.load(False, base + 60_000)  # (the checkpoint is past the file: it is kept)
    assert again.last_indexed_offset == 900
    for i in range(10, 16):  # dispatch, from the header's end on
        again.build_index("T", f"k{i}", None, 100 * i, base + i)
    for i in range(16):
        assert again.query_offset("T", f"k{i}", 8, 0, base + 100)[0] == [100 * i], i
    again.shutdown()
