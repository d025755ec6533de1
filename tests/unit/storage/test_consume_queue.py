"""ConsumeQueue (storage/consume_queue.py) against the on-disk layout of reference §5.2."""

from __future__ import annotations

import os
import struct

import pytest

from storage.consume_queue import ConsumeQueue

UNITS_PER_FILE = 10
FILE_SIZE = 20 * UNITS_PER_FILE
FILLER = (0, 0x7FFFFFFF, 0)


def _queue(tmp_path, file_size: int = FILE_SIZE) -> ConsumeQueue:
    return ConsumeQueue("TopicA", 2, str(tmp_path), file_size)


def _queue_dir(tmp_path):
    return tmp_path / "TopicA" / "2"


def _units_on_disk(tmp_path, file_offset: int) -> list[tuple[int, int, int]]:
    raw = (_queue_dir(tmp_path) / f"{file_offset:020d}").read_bytes()
    assert len(raw) == FILE_SIZE
    return [struct.unpack_from(">qiq", raw, i) for i in range(0, len(raw), 20)]


def _fill(queue: ConsumeQueue, count: int, start: int = 0, size: int = 100) -> None:
    """Units start..start+count-1, record i at CommitLog offset 1000 + i*size, tags -i."""
    for i in range(start, start + count):
        queue.put_message_position_info(1000 + i * size, size, -i, i)


def _reopen(tmp_path, queue: ConsumeQueue) -> ConsumeQueue:
    queue.shutdown()
    again = _queue(tmp_path)
    again.load()
    again.recover()
    return again


# --- layout ------------------------------------------------------------------------------------------
def test_units_are_20_byte_big_endian_offset_size_tags_at_logical_offset_times_20(tmp_path):
    queue = _queue(tmp_path)
    queue.put_message_position_info(0x0102030405, 0x0A0B0C0D, -2, 0)
    queue.put_message_position_info(0x0102030405 + 0x0A0B0C0D, 77, 2598919, 1)
    raw = (_queue_dir(tmp_path) / f"{0:020d}").read_bytes()
    assert raw[:20] == bytes.fromhex("0000000102030405 0A0B0C0D FFFFFFFFFFFFFFFE")
    assert struct.unpack_from(">qiq", raw, 20) == (0x0102030405 + 0x0A0B0C0D, 77, 2598919)
    assert raw[40:] == bytes(FILE_SIZE - 40)
    assert queue.get_unit(1) == (0x0102030405 + 0x0A0B0C0D, 77, 2598919)


def test_files_are_named_by_their_20_digit_start_byte_offset_and_roll_when_full(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 23)
    assert sorted(os.listdir(_queue_dir(tmp_path))) == [
        "00000000000000000000", "00000000000000000200", "00000000000000000400"]
    second = _units_on_disk(tmp_path, 200)
    assert second == [(1000 + i * 100, 100, -i) for i in range(10, 20)]
    assert _units_on_disk(tmp_path, 400)[:3] == [(1000 + i * 100, 100, -i) for i in range(20, 23)]
    assert queue.get_max_offset_in_queue() == 23
    assert queue.get_min_offset_in_queue() == 0
    assert [queue.get_unit(i).commit_log_offset for i in (9, 10, 22)] == [1900, 2000, 3200]
    assert queue.get_unit(23) is None
    assert queue.get_last_offset() == 1000 + 23 * 100


def test_get_units_reads_up_to_the_end_of_one_file(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 13)
    assert [u.tags_code for u in queue.get_units(7, 32)] == [-7, -8, -9]
    assert [u.tags_code for u in queue.get_units(10, 32)] == [-10, -11, -12]
    assert [u.tags_code for u in queue.get_units(10, 2)] == [-10, -11]
    assert queue.get_units(13, 32) == []


def test_file_size_is_rounded_down_to_whole_units(tmp_path):
    queue = _queue(tmp_path, FILE_SIZE + 13)
    assert queue.mapped_file_size == FILE_SIZE
    _fill(queue, 11)
    assert os.path.getsize(_queue_dir(tmp_path) / f"{FILE_SIZE:020d}") == FILE_SIZE


# --- a queue that starts late --------------------------------------------------------------------
@pytest.mark.parametrize(("first", "file_offset"), [(4, 0), (13, 200), (27, 400)])
def test_a_queue_whose_first_unit_is_past_zero_is_padded_with_filler_units(tmp_path, first, file_offset):
    queue = _queue(tmp_path)
    queue.put_message_position_info(5000, 120, 7, first)
    queue.put_message_position_info(5120, 80, 8, first + 1)
    assert os.listdir(_queue_dir(tmp_path)) == [f"{file_offset:020d}"]
    units = _units_on_disk(tmp_path, file_offset)
    fillers = first % UNITS_PER_FILE
    assert units[:fillers] == [FILLER] * fillers
    assert units[fillers : fillers + 2] == [(5000, 120, 7), (5120, 80, 8)]
    assert queue.get_min_offset_in_queue() == first
    assert queue.get_max_offset_in_queue() == first + 2
    assert queue.get_unit(first - 1) is None
    assert queue.get_unit(first) == (5000, 120, 7)


def test_a_queue_starting_on_a_file_boundary_needs_no_filler(tmp_path):
    queue = _queue(tmp_path)
    queue.put_message_position_info(5000, 120, 7, 10)
    assert _units_on_disk(tmp_path, 200)[0] == (5000, 120, 7)
    assert (queue.get_min_offset_in_queue(), queue.get_max_offset_in_queue()) == (10, 11)


# --- duplicate dispatch ------------------------------------------------------------------------------
def test_a_unit_dispatched_again_is_ignored(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 6)
    before = _units_on_disk(tmp_path, 0)
    queue.put_message_position_info(1000 + 3 * 100, 100, 999, 3)  # replay of unit 3
    queue.put_message_position_info(1000 + 5 * 100, 100, 999, 5)  # replay of the last unit
    assert _units_on_disk(tmp_path, 0) == before
    assert queue.get_max_offset_in_queue() == 6


def test_a_second_unit_for_a_logical_offset_already_written_keeps_the_first(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 6)
    queue.put_message_position_info(90_000, 10, 999, 2)  # new record, old logical offset
    assert queue.get_unit(2) == (1200, 100, -2)
    assert queue.get_max_offset_in_queue() == 6
    assert _units_on_disk(tmp_path, 0)[6] == (0, 0, 0)


# --- recovery ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [0, 1, 9, 10, 13, 35])
def test_recover_after_reopening_finds_the_max_offset(tmp_path, count):
    queue = _queue(tmp_path)
    _fill(queue, count)
    again = _reopen(tmp_path, queue)
    assert again.get_max_offset_in_queue() == count
    assert again.max_physic_offset == (1000 + count * 100 if count else -1)
    again.put_message_position_info(1000 + count * 100, 100, -count, count)  # appends continue
    assert again.get_unit(count) == (1000 + count * 100, 100, -count)
    assert again.get_max_offset_in_queue() == count + 1
    again.shutdown()


def test_recover_stops_at_the_first_invalid_unit(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 8)
    queue.shutdown()
    path = _queue_dir(tmp_path) / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[5 * 20 : 5 * 20 + 20] = struct.pack(">qiq", 1500, 0, 0)  # size 0: not a unit
    path.write_bytes(bytes(raw))
    again = _queue(tmp_path)
    again.load()
    again.recover()
    assert again.get_max_offset_in_queue() == 5
    assert again.max_physic_offset == 1000 + 5 * 100
    assert _units_on_disk(tmp_path, 0)[5:8] == [(0, 0, 0)] * 3  # the tail past the cut is zeroed


@pytest.mark.parametrize("scan_units", [1, 3, 7])
@pytest.mark.parametrize("count", [9, 10, 23])
def test_recover_finds_the_same_end_whatever_it_reads_at_a_time(tmp_path, monkeypatch,
                                                                 scan_units, count):
    monkeypatch.setattr("storage.consume_queue.RECOVER_SCAN_UNITS", scan_units)
    queue = _queue(tmp_path)
    _fill(queue, count)
    again = _reopen(tmp_path, queue)
    assert again.get_max_offset_in_queue() == count
    assert again.max_physic_offset == 1000 + count * 100
    again.shutdown()
    last = (count - 1) // UNITS_PER_FILE * FILE_SIZE  # the last file: cut at its 4th unit
    path = _queue_dir(tmp_path) / f"{last:020d}"
    raw = bytearray(path.read_bytes())
    raw[3 * 20:3 * 20 + 20] = struct.pack(">qiq", -1, 100, 0)  # a negative offset: not a unit
    path.write_bytes(bytes(raw))
    cut = _queue(tmp_path)
    cut.load()
    cut.recover()
    assert cut.get_max_offset_in_queue() == last // 20 + 3
    assert cut.max_physic_offset == 1000 + (last // 20 + 3) * 100


def test_recover_reads_the_written_part_of_a_file_not_its_hole(tmp_path, monkeypatch):
    queue = ConsumeQueue("TopicA", 2, str(tmp_path), 20 * 300_000)  # RocketMQ's 6 MB files
    _fill(queue, 500)
    queue.shutdown()
    again = ConsumeQueue("TopicA", 2, str(tmp_path), 20 * 300_000)
    again.load()
    (mapped_file,) = again.mapped_file_queue.mapped_files
    if mapped_file.data_end(0) == mapped_file.file_size:
        pytest.skip("this file system does not tell where a file's holes are")
    read = []
    real = mapped_file.read_raw
    monkeypatch.setattr(mapped_file, "read_raw", lambda pos, size: read.append(size) or
                        real(pos, size))
    again.recover()
    assert again.get_max_offset_in_queue() == 500
    assert again.max_physic_offset == 1000 + 500 * 100
    assert sum(read) <= mapped_file.data_end(0) + 20 < 1_000_000


def test_recover_drops_an_empty_file_after_a_full_one(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 10)
    queue.mapped_file_queue.get_last_mapped_file_or_create()  # file 200 created, nothing in it
    again = _reopen(tmp_path, queue)
    assert again.get_max_offset_in_queue() == 10
    assert again.max_physic_offset == 1000 + 10 * 100
    assert [f.file_name for f in again.mapped_file_queue] == [f"{0:020d}"]


def test_recovered_queue_with_fillers_finds_its_min_offset_from_the_commitlog_minimum(tmp_path):
    queue = _queue(tmp_path)
    for i in range(13, 16):
        queue.put_message_position_info(5000 + i * 10, 10, 0, i)
    again = _reopen(tmp_path, queue)
    assert again.get_max_offset_in_queue() == 16
    again.correct_min_offset(0)
    assert again.get_min_offset_in_queue() == 13  # the fillers are not units
    again.correct_min_offset(5000 + 15 * 10)
    assert again.get_min_offset_in_queue() == 15


@pytest.mark.parametrize("scan_units", [1, 3, 1024])
def test_min_offset_is_found_past_the_units_read_at_a_time(tmp_path, monkeypatch, scan_units):
    # The first file is read a few units at a time from the current minimum, never whole: the
    # answer must not depend on where a read ends, fillers included.
    monkeypatch.setattr("storage.consume_queue.MIN_OFFSET_SCAN_UNITS", scan_units)
    queue = _queue(tmp_path)
    for i in range(2, 10):  # units 0 and 1 are fillers; file 0 holds units 0..9
        queue.put_message_position_info(1000 + i * 100, 100, 0, i)
    _fill(queue, 5, start=10)
    again = _reopen(tmp_path, queue)
    again.correct_min_offset(0)
    assert again.get_min_offset_in_queue() == 2
    for phy_min, expected in ((1000 + 2 * 100, 2), (1000 + 4 * 100 + 1, 5), (1000 + 9 * 100, 9)):
        again.correct_min_offset(phy_min)
        assert again.get_min_offset_in_queue() == expected, phy_min
    again.correct_min_offset(1000 + 9 * 100 + 1)  # past every unit of the first file
    assert again.get_min_offset_in_queue() == UNITS_PER_FILE
    again.correct_min_offset(0)  # the minimum never moves back
    assert again.get_min_offset_in_queue() == UNITS_PER_FILE


def test_min_offset_reads_from_the_current_minimum_not_the_whole_file(tmp_path, monkeypatch):
    queue = ConsumeQueue("TopicA", 2, str(tmp_path), 20 * 5000)
    _fill(queue, 5000)
    queue.correct_min_offset(1000 + 4000 * 100)
    assert queue.get_min_offset_in_queue() == 4000
    first = queue.mapped_file_queue.get_first_mapped_file()
    reads = []
    real = first.read_raw
    monkeypatch.setattr(first, "read_raw", lambda pos, size: reads.append((pos, size)) or
                        real(pos, size))
    queue.correct_min_offset(1000 + 4000 * 100)
    assert queue.get_min_offset_in_queue() == 4000
    assert reads == [(4000 * 20, 1000 * 20)]  # (what is left of the file, less than a scan's)


# --- truncation ----------------------------------------------------------------------------------------
def test_truncate_dirty_logic_files_drops_units_pointing_past_a_physical_offset(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 25)  # unit i covers [1000 + 100 i, 1100 + 100 i)
    queue.truncate_dirty_logic_files(1000 + 12 * 100 + 50)  # cuts inside record 12
    assert queue.get_max_offset_in_queue() == 12
    assert queue.max_physic_offset == 1000 + 12 * 100
    assert queue.get_last_offset() == 1000 + 12 * 100
    assert sorted(os.listdir(_queue_dir(tmp_path))) == [f"{0:020d}", f"{200:020d}"]
    assert _units_on_disk(tmp_path, 200)[2:] == [(0, 0, 0)] * 8  # units 10, 11 stay
    _fill(queue, 1, start=12)  # the record is written again and indexed again
    assert queue.get_unit(12) == (2200, 100, -12)


def test_truncate_dirty_logic_files_keeps_units_ending_at_or_before_the_offset(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 5)
    queue.truncate_dirty_logic_files(1000 + 5 * 100)
    assert queue.get_max_offset_in_queue() == 5
    queue.truncate_dirty_logic_files(0)
    assert queue.get_max_offset_in_queue() == 0
    assert queue.max_physic_offset == -1


# --- lookup by time ------------------------------------------------------------------------------------
def _timed_queue(tmp_path, first: int = 0):
    queue = _queue(tmp_path)
    times = {}
    for n, i in enumerate(range(first, first + 15)):
        queue.put_message_position_info(i * 10, 10, 0, i)
        times[i * 10] = 1000 + (n // 3) * 10  # three records per store time: 1000, 1010, ...
    return queue, lambda offset, size: times.get(offset)


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [(0, 0), (1000, 0), (1001, 3), (1010, 3), (1011, 6), (1040, 12), (1041, 15), (10**13, 15)],
)
def test_get_offset_in_queue_by_time_is_a_lower_bound_on_store_time(tmp_path, timestamp, expected):
    queue, store_time_of = _timed_queue(tmp_path)
    assert queue.get_offset_in_queue_by_time(timestamp, store_time_of) == expected


def test_get_offset_in_queue_by_time_searches_from_the_min_offset(tmp_path):
    queue, store_time_of = _timed_queue(tmp_path, first=7)
    assert queue.get_offset_in_queue_by_time(0, store_time_of) == 7
    assert queue.get_offset_in_queue_by_time(1011, store_time_of) == 13
    assert queue.get_offset_in_queue_by_time(2000, store_time_of) == 22


def test_get_offset_in_queue_by_time_treats_a_vanished_record_as_older(tmp_path):
    queue, store_time_of = _timed_queue(tmp_path)
    gone = {0, 10, 20, 30}  # the CommitLog no longer holds the first four records
    lookup = lambda offset, size: None if offset in gone else store_time_of(offset, size)  # noqa: E731
    assert queue.get_offset_in_queue_by_time(0, lookup) == 4
