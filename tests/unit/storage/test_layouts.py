"""ConsumeQueue, IndexFile and MappedFile against their on-disk layouts, read back as raw bytes."""

from __future__ import annotations

import os
import struct

from storage.consume_queue import ConsumeQueue
from storage.index_file import IndexFile, IndexService, index_key_hash
from storage.mapped_file import MappedFile, MappedFileQueue, TransientStorePool
from storage.message import java_hash


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_consume_queue_units_are_20_bytes_at_logical_offset_times_20(tmp_path):
    queue = ConsumeQueue("T", 3, str(tmp_path), 20 * 4)
    for i in range(6):
        queue.put_message_position_info(1000 + i * 100, 100, -5 + i, i)
    files = sorted(os.listdir(tmp_path / "T" / "3"))
    assert files == ["00000000000000000000", "00000000000000000080"]
    second = _read(str(tmp_path / "T" / "3" / files[1]))
    assert struct.unpack(">qiq", second[20:40]) == (1500, 100, 0)
    assert queue.get_max_offset_in_queue() == 6
    assert queue.get_unit(4) == (1400, 100, -1)


def test_a_queue_starting_late_is_padded_with_filler_units(tmp_path):
    queue = ConsumeQueue("T", 0, str(tmp_path), 20 * 10)
    queue.put_message_position_info(5000, 120, 7, 13)
    raw = _read(str(tmp_path / "T" / "0" / f"{200:020d}"))
    assert [struct.unpack_from(">qiq", raw, i * 20) for i in range(3)] == [
        (0, 0x7FFFFFFF, 0), (0, 0x7FFFFFFF, 0), (0, 0x7FFFFFFF, 0)]
    assert struct.unpack_from(">qiq", raw, 60) == (5000, 120, 7)
    assert (queue.get_min_offset_in_queue(), queue.get_max_offset_in_queue()) == (13, 14)


def test_consume_queue_recovers_its_end_and_ignores_repeated_dispatch(tmp_path):
    queue = ConsumeQueue("T", 0, str(tmp_path), 20 * 10)
    for i in range(12):
        queue.put_message_position_info(i * 50, 50, 0, i)
    queue.put_message_position_info(5 * 50, 50, 0, 5)  # replayed: already there
    queue.mapped_file_queue.shutdown()
    again = ConsumeQueue("T", 0, str(tmp_path), 20 * 10)
    again.load()
    again.recover()
    assert again.get_max_offset_in_queue() == 12
    assert again.max_physic_offset == 600
    again.truncate_dirty_logic_files(420)
    assert again.get_max_offset_in_queue() == 8


def test_consume_queue_lookup_by_time_is_a_lower_bound(tmp_path):
    queue = ConsumeQueue("T", 0, str(tmp_path), 20 * 10)
    times = {}
    for i in range(15):
        queue.put_message_position_info(i * 10, 10, 0, i)
        times[i * 10] = 1000 + (i // 3) * 10  # three messages per store time
    lookup = queue.get_offset_in_queue_by_time
    store_time = lambda offset, size: times[offset]  # noqa: E731
    assert lookup(1010, store_time) == 3
    assert lookup(1011, store_time) == 6
    assert lookup(0, store_time) == 0
    assert lookup(5000, store_time) == 15


def test_index_file_header_slots_and_entries_follow_the_layout(tmp_path):
    path = str(tmp_path / "20240101000000000")
    index = IndexFile(path, 8, 16)
    assert index.put_key("T#a", 100, 1_700_000_000_000)
    assert index.put_key("T#b", 200, 1_700_000_005_500)
    index.flush()
    raw = _read(path)
    assert len(raw) == 40 + 8 * 4 + 16 * 20
    begin_ts, end_ts, begin_phy, end_phy, slots_used, count = struct.unpack(">qqqqii", raw[:40])
    assert (begin_ts, end_ts, begin_phy, end_phy) == (1_700_000_000_000, 1_700_000_005_500, 100, 200)
    assert count == 3  # starts at 1: entry 0 is never used
    hash_b = index_key_hash("T#b")
    assert hash_b == abs(java_hash("T#b"))
    (slot_value,) = struct.unpack_from(">i", raw, 40 + (hash_b % 8) * 4)
    assert slot_value == 2
    entry = struct.unpack_from(">iqii", raw, 40 + 8 * 4 + 2 * 20)
    assert entry[:3] == (hash_b, 200, 5)  # time diff in whole seconds
    assert slots_used == len({index_key_hash("T#a") % 8, hash_b % 8})


def test_colliding_keys_chain_newest_first_and_only_matching_hashes_return(tmp_path):
    index = IndexFile(str(tmp_path / "20240101000000000"), 1, 32)
    now = 1_700_000_000_000
    for i, key in enumerate(["T#x", "T#y", "T#x", "T#z", "T#x"]):
        index.put_key(key, i * 10, now + i * 1000)
    assert index.select_phy_offset("T#x", 10, now, now + 10_000) == [40, 20, 0]
    assert index.select_phy_offset("T#x", 2, now, now + 10_000) == [40, 20]
    assert index.select_phy_offset("T#x", 10, now + 1500, now + 10_000) == [40, 20]


def test_index_service_rolls_full_files_and_queries_across_them(tmp_path):
    service = IndexService(str(tmp_path), 16, 5)
    now = 1_700_000_000_000
    for i in range(10):
        service.build_index("T", f"k{i} common", None, i * 100, now + i)
    assert len(service.index_files) >= 4
    newer = service.index_files[1]
    older = service.index_files[0]
    assert newer.begin_phy_offset >= older.end_phy_offset  # inherits the previous end
    offsets, _, last_phy = service.query_offset("T", "common", 64, 0, now + 100)
    assert sorted(offsets) == [i * 100 for i in range(10)]
    assert last_phy == 900
    assert service.query_offset("T", "k3", 64, 0, now + 100)[0] == [300]


def test_integer_min_value_hash_maps_to_zero():
    assert java_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0


def test_mapped_file_queue_names_files_by_offset_and_finds_them(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4096)
    first = queue.get_last_mapped_file_or_create(0)
    first.append(b"x" * 4096)
    second = queue.get_last_mapped_file_or_create(0)
    assert [f.file_name for f in queue] == [f"{0:020d}", f"{4096:020d}"]
    assert queue.find_mapped_file_by_offset(5000) is second
    assert queue.find_mapped_file_by_offset(10_000) is None
    second.append(b"abc")
    assert queue.get_max_offset() == 4099
    assert not queue.flush(0)  # progress was made
    assert queue.flushed_where == 4096
    assert not queue.flush(0)
    assert queue.flushed_where == 4099
    assert queue.flush(0)  # nothing left


def test_a_held_file_is_only_deleted_after_its_reader_releases_it(tmp_path):
    mapped = MappedFile(str(tmp_path / f"{0:020d}"), 4096)
    mapped.append(b"data")
    assert mapped.hold()
    assert mapped.destroy(60_000) is False
    assert os.path.exists(mapped.path)
    assert mapped.hold() is False  # no new readers once shut down
    mapped.release()
    assert mapped.destroy(60_000) is True
    assert not os.path.exists(mapped.path)


def test_truncation_zeroes_the_cut_bytes_and_deletes_later_files(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4096)
    queue.get_last_mapped_file_or_create(0).append(b"\x07" * 4096)
    queue.get_last_mapped_file_or_create(0).append(b"\x07" * 100)
    queue.truncate_dirty_files(1000)
    assert len(queue.mapped_files) == 1
    queue.shutdown()
    raw = _read(str(tmp_path / f"{0:020d}"))
    assert raw[:1000] == b"\x07" * 1000
    assert raw[1000:] == bytes(3096)
    assert not os.path.exists(tmp_path / f"{4096:020d}")


def test_transient_pool_buffers_until_commit(tmp_path):
    pool = TransientStorePool(1, 4096)
    mapped = MappedFile(str(tmp_path / f"{0:020d}"), 4096, pool)
    mapped.append(b"buffered")
    assert mapped.read_position == 0
    assert _read(mapped.path)[:8] == bytes(8)
    assert mapped.commit(0) == 8
    assert mapped.read(0, 8) == b"buffered"
    assert _read(mapped.path)[:8] == b"buffered"
    mapped.close()
