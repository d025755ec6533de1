"""The store facade: reads, queries, restart, flush modes, disk-full refusal, file expiry."""

from __future__ import annotations

import os
import threading
import time

import pytest

from storage.config import FlushDiskType
from storage.errors import PutMessageStatus, ServiceNotAvailableError, StoreLockedError
from storage.message_store import DefaultMessageStore
from storage.record import decode_record, iter_records
from storage.results import GetMessageStatus, TagsFilter
from tests.conftest import make_message, small_config


def test_get_message_reads_in_order_and_reports_the_next_offset(store_factory):
    store = store_factory()
    for i in range(10):
        store.put_message(make_message(body=f"m{i}".encode()))
    store.wait_dispatched()
    result = store.get_message("g", "TopicTest", 0, 3, 4)
    assert result.status is GetMessageStatus.FOUND
    assert [r.body for r in iter_records(result.body)] == [b"m3", b"m4", b"m5", b"m6"]
    assert result.next_begin_offset == 7
    assert (result.min_offset, result.max_offset) == (0, 10)


@pytest.mark.parametrize(
    ("offset", "status", "next_offset"),
    [
        (10, GetMessageStatus.OFFSET_OVERFLOW_ONE, 10),
        (15, GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0),
    ],
)
def test_get_message_statuses_past_the_end(store_factory, offset, status, next_offset):
    store = store_factory()
    for _ in range(10):
        store.put_message(make_message())
    store.wait_dispatched()
    result = store.get_message("g", "TopicTest", 0, offset, 32)
    assert result.status is status
    assert result.next_begin_offset == next_offset


def test_get_message_from_unknown_and_empty_queues(store_factory):
    store = store_factory()
    assert store.get_message("g", "Nope", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


def test_tag_filter_skips_units_by_hash(store_factory):
    store = store_factory()
    for i in range(12):
        store.put_message(make_message(tags=("TagA", "TagB", "TagC")[i % 3], body=str(i).encode()))
    store.wait_dispatched()
    # One pull reads at most one ConsumeQueue file (10 units here), as RocketMQ's does.
    result = store.get_message("g", "TopicTest", 0, 0, 32, TagsFilter("TagA || TagC"))
    assert [r.tags for r in iter_records(result.body)] == ["TagA", "TagC"] * 3 + ["TagA"]
    assert result.queue_offsets == [0, 2, 3, 5, 6, 8, 9]
    assert result.next_begin_offset == 10
    rest = store.get_message("g", "TopicTest", 0, 10, 32, TagsFilter("TagA || TagC"))
    assert [r.body for r in iter_records(rest.body)] == [b"11"]
    none = store.get_message("g", "TopicTest", 0, 0, 32, TagsFilter("TagZ"))
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert none.next_begin_offset == 10


def test_transfer_limits_cap_one_pull(store_factory):
    store = store_factory(max_transfer_count_on_message_in_memory=5)
    for _ in range(20):
        store.put_message(make_message())
    store.wait_dispatched()
    assert store.get_message("g", "TopicTest", 0, 0, 32).message_count == 5


def test_query_by_key_filters_hash_collisions_and_respects_time_range(store_factory):
    # One hash slot: every key collides, so only the real key check separates them.
    store = store_factory(max_hash_slot_num=1)
    before = int(time.time() * 1000) - 1
    for i in range(20):
        store.put_message(make_message(keys=f"order-{i} shared"))
    store.wait_dispatched()
    found = store.query_message("TopicTest", "order-7", 32, before)
    assert [decode_record(m).keys for m in found.messages] == ["order-7 shared"]
    assert len(store.query_message("TopicTest", "shared", 32, before).messages) == 20
    assert store.query_message("TopicTest", "order-7", 32, 0, before - 10_000).messages == []
    assert store.query_message("OtherTopic", "order-7", 32).messages == []


def test_query_by_uniq_key_and_view_by_msg_id(store_factory):
    store = store_factory()
    result = store.put_message(make_message(uniq="7F0000010001000000000000000A0001")).append
    store.wait_dispatched()
    [raw] = store.query_message("TopicTest", "7F0000010001000000000000000A0001", 4).messages
    assert decode_record(raw).commit_log_offset == result.wrote_offset
    assert store.view_message_by_id(result.msg_ids[0]).uniq_key == "7F0000010001000000000000000A0001"


def test_offset_by_time_finds_the_first_message_stored_at_or_after(store_factory):
    store = store_factory()
    stamps = []
    for _ in range(5):
        stamps.append(store.put_message(make_message()).append.store_timestamp)
        time.sleep(0.003)
    store.wait_dispatched()
    assert store.get_offset_in_queue_by_time("TopicTest", 0, stamps[2]) == 2
    assert store.get_offset_in_queue_by_time("TopicTest", 0, 0) == 0
    assert store.get_offset_in_queue_by_time("TopicTest", 0, stamps[-1] + 1) == 5
    assert store.get_earliest_message_time("TopicTest", 0) == stamps[0]


def test_restart_keeps_messages_and_queue_offsets(tmp_path):
    config = small_config(tmp_path)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    for i in range(40):
        store.put_message(make_message(body=os.urandom(200), queue_id=i % 3, keys=f"k{i}"))
    store.shutdown()
    assert not os.path.exists(config.abort_path)
    again = DefaultMessageStore(config)
    assert again.load() is True
    again.start()
    try:
        assert again.get_max_offset_in_queue("TopicTest", 0) == 14
        assert again.put_message(make_message(queue_id=0)).append.logics_offset == 14
        assert len(again.query_message("TopicTest", "k39", 4).messages) == 1
    finally:
        again.shutdown()


def test_a_second_store_on_the_same_directory_is_refused(store_factory, tmp_path):
    store_factory()
    other = DefaultMessageStore(small_config(tmp_path / "store"))
    with pytest.raises(StoreLockedError):
        other.load()


def test_sync_flush_completes_every_waiter_with_few_fdatasyncs(store_factory):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH,
                          mapped_file_size_commit_log=1 << 20)
    results = []

    def writer():
        for _ in range(25):
            results.append(store.put_message(make_message(body=b"x" * 100)).status)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [PutMessageStatus.PUT_OK] * 200
    queue = store.commit_log.mapped_file_queue
    assert queue.flushed_where >= queue.get_max_offset()
    # Group commit: concurrent writers share flushes instead of one fdatasync each.
    assert queue.flush_count < 200


def test_sync_flush_answers_flush_disk_timeout_when_nothing_flushes(store_factory):
    store = store_factory(start=False, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                          sync_flush_timeout=50)
    result = store.put_message(make_message())
    assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert result.append is not None  # stored, only its durability is unconfirmed


def test_sync_flush_without_wait_does_not_block(store_factory):
    store = store_factory(start=False, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                          sync_flush_timeout=5000)
    begin = time.monotonic()
    result = store.put_message(make_message(properties={"WAIT": "false"}))
    assert result.status is PutMessageStatus.PUT_OK
    assert time.monotonic() - begin < 1


def test_async_flush_reaches_disk_within_the_thorough_interval(store_factory):
    store = store_factory(flush_interval_commit_log=20, flush_commit_log_thorough_interval=50)
    store.put_message(make_message())
    queue = store.commit_log.mapped_file_queue
    deadline = time.monotonic() + 5
    while queue.flushed_where < queue.get_max_offset() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.flushed_where == queue.get_max_offset()


def test_transient_store_pool_shows_data_to_readers_only_after_commit(store_factory):
    store = store_factory(start=False, transient_store_pool_enable=True)
    store.put_message(make_message(body=b"pooled"))
    assert store.get_max_phy_offset() == 0  # appended to the write buffer, not yet committed
    store.commit_log.mapped_file_queue.commit(0)
    assert store.get_max_phy_offset() > 0
    store.reput.do_reput()
    [record] = iter_records(store.get_message("g", "TopicTest", 0, 0, 4).body)
    assert record.body == b"pooled"


def test_transient_store_pool_commit_service_runs_when_started(store_factory):
    store = store_factory(transient_store_pool_enable=True, commit_interval_commit_log=10)
    store.put_message(make_message(body=b"pooled"))
    assert store.wait_dispatched(timeout=5)
    deadline = time.monotonic() + 5
    while store.get_max_offset_in_queue("TopicTest", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1


def test_writes_are_refused_when_the_disk_is_nearly_full(store_factory):
    # Any real disk is more than 0 % used: a warning level of 0 marks it full.
    store = store_factory(disk_space_warning_level_ratio=0)
    with pytest.raises(ServiceNotAvailableError, match="disk"):
        store.put_message(make_message())


def test_slave_store_refuses_puts(store_factory):
    from storage.config import BrokerRole

    store = store_factory(broker_role=BrokerRole.SLAVE)
    with pytest.raises(ServiceNotAvailableError, match="slave"):
        store.put_message(make_message())


def test_expired_files_are_deleted_with_their_consume_queue_and_index(store_factory):
    store = store_factory(file_reserved_time=0, mapped_file_size_consume_queue=20 * 4)
    for i in range(30):
        store.put_message(make_message(body=os.urandom(500), keys=f"k{i}"))
    store.wait_dispatched()
    files_before = len(store.commit_log.mapped_file_queue.mapped_files)
    assert files_before > 3
    store.clean_service.manual_delete_rounds = 1
    deleted = store.clean_service.clean_once()
    assert deleted >= 1
    assert store.commit_log.get_min_offset() > 0
    minimum = store.get_min_offset_in_queue("TopicTest", 0)
    assert minimum > 0
    result = store.get_message("g", "TopicTest", 0, 0, 4)
    assert result.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert result.next_begin_offset == minimum
    assert store.get_message("g", "TopicTest", 0, minimum, 4).status is GetMessageStatus.FOUND


def test_arrival_listener_sees_each_dispatched_message(store_factory):
    store = store_factory()
    seen = []
    arrived = threading.Event()

    def listener(arrivals):
        seen.extend((a.topic, a.queue_id, a.consume_queue_offset) for a in arrivals)
        if len(seen) == 3:
            arrived.set()

    store.add_arrival_listener(listener)
    for i in range(3):
        store.put_message(make_message(queue_id=i))
    assert arrived.wait(5)
    assert sorted(seen) == [("TopicTest", 0, 0), ("TopicTest", 1, 0), ("TopicTest", 2, 0)]


def test_listeners_hear_once_a_run_of_each_queue_with_its_newest_record(store_factory):
    store = store_factory(start=False)  # no dispatch thread: the run below takes every record
    seen = []
    store.add_arrival_listener(
        lambda arrivals: seen.extend((a.queue_id, a.consume_queue_offset) for a in arrivals))
    for i in range(7):
        store.put_message_nowait(make_message(queue_id=i % 2))
    assert store.reput.do_reput() == 7
    assert sorted(seen) == [(0, 3), (1, 2)]


def test_runtime_info_reports_positions_and_the_latency_histogram(store_factory):
    store = store_factory()
    for _ in range(5):
        store.put_message(make_message())
    store.wait_dispatched()
    info = store.runtime_info()
    assert info["putMessageTimesTotal"] == "5"
    assert info["commitLogMaxOffset"] == str(store.get_max_phy_offset())
    assert info["commitLogDispatchedOffset"] == info["commitLogMaxOffset"]
    assert info["dispatchBehindBytes"] == "0"
    assert "[<=0ms]" in info["putMessageDistributeTime"]
    assert sum(store.stats.latency_histogram().values()) == 5


def test_put_tps_is_measured_over_the_sampled_window():
    from storage.stats import StoreStatsService

    stats = StoreStatsService()  # not started: this test takes the samples itself
    for _ in range(30):
        stats.record_put("T", 1, 100, 0.5)
    time.sleep(0.05)
    stats.sample()
    first, last = stats._samples[0], stats._samples[-1]
    assert stats.put_tps(10) == pytest.approx(30 / (last.at - first.at))
    assert stats.latency_histogram()["[0~10ms]"] == 30
    assert stats.runtime_info()["putMessageTimesTotal"] == "30"


def test_put_statistics_count_each_topic_the_slowest_put_and_each_latency_bucket():
    from storage.stats import StoreStatsService

    stats = StoreStatsService()  # not started
    stats.record_put("A", 1, 100, 0.5)
    stats.record_put("B", 32, 4000, 12.0, puts=1)  # a batch: one put of 32 messages
    stats.record_put("A", 5, 600, 3.0, puts=5)  # a run of five sends
    stats.record_put("A", 1, 100, 0.0)
    assert stats.topic_put_times == {"A": 7, "B": 32}
    assert stats.topic_put_size == {"A": 800, "B": 4000}
    stats.topic_put_times["A"] = 0  # a copy: the counters are not the caller's to change
    assert stats.topic_put_times["A"] == 7
    histogram = stats.latency_histogram()
    assert (histogram["[<=0ms]"], histogram["[0~10ms]"], histogram["[10~50ms]"]) == (1, 6, 1)
    info = stats.runtime_info()
    assert info["putMessageTimesTotal"] == "39"
    assert info["putMessageSizeTotal"] == "4800"
    assert info["putMessageEntireTimeMax"] == "12"


def test_folders_in_a_topics_queue_folder_that_are_not_queue_ids_are_left_alone(store_factory):
    """A queue's folder is named by its id as an int is written: "007" is not queue 7 (it would
    have opened the folder "7" instead), and "²" is not a number to int()."""
    from tests.conftest import make_message

    store = store_factory()
    for _ in range(3):
        store.put_message(make_message(queue_id=7))
    store.wait_dispatched()
    store.shutdown()
    topic_dir = os.path.join(store.config.consume_queue_dir, "TopicTest")
    for odd in ("007", "²", "x1"):
        os.makedirs(os.path.join(topic_dir, odd))
    again = store_factory()
    assert sorted(again.consume_queue_table["TopicTest"]) == [7]
    assert again.get_max_offset_in_queue("TopicTest", 7) == 3


def test_a_slaves_checkpoint_time_follows_what_it_replicated_and_flushed(store_factory, tmp_path):
    # Replicated bytes carry no store time to the file: the slave's checkpoint kept a CommitLog
    # time of 0, and every restart after a crash checked the whole CommitLog again.
    from storage.config import BrokerRole

    master = DefaultMessageStore(small_config(tmp_path / "master"))
    master.load()
    master.start()
    try:
        for i in range(5):
            master.put_message(make_message(body=f"m{i}".encode()))
        data = bytes(master.commit_log.get_data(0)[0])
    finally:
        master.shutdown()
    stored = [r.store_timestamp for r in iter_records(data)]
    slave = store_factory(broker_role=BrokerRole.SLAVE)
    slave.commit_log.append_data(0, data)
    assert slave.wait_dispatched()
    assert slave.get_max_offset_in_queue("TopicTest", 0) == 5
    slave.flush_service.on_shutdown()  # a thorough flush, as every few seconds
    assert slave.checkpoint.physic_msg_timestamp == stored[-1]


def test_the_data_left_to_flush_is_worded_as_rocketmq_words_it():
    # It was a plain number; mqadmin brokerStatus and the dashboard show RocketMQ's text.
    from storage.runtime_info import human_readable_byte_count

    assert human_readable_byte_count(0) == "0 B"
    assert human_readable_byte_count(1023) == "1023 B"
    assert human_readable_byte_count(1024) == "1.0 KiB"
    assert human_readable_byte_count(1536) == "1.5 KiB"
    assert human_readable_byte_count(1024 ** 3) == "1.0 GiB"
    assert human_readable_byte_count(5 * 1024 ** 4 - 1) == "5.0 TiB"
