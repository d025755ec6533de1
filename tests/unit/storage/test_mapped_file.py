"""MappedFile, MappedFileQueue and TransientStorePool (storage/mapped_file.py)."""

from __future__ import annotations

import errno
import os

import pytest

from storage.errors import OffsetOutOfRangeError, StoreError
from storage.mapped_file import (
    OS_PAGE_SIZE,
    MappedFile,
    TransientStorePool,
    offset_to_file_name,
)
from storage.mapped_file_queue import MappedFileQueue

SIZE = 4096


def _file(tmp_path, offset: int = 0, size: int = SIZE, pool=None) -> MappedFile:
    return MappedFile(str(tmp_path / offset_to_file_name(offset)), size, pool)


def _disk(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- names and creation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("offset", "name"),
    [(0, "00000000000000000000"), (1073741824, "00000000001073741824"),
     (2**63 - 1, "09223372036854775807")],
)
def test_file_names_are_20_digit_zero_padded_offsets(offset, name):
    assert offset_to_file_name(offset) == name


def test_a_new_mapped_file_is_created_at_its_full_size_and_named_by_its_offset(tmp_path):
    mapped = _file(tmp_path, 8192)
    assert mapped.file_from_offset == 8192
    assert os.path.getsize(mapped.path) == SIZE
    assert (mapped.wrote_position, mapped.committed_position, mapped.flushed_position) == (0, 0, 0)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    mapped.close()


def test_a_file_of_the_wrong_size_or_name_is_refused(tmp_path):
    (tmp_path / offset_to_file_name(0)).write_bytes(b"short")
    with pytest.raises(StoreError, match="5 bytes"):
        _file(tmp_path, 0)
    with pytest.raises(StoreError, match="20-digit"):
        MappedFile(str(tmp_path / "not-a-number"), SIZE)


def test_append_returns_the_position_and_refuses_data_that_does_not_fit(tmp_path):
    mapped = _file(tmp_path)
    assert mapped.append(b"abc") == 0
    assert mapped.append(b"defg") == 3
    assert mapped.read(0) == b"abcdefg"
    with pytest.raises(StoreError):
        mapped.append(b"x" * (SIZE - 6))
    assert mapped.wrote_position == 7
    with pytest.raises(OffsetOutOfRangeError):
        mapped.read(5, 3)  # past the read position
    mapped.close()


# --- the queue ---------------------------------------------------------------------------------------
def test_get_last_mapped_file_or_create_rolls_to_the_next_offset_when_full(tmp_path):
    queue = MappedFileQueue(str(tmp_path / "log"), SIZE)
    first = queue.get_last_mapped_file_or_create(0)
    assert queue.get_last_mapped_file_or_create(0) is first  # not full: the same file
    first.append(b"x" * SIZE)
    second = queue.get_last_mapped_file_or_create(0)
    second.append(b"y" * SIZE)
    third = queue.get_last_mapped_file_or_create(0)
    assert [f.file_name for f in queue] == [offset_to_file_name(i * SIZE) for i in range(3)]
    assert sorted(os.listdir(tmp_path / "log")) == [f.file_name for f in queue]
    assert (first.first_create_in_queue, second.first_create_in_queue) == (True, False)
    assert third.file_from_offset == 2 * SIZE
    assert queue.get_max_offset() == 2 * SIZE
    queue.shutdown()


def test_the_first_file_starts_at_the_file_holding_the_requested_offset(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    mapped = queue.get_last_mapped_file_or_create(3 * SIZE + 17)
    assert mapped.file_name == offset_to_file_name(3 * SIZE)
    assert (queue.flushed_where, queue.committed_where) == (3 * SIZE, 3 * SIZE)
    assert queue.get_min_offset() == 3 * SIZE
    queue.shutdown()


def test_find_mapped_file_by_offset_finds_the_file_holding_an_offset(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    files = []
    for _ in range(3):
        files.append(queue.get_last_mapped_file_or_create(SIZE))
        files[-1].append(b"z" * SIZE)
    assert [f.file_from_offset for f in files] == [SIZE, 2 * SIZE, 3 * SIZE]
    assert queue.find_mapped_file_by_offset(SIZE) is files[0]
    assert queue.find_mapped_file_by_offset(2 * SIZE - 1) is files[0]
    assert queue.find_mapped_file_by_offset(2 * SIZE) is files[1]
    assert queue.find_mapped_file_by_offset(4 * SIZE - 1) is files[2]
    assert queue.find_mapped_file_by_offset(4 * SIZE) is None
    assert queue.find_mapped_file_by_offset(0) is None
    assert queue.find_mapped_file_by_offset(0, return_first_on_not_found=True) is files[0]
    queue.shutdown()


def test_load_maps_existing_segments_and_removes_unfinished_ones(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"a" * SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"b")
    queue.shutdown()
    (tmp_path / (offset_to_file_name(2 * SIZE) + ".tmp")).write_bytes(b"half")
    again = MappedFileQueue(str(tmp_path), SIZE)
    again.load()
    assert [f.file_from_offset for f in again] == [0, SIZE]
    assert not (tmp_path / (offset_to_file_name(2 * SIZE) + ".tmp")).exists()
    assert again.mapped_files[1].read_raw(0, 2) == b"b\x00"
    again.shutdown()


@pytest.mark.parametrize(("stray", "says"), [
    ("00000000000000000100", "is not a segment"),  # not a multiple of the file size
    ("100", "is not a segment"),  # not 20 digits
    ("0000000000000000000²", "is not a segment"),  # a digit to str.isdigit, not to int()
    (offset_to_file_name(3 * SIZE), "misses the segment at 8,192"),  # after a gap
])
def test_load_refuses_a_folder_whose_files_are_not_one_run_of_segments(tmp_path, stray, says):
    """A stray all-digit file of the segment size taken as the last segment would have new
    records written at offsets unrelated to the log's end: the store does not start, and says
    which file."""
    queue = MappedFileQueue(str(tmp_path), SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"a" * SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"b")
    queue.shutdown()
    (tmp_path / stray).write_bytes(b"x" * SIZE)
    again = MappedFileQueue(str(tmp_path), SIZE)
    with pytest.raises(StoreError, match=says):
        again.load()
    (tmp_path / stray).unlink()
    again.load()
    assert [f.file_from_offset for f in again] == [0, SIZE]
    again.shutdown()


# --- reference counting ---------------------------------------------------------------------------
def test_destroy_returns_false_while_a_reader_holds_the_file_and_deletes_it_after_release(tmp_path):
    mapped = _file(tmp_path)
    mapped.append(b"data")
    assert mapped.hold()
    assert mapped.destroy(60_000) is False
    assert os.path.exists(mapped.path)
    assert mapped.read_raw(0, 4) == b"data"  # the holder can still read
    assert mapped.hold() is False  # no new readers once shutting down
    with pytest.raises(OffsetOutOfRangeError):
        mapped.read(0, 4)
    assert mapped.destroy(60_000) is False  # still held, interval not over
    mapped.release()
    assert mapped.is_cleanup_over
    assert mapped.destroy(60_000) is True
    assert not os.path.exists(mapped.path)


def test_destroy_unmaps_a_held_file_once_the_forcible_interval_has_passed(tmp_path):
    mapped = _file(tmp_path)
    assert mapped.hold()
    assert mapped.destroy(0) is False  # the first call only shuts the file down
    assert mapped.destroy(0) is True  # the interval (0 ms) has passed: forced
    assert not os.path.exists(mapped.path)
    mapped.release()  # a late release does no harm


def test_destroy_without_readers_deletes_at_once(tmp_path):
    mapped = _file(tmp_path)
    assert mapped.destroy(60_000) is True
    assert not os.path.exists(mapped.path)


# --- truncation ------------------------------------------------------------------------------------
def test_truncate_dirty_files_zeroes_bytes_past_the_cut_and_deletes_later_files(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    for _ in range(3):
        queue.get_last_mapped_file_or_create(0).append(b"\x07" * SIZE)
    queue.flush_all()
    for _ in range(3):
        queue.commit(0)
    assert (queue.flushed_where, queue.committed_where) == (3 * SIZE, 3 * SIZE)
    queue.truncate_dirty_files(SIZE + 1000)
    assert [f.file_from_offset for f in queue] == [0, SIZE]
    assert not (tmp_path / offset_to_file_name(2 * SIZE)).exists()
    kept = queue.mapped_files[1]
    assert (kept.wrote_position, kept.committed_position, kept.flushed_position) == (1000,) * 3
    assert (queue.flushed_where, queue.committed_where) == (SIZE + 1000, SIZE + 1000)
    assert queue.get_max_offset() == SIZE + 1000
    assert queue.mapped_files[0].wrote_position == SIZE  # untouched before the cut
    queue.shutdown()
    assert _disk(tmp_path / offset_to_file_name(0)) == b"\x07" * SIZE
    assert _disk(tmp_path / offset_to_file_name(SIZE)) == b"\x07" * 1000 + bytes(SIZE - 1000)


def test_truncate_at_a_file_start_empties_that_file(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    for _ in range(2):
        queue.get_last_mapped_file_or_create(0).append(b"\x07" * SIZE)
    queue.truncate_dirty_files(SIZE)
    assert [f.wrote_position for f in queue] == [SIZE, 0]
    queue.shutdown()
    assert _disk(tmp_path / offset_to_file_name(SIZE)) == bytes(SIZE)


# --- flush ------------------------------------------------------------------------------------------------
def test_flush_advances_the_flushed_position_to_the_read_position(tmp_path):
    mapped = _file(tmp_path, size=4 * OS_PAGE_SIZE)
    mapped.append(b"x" * 100)
    assert mapped.flush(0) == 100
    assert mapped.flushed_position == 100
    mapped.append(b"y" * 100)
    assert mapped.flush(1) == 100  # less than a page dirty: wait
    mapped.append(b"z" * OS_PAGE_SIZE)
    assert mapped.flush(1) == 200 + OS_PAGE_SIZE
    mapped.close()


def test_a_file_being_destroyed_counts_flushed_but_a_closed_one_does_not(tmp_path):
    # A file on its way out is read by nobody again; a file a store's shutdown closed may be
    # flushed late by a flush thread that outlived that shutdown (a hung disk): its bytes
    # were never synced and must not be counted flushed.
    going = _file(tmp_path, 0)
    going.append(b"g" * 100)
    assert going.destroy(0)
    assert going.flush(0) == 100
    closed = _file(tmp_path, SIZE)
    closed.append(b"c" * 100)
    closed.close()
    assert closed.flush(0) == 0
    assert closed.flushed_position == 0


def test_a_full_file_is_flushed_whatever_the_page_threshold(tmp_path):
    mapped = _file(tmp_path)
    mapped.append(b"x" * (SIZE - 10))
    assert mapped.flush(4) == 0
    mapped.append(b"x" * 10)
    assert mapped.flush(4) == SIZE
    mapped.close()


def test_queue_flush_moves_flushed_where_file_by_file(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"x" * SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"abc")
    assert queue.flush(0) is False  # moved
    assert queue.flushed_where == SIZE
    assert queue.flush(0) is False
    assert queue.flushed_where == SIZE + 3
    assert queue.flush(0) is True  # nothing left
    assert queue.remain_how_many_data_to_flush() == 0
    queue.shutdown()


# --- TransientStorePool -----------------------------------------------------------------------------
def test_with_a_write_buffer_readers_see_only_committed_bytes(tmp_path):
    pool = TransientStorePool(1, SIZE)
    mapped = _file(tmp_path, pool=pool)
    assert mapped.write_buffer is not None
    mapped.append(b"buffered")
    assert (mapped.wrote_position, mapped.read_position) == (8, 0)
    assert _disk(mapped.path)[:8] == bytes(8)  # not in the file yet
    with pytest.raises(OffsetOutOfRangeError):
        mapped.read(0, 8)
    assert mapped.flush(0) == 0  # nothing committed: nothing to flush
    assert mapped.commit(0) == 8
    assert mapped.read_position == 8
    assert mapped.read(0, 8) == b"buffered"
    assert _disk(mapped.path)[:8] == b"buffered"
    assert mapped.flush(0) == 8
    mapped.close()


def test_commit_waits_for_enough_pages_unless_the_file_is_full(tmp_path):
    pool = TransientStorePool(1, 2 * OS_PAGE_SIZE)
    mapped = _file(tmp_path, size=2 * OS_PAGE_SIZE, pool=pool)
    mapped.append(b"a" * 100)
    assert mapped.commit(1) == 0
    mapped.append(b"b" * OS_PAGE_SIZE)
    assert mapped.commit(1) == 100 + OS_PAGE_SIZE
    assert pool.available_buffer_nums() == 0
    mapped.append(b"c" * (OS_PAGE_SIZE - 100))
    assert mapped.commit(4) == 2 * OS_PAGE_SIZE  # full: committed whatever the threshold
    assert mapped.write_buffer is None  # a fully committed file gives its buffer back
    assert pool.available_buffer_nums() == 1
    assert _disk(mapped.path) == b"a" * 100 + b"b" * OS_PAGE_SIZE + b"c" * (OS_PAGE_SIZE - 100)
    mapped.close()


def test_an_exhausted_pool_makes_files_write_straight_to_the_mapping(tmp_path):
    pool = TransientStorePool(1, SIZE)
    buffered = _file(tmp_path, 0, pool=pool)
    direct = _file(tmp_path, SIZE, pool=pool)
    assert direct.write_buffer is None
    direct.append(b"now")
    assert direct.read(0, 3) == b"now"
    buffered.close()  # closing returns its buffer
    assert pool.available_buffer_nums() == 1
    direct.close()


def test_queue_commit_copies_buffered_bytes_and_moves_committed_where(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE, TransientStorePool(2, SIZE))
    queue.get_last_mapped_file_or_create(0).append(b"q" * 10)
    assert queue.get_max_offset() == 0  # readers see committed data only
    assert queue.commit(0) is False
    assert (queue.committed_where, queue.get_max_offset()) == (10, 10)
    assert _disk(tmp_path / offset_to_file_name(0))[:10] == b"q" * 10
    queue.shutdown()


def test_a_flush_syncs_the_written_range_without_fdatasync_where_the_core_can(tmp_path,
                                                                                monkeypatch):
    from storage import mapped_file as module

    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 1 << 16)
    calls = []
    monkeypatch.setattr(module.os, "fdatasync", lambda fd: calls.append("fdatasync"))
    if module._msync_range is None:  # ROCKETDESK_PURE=1 or not Linux: the whole file
        mapped.append(b"a" * 5000)
        assert mapped.flush(0) == 5000
        assert calls == ["fdatasync"]
        return
    ranges = []
    real = module._msync_range
    monkeypatch.setattr(module, "_msync_range",
                        lambda mm, start, end: ranges.append((start, end)) or real(mm, start, end))
    mapped.append(b"a" * 5000)
    assert mapped.flush(0) == 5000
    mapped.append(b"b" * 3000)
    assert mapped.flush(0) == 8000
    assert ranges == [(0, 5000), (5000, 8000)]
    assert calls == []
    # A kernel without the call: the whole file, as before.
    monkeypatch.setattr(module, "_msync_range", lambda mm, start, end: errno.ENOSYS)
    mapped.append(b"c" * 10)
    assert mapped.flush(0) == 8010
    assert calls == ["fdatasync"]
    mapped.close()


def test_msync_range_clamps_its_range_and_answers_errors_as_numbers():
    import mmap

    from common import speedups

    core = speedups.store_core
    if core is None:
        pytest.skip("the compiled core is not in use")
    memory = mmap.mmap(-1, 8192)
    assert core.msync_range(memory, -5, 1 << 40) == 0  # clamped to the mapping
    assert core.msync_range(memory, 4000, 100) == 0  # an empty range: nothing to do
    with pytest.raises(TypeError):
        core.msync_range(memory, 0)
    memory.close()
    with pytest.raises(ValueError, match="closed"):
        core.msync_range(memory, 0, 10)  # a closed mapping has no buffer


def test_a_cut_tail_is_zeroed_on_disk_at_once(tmp_path, monkeypatch):
    # Flushes sync only what is written after the cut: the zeros must not wait for them.
    from storage import mapped_file as module

    queue = MappedFileQueue(str(tmp_path), 8192)
    queue.get_last_mapped_file_or_create(0).append(b"r" * 6000)
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(module.os, "fdatasync", lambda fd: synced.append(fd) or real(fd))
    queue.truncate_dirty_files(1000)
    assert len(synced) == 1
    assert bytes(queue.get_last_mapped_file().mm[1000:6000]) == bytes(5000)
    synced.clear()
    queue.truncate_dirty_files(1000)  # nothing left to zero: no sync
    assert synced == []
    queue.shutdown()


# -- writes go to the page cache, not through the mapping ----------------------------------------
def _mapped_kib(path: str, field: str = "Rss") -> int:
    """Kilobytes of this process's mapping of ``path`` in ``field`` (/proc/self/smaps)."""
    found, inside = None, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith(field + ":"):
                found = int(line.split()[1])
    assert found is not None, f"{path} is not mapped"
    return found


def test_appends_reach_the_file_without_touching_the_mapping(tmp_path):
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("smaps is Linux's")
    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 1 << 20)
    mapped.append(b"a" * 10000)
    mapped.append(b"b" * 5000)
    # Not a page of the mapping was written (a page written through it would be mapped, and
    # each flush would write-protect it again with a TLB flush on every CPU).
    assert _mapped_kib(mapped.path) == 0
    # Readers still read through the mapping and see the bytes at once (one page cache).
    assert mapped.read(0, 15000) == b"a" * 10000 + b"b" * 5000
    assert _mapped_kib(mapped.path) > 0
    assert mapped.flush(0) == 15000
    assert _disk(mapped.path)[:15000] == b"a" * 10000 + b"b" * 5000
    mapped.close()


def test_without_pwrite_appends_go_through_the_mapping(tmp_path, monkeypatch):
    from storage import mapped_file as module

    monkeypatch.setattr(module, "_write_at", None)  # as on Windows
    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 1 << 16)
    mapped.append(b"w" * 5000)
    mapped.write_at(100, bytearray(b"xyz!"), 3)
    assert mapped.read(0, 5000) == b"w" * 100 + b"xyz" + b"w" * 4897
    assert mapped.flush(0) == 5000
    assert _disk(mapped.path)[:5000] == b"w" * 100 + b"xyz" + b"w" * 4897
    mapped.close()


def test_the_write_paths_agree(tmp_path, monkeypatch):
    from storage import mapped_file as module

    contents = []
    for name, write in (("compiled-or-pure", module._write_at), ("pure", module._write_at_pure),
                        ("mapping", None)):
        monkeypatch.setattr(module, "_write_at", write)
        (tmp_path / name).mkdir()
        mapped = MappedFile(str(tmp_path / name / offset_to_file_name(0)), 1 << 16)
        mapped.append(b"1" * 4000)
        mapped.append(bytes(range(256)) * 20)
        mapped.write_at(10, memoryview(b"partial write"), 7)
        mapped.flush(0)
        contents.append(_disk(mapped.path))
        mapped.close()
    assert contents[0] == contents[1] == contents[2]


# -- readahead advice ------------------------------------------------------------------------------
def _vm_flags(path: str) -> set[str]:
    """The VmFlags of this process's mapping of ``path`` (/proc/self/smaps)."""
    flags, inside = None, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("VmFlags:"):
                flags = set(line.split()[1:])
    assert flags is not None, f"{path} is not mapped"
    return flags


def test_the_file_being_written_has_no_readahead_and_a_full_one_has_it_back(tmp_path):
    import sys

    from storage.index_file import IndexService
    from storage.mapped_file_queue import MappedFileQueue

    if not sys.platform.startswith("linux"):
        pytest.skip("VmFlags are Linux's")
    queue = MappedFileQueue(str(tmp_path / "log"), 1 << 20)
    first = queue.get_last_mapped_file_or_create(0)
    assert "rr" in _vm_flags(first.path)  # MADV_RANDOM: no read-around zeroing megabytes
    first.wrote_position = first.file_size
    second = queue.get_last_mapped_file_or_create(0)
    assert second is not first
    assert "rr" not in _vm_flags(first.path)
    assert "rr" in _vm_flags(second.path)
    queue.shutdown()

    reloaded = MappedFileQueue(str(tmp_path / "log"), 1 << 20)
    reloaded.load()  # recovery reads them next: readahead on all
    assert not any("rr" in _vm_flags(f.path) for f in reloaded.mapped_files)
    reloaded.advise_writing()  # recovery done: the last file is the one written next
    assert "rr" not in _vm_flags(reloaded.mapped_files[0].path)
    assert "rr" in _vm_flags(reloaded.mapped_files[-1].path)
    reloaded.truncate_dirty_files(1000)  # a cut that leaves the first file last
    assert len(reloaded.mapped_files) == 1
    assert "rr" in _vm_flags(reloaded.mapped_files[0].path)
    reloaded.shutdown()

    service = IndexService(str(tmp_path / "index"), hash_slot_num=100, index_num=400)
    service.build_index("T", "k1", None, 0, 1)
    assert "rr" in _vm_flags(service.index_files[-1].mapped_file.path)
    service.destroy()


def test_a_recovered_store_writes_its_last_files_without_readahead(tmp_path):
    import sys

    from storage.message import MessageExtBrokerInner
    from storage.message_store import DefaultMessageStore
    from tests.conftest import small_config

    if not sys.platform.startswith("linux"):
        pytest.skip("VmFlags are Linux's")
    store = DefaultMessageStore(small_config(tmp_path))
    store.load()
    store.start()
    store.put_message(MessageExtBrokerInner(topic="T", body=b"x", queue_id=0))
    store.wait_dispatched(timeout=10)
    store.shutdown()
    again = DefaultMessageStore(small_config(tmp_path))
    again.load()  # recovery, then the advice
    try:
        last_log = again.commit_log.mapped_file_queue.get_last_mapped_file()
        assert "rr" in _vm_flags(last_log.path)
        queue = again.find_consume_queue("T", 0, create=False)
        assert "rr" in _vm_flags(queue.mapped_file_queue.get_last_mapped_file().path)
    finally:
        again.shutdown()


def test_a_file_is_as_recent_as_its_last_store_time_whatever_its_file_time(tmp_path):
    # Windows may leave a file's time alone for writes through its mapping (the CommitLog's
    # there): its last message's store time keeps it from expiring early.
    mapped = _file(tmp_path)
    os.utime(mapped.path, (1_000_000, 1_000_000))
    assert mapped.last_modified() == 1_000_000
    mapped.store_timestamp = 2_000_000_000_000
    assert mapped.last_modified() == 2_000_000_000
    mapped.close()


def test_a_file_the_writer_leaves_takes_its_last_store_time_for_after_a_restart(tmp_path):
    # After a restart a file's own time is all expiry has. Where writes do not move it
    # (Windows, through the mapping), a roll and a shutdown stamp the last store time on it.
    from storage.config import MessageStoreConfig
    from storage.message import MessageExtBrokerInner
    from storage.message_store import DefaultMessageStore

    config = MessageStoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=4096)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    files = store.commit_log.mapped_file_queue
    try:
        store.put_message(MessageExtBrokerInner(topic="T", body=b"x" * 500, queue_id=0))
        while len(files.mapped_files) < 2:
            first = files.mapped_files[0]
            os.utime(first.path, (1_000_000, 1_000_000))  # a time the writes did not move
            store.put_message(MessageExtBrokerInner(topic="T", body=b"x" * 500, queue_id=0))
        first, second = files.mapped_files
        # The roll's stamp (on Linux the end-of-file blank's write moved it a moment later).
        assert 0 <= os.path.getmtime(first.path) - first.store_timestamp / 1000 < 5
        os.utime(second.path, (1_000_000, 1_000_000))
        last_stored = second.store_timestamp / 1000
        assert last_stored > 1_000_000
    finally:
        store.shutdown()
    assert os.path.getmtime(second.path) == pytest.approx(last_stored, abs=0.01)  # shutdown's
    again = DefaultMessageStore(config)
    again.load()
    try:
        reloaded = again.commit_log.mapped_file_queue.mapped_files
        assert [f.last_modified() > 1_000_000 for f in reloaded] == [True, True]
    finally:
        again.shutdown()


def test_a_file_whose_descriptor_is_gone_is_not_stamped(tmp_path, monkeypatch):
    # A deletion's last release closes the descriptor without a close(): its number may be
    # another file's by then, which must not get this file's time.
    from storage import mapped_file as module

    mapped = _file(tmp_path)
    mapped.store_timestamp = 2_000_000_000_000
    stamped = []
    monkeypatch.setattr(module, "set_modified_time", lambda fd, seconds: stamped.append(fd))
    assert mapped.hold()
    assert not mapped.destroy(0)  # held: the deletion waits for the reader
    mapped.release()  # the last release cleans up (the descriptor closed)
    assert mapped.is_cleanup_over
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)  # (takes the freed number)
    try:
        mapped.stamp_store_time()
    finally:
        os.close(other)
    assert stamped == []
