"""Recovery: torn and corrupt tails are cut and never served; derived views follow the cut."""

from __future__ import annotations

import os

from storage.inspector import inspect_store
from storage.message_store import DefaultMessageStore
from storage.record import iter_records
from storage.results import GetMessageStatus, TagsFilter
from tests.conftest import make_message, small_config


def _write(root, count, **overrides):
    config = small_config(root, mapped_file_size_commit_log=64 * 1024, **overrides)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    results = [store.put_message(make_message(body=f"body-{i}".encode() * 20, keys=f"k{i}")).append
               for i in range(count)]
    store.wait_dispatched()
    return config, store, results


def _crash(store):
    """Stop a store the way a killed process does: no flush, no shutdown, abort file left."""
    for service in (store.flush_service, store.reput, store._cq_flusher, store.clean_service,
                    store.stats):
        service.shutdown()
    os.close(store._lock_fd)
    store._lock_fd = None


def _reopen(config):
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    return store


def _commitlog_path(config, name="00000000000000000000"):
    return os.path.join(config.commit_log_dir, name)


def test_flipped_byte_in_the_last_record_cuts_it_off_on_recovery(tmp_path):
    config, store, results = _write(tmp_path, 20)
    _crash(store)
    last = results[-1]
    with open(_commitlog_path(config), "r+b") as f:
        f.seek(last.wrote_offset + last.wrote_bytes - 30)  # inside the body: CRC must catch it
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    store = _reopen(config)
    try:
        assert store.recovered_problem == "body CRC mismatch"
        assert store.get_max_phy_offset() == last.wrote_offset
        assert store.get_max_offset_in_queue("TopicTest", 0) == 19
        assert store.query_message("TopicTest", "k19", 4).messages == []
        result = store.get_message("g", "TopicTest", 0, 19, 4)
        assert result.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        # The cut bytes are zeroed: the next put takes the place, and nothing old comes back.
        put = store.put_message(make_message(body=b"after")).append
        assert put.wrote_offset == last.wrote_offset
        assert put.logics_offset == 19
    finally:
        store.shutdown()
    store = _reopen(config)
    try:
        assert store.get_max_offset_in_queue("TopicTest", 0) == 20
        [record] = iter_records(store.get_message("g", "TopicTest", 0, 19, 4).body, check_crc=True)
        assert record.body == b"after"
    finally:
        store.shutdown()


def test_torn_tail_is_truncated_and_units_pointing_past_it_are_dropped(tmp_path):
    config, store, results = _write(tmp_path, 30)
    _crash(store)
    # The last two records are torn: only the first half of the second-last reached the disk.
    tear_at = results[-2].wrote_offset + results[-2].wrote_bytes // 2
    with open(_commitlog_path(config), "r+b") as f:
        f.seek(tear_at)
        f.write(bytes(64 * 1024 - tear_at))
    store = _reopen(config)
    try:
        assert store.get_max_phy_offset() == results[-2].wrote_offset
        assert store.get_max_offset_in_queue("TopicTest", 0) == 28
        offsets = []
        offset = 0
        while (r := store.get_message("g", "TopicTest", 0, offset, 32)).status is GetMessageStatus.FOUND:
            offsets.extend(rec.commit_log_offset for rec in iter_records(r.body, check_crc=True))
            offset = r.next_begin_offset
        assert offsets == [a.wrote_offset for a in results[:28]]
    finally:
        store.shutdown()
    assert inspect_store(str(tmp_path)).problems == []


def test_crash_rebuilds_lost_consume_queue_units_and_index_entries(tmp_path):
    config, store, _ = _write(tmp_path, 25)
    _crash(store)
    # Lose the derived views entirely: they must be rebuilt from the CommitLog.
    import shutil

    shutil.rmtree(config.consume_queue_dir)
    shutil.rmtree(config.index_dir)
    store = _reopen(config)
    try:
        assert store.get_max_offset_in_queue("TopicTest", 0) == 25
        assert len(store.query_message("TopicTest", "k3", 4).messages) == 1
    finally:
        store.shutdown()


def test_clean_restart_with_consume_queue_ahead_of_commitlog_drops_the_extra_units(tmp_path):
    config, store, results = _write(tmp_path, 10)
    store.shutdown()
    # A CommitLog shorter than its ConsumeQueue (e.g. restored from an older copy).
    with open(_commitlog_path(config), "r+b") as f:
        f.seek(results[7].wrote_offset)
        f.write(bytes(64 * 1024 - results[7].wrote_offset))
    store = _reopen(config)
    try:
        assert store.get_max_offset_in_queue("TopicTest", 0) == 7
        assert store.put_message(make_message()).append.logics_offset == 7
    finally:
        store.shutdown()


def test_recovery_checks_ipv6_records_too(tmp_path):
    config = small_config(tmp_path, mapped_file_size_commit_log=64 * 1024)
    store = DefaultMessageStore(config, store_host=("::1", 10911))
    store.load()
    store.start()
    results = [store.put_message(make_message(body=f"v6-{i}".encode() * 10,
                                              born_host=("fe80::1", 5000))).append
               for i in range(10)]
    store.wait_dispatched()
    assert len(results[0].msg_ids[0]) == 56
    _crash(store)
    with open(_commitlog_path(config), "r+b") as f:
        data = f.read()
        f.seek(data.index(b"v6-9"))
        f.write(b"V")
    store = _reopen(config)
    try:
        assert store.recovered_problem == "body CRC mismatch"
        assert store.get_max_offset_in_queue("TopicTest", 0) == 9
        record = store.look_message_by_offset(results[8].wrote_offset)
        assert record.born_host == ("fe80::1", 5000)
        assert record.store_host == ("::1", 10911)
    finally:
        store.shutdown()


def test_a_short_last_record_whose_flags_say_ipv6_is_cut_not_a_failed_start():
    """A flipped host flag in a short record near the file's end: its IPv6 fields would end
    past the record (and past the file), so it is cut there as any record that does not add up,
    rather than failing the store's start with a struct error."""
    import struct

    from storage.record import MESSAGE_MAGIC_CODE
    from storage.recovery import _scan

    size = 4096
    data = bytearray(size)
    pos = size - 100
    for sys_flag in (0x10, 0x20, 0x30):
        data[pos:] = bytes(100)
        struct.pack_into(">iI", data, pos, 96, MESSAGE_MAGIC_CODE)
        struct.pack_into(">i", data, pos + 36, sys_flag)
        result = _scan(memoryview(data), size, pos, True, size)
        assert (result.valid_end, result.reached_end) == (pos, False)
        assert result.problem == "field lengths do not match TOTALSIZE"


def test_an_index_file_dropped_as_newer_than_the_checkpoint_is_built_again(tmp_path):
    """The index file's header reached the disk, the checkpoint that covers it did not (a
    crash between the two writes of a flush round): recovery drops the file, and dispatch
    builds its keys again from where it began, so every key is found after the restart."""
    import struct
    import time

    config = small_config(tmp_path, mapped_file_size_commit_log=4096)
    store = _reopen(config)
    for i in range(30):
        store.put_message(make_message(body=f"body-{i}".encode() * 20, keys=f"k{i}"))
    store.wait_dispatched()
    assert len(store.commit_log.mapped_file_queue.mapped_files) >= 2
    store.index_service.flush()
    checkpoint = os.path.join(config.store_path_root_dir, "checkpoint")
    _crash(store)
    with open(checkpoint, "r+b") as f:
        # The CommitLog and the queues flushed past every message (the scan starts at the last
        # file), the index's time older than every entry of its file.
        later = int(time.time() * 1000) + 60_000
        f.write(struct.pack(">qqq", later, later, 1))
    store = _reopen(config)
    try:
        assert store.index_service.dropped_from == 0
        # (the dispatch thread builds the keys again after the start: a full run's load made a
        # query right after it miss them)
        assert store.wait_dispatched(timeout=30)
        for i in (0, 15, 29):
            [found] = store.query_message("TopicTest", f"k{i}", 4).messages
            [record] = iter_records(found, check_crc=True)
            assert record.queue_offset == i
    finally:
        store.shutdown()


def test_a_last_unit_torn_by_an_os_crash_is_built_again_from_its_record(tmp_path):
    # An OS crash can leave a ConsumeQueue's last unit torn across a page: its CommitLog offset
    # and size on disk, its tags code not (zeros). Kept as it was, a consumer of the tag never
    # got the message: the broker filtered it out by that code.
    config = small_config(tmp_path, mapped_file_size_commit_log=64 * 1024)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    for i in range(6):
        store.put_message(make_message(body=b"x" * 100, tags="TagA", keys=f"k{i}"))
    store.wait_dispatched()
    _crash(store)
    path = os.path.join(config.consume_queue_dir, "TopicTest", "0", "0" * 20)
    with open(path, "r+b") as f:
        f.seek(5 * 20 + 12)  # the sixth unit's tags code
        f.write(bytes(8))
    store = _reopen(config)
    try:
        queue = store.find_consume_queue("TopicTest", 0, create=False)
        units = [queue.get_unit(i) for i in range(6)]
        assert len({u.tags_code for u in units}) == 1  # the sixth's is TagA's again
        result = store.get_message("g", "TopicTest", 0, 0, 32, TagsFilter("TagA"))
        assert result.message_count == 6
    finally:
        store.shutdown()


def test_an_idle_queue_whose_last_record_expired_keeps_its_units_after_a_crash(tmp_path):
    # Its last unit names a record the CommitLog no longer holds: no reason to doubt the unit,
    # and dropping it would hand its queue offset to the next message.
    config = small_config(tmp_path, mapped_file_size_commit_log=4 * 1024)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    store.put_message(make_message(topic="Idle", body=b"x" * 100))
    for _ in range(60):  # fills a dozen CommitLog files
        store.put_message(make_message(body=b"y" * 200))
    store.wait_dispatched()
    _crash(store)
    os.remove(_commitlog_path(config))  # the Idle message's file expired
    store = _reopen(config)
    try:
        assert store.get_max_offset_in_queue("Idle", 0) == 1
        assert store.put_message(make_message(topic="Idle")).append.logics_offset == 1
    finally:
        store.shutdown()
