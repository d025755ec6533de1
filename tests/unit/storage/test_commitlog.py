"""The CommitLog put path: offsets, file rolls, batches, limits, delay and transaction rules."""

from __future__ import annotations

import os

import pytest

from storage.errors import MessageIllegalError, PropertiesSizeExceededError, StoreError
from storage.message import (
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBatch,
)
from storage.record import BatchEntry, BlankRecord, MessageRecord, decode_record, encode_batch_body
from tests.conftest import make_message


def test_queue_offsets_count_per_topic_and_queue(store_factory):
    store = store_factory()
    offsets = [store.put_message(make_message(queue_id=i % 2)).append.logics_offset
               for i in range(6)]
    other = store.put_message(make_message(topic="Other")).append.logics_offset
    assert offsets == [0, 0, 1, 1, 2, 2]
    assert other == 0


def test_physical_offsets_are_contiguous_and_msg_id_encodes_them(store_factory):
    store = store_factory()
    first = store.put_message(make_message(body=b"a" * 10)).append
    second = store.put_message(make_message(body=b"b" * 10)).append
    assert second.wrote_offset == first.wrote_offset + first.wrote_bytes
    assert second.msg_ids[0] == f"7F00000100002A9F{second.wrote_offset:016X}"
    record = store.look_message_by_offset(second.wrote_offset)
    assert record.body == b"b" * 10
    assert record.msg_id == second.msg_ids[0]


def test_store_timestamps_never_decrease_along_the_log(store_factory):
    store = store_factory()
    results = [store.put_message(make_message()).append for _ in range(50)]
    stamps = [r.store_timestamp for r in results]
    assert stamps == sorted(stamps)


def test_a_record_that_does_not_fit_ends_the_file_with_a_blank_record(store_factory):
    store = store_factory()
    results = [store.put_message(make_message(body=os.urandom(900))).append for _ in range(6)]
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) >= 2
    assert files[1].file_name == f"{4096:020d}"
    first_in_second = next(r for r in results if r.wrote_offset >= 4096)
    assert first_in_second.wrote_offset == 4096
    last_in_first = max((r for r in results if r.wrote_offset < 4096), key=lambda r: r.wrote_offset)
    blank_at = last_in_first.wrote_offset + last_in_first.wrote_bytes
    blank = decode_record(files[0].read_raw(0, 4096), blank_at)
    assert isinstance(blank, BlankRecord)
    assert blank.size == 4096 - blank_at


def test_batch_gives_one_record_per_message_with_consecutive_queue_offsets(store_factory):
    store = store_factory()
    store.put_message(make_message(topic="Batch"))
    entries = [BatchEntry(7, f"m{i}".encode(), f"UNIQ_KEY\x01U{i}\x02") for i in range(5)]
    result = store.put_messages(MessageExtBatch(topic="Batch", body=encode_batch_body(entries),
                                                properties={"CLUSTER": "DefaultCluster"}))
    append = result.append
    assert append.msg_num == 5
    assert append.logics_offset == 1
    assert len(append.msg_id.split(",")) == 5
    store.wait_dispatched()
    records = [store.view_message_by_id(i) for i in append.msg_ids]
    assert [r.body for r in records] == [f"m{i}".encode() for i in range(5)]
    assert [r.queue_offset for r in records] == [1, 2, 3, 4, 5]
    assert all(r.flag == 7 for r in records)
    assert [r.uniq_key for r in records] == [f"U{i}" for i in range(5)]
    assert records[0].properties["CLUSTER"] == "DefaultCluster"
    assert store.get_max_offset_in_queue("Batch", 0) == 6


def test_batch_never_spans_two_files(store_factory):
    store = store_factory()
    store.put_message(make_message(body=os.urandom(2500)))
    entries = [BatchEntry(0, os.urandom(400), "") for _ in range(4)]
    result = store.put_messages(MessageExtBatch(topic="TopicTest", body=encode_batch_body(entries)))
    assert result.append.wrote_offset == 4096


def test_batch_larger_than_a_file_is_refused(store_factory):
    store = store_factory()
    entries = [BatchEntry(0, os.urandom(1000), "") for _ in range(5)]
    with pytest.raises(MessageIllegalError):
        store.put_messages(MessageExtBatch(topic="TopicTest", body=encode_batch_body(entries)))


def test_topic_longer_than_127_bytes_is_illegal(store_factory):
    store = store_factory()
    with pytest.raises(MessageIllegalError) as info:
        store.put_message(make_message(topic="t" * 128))
    assert info.value.status.name == "MESSAGE_ILLEGAL"


def test_properties_longer_than_32767_bytes_are_refused(store_factory):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    with pytest.raises(PropertiesSizeExceededError):
        store.put_message(make_message(properties={"big": "x" * 32800}))


def test_body_larger_than_max_message_size_is_illegal(store_factory):
    store = store_factory(max_message_size=1000)
    with pytest.raises(MessageIllegalError):
        store.put_message(make_message(body=b"x" * 1001))
    assert store.put_message(make_message(body=b"x" * 1000)).ok


def test_delay_level_parks_the_message_in_schedule_topic(store_factory):
    store = store_factory()
    result = store.put_message(make_message(topic="Orders", queue_id=3, tags="T",
                                            properties={"DELAY": "3"})).append
    store.wait_dispatched()
    record = store.look_message_by_offset(result.wrote_offset)
    assert record.topic == SCHEDULE_TOPIC
    assert record.queue_id == 2
    assert record.properties["REAL_TOPIC"] == "Orders"
    assert record.properties["REAL_QID"] == "3"
    unit = store.find_consume_queue(SCHEDULE_TOPIC, 2).get_unit(0)
    # The unit's tag code is the delivery time: store time + 10 s (level 3).
    assert unit.tags_code == record.store_timestamp + 10_000
    assert store.get_max_offset_in_queue("Orders", 3) == 0


def test_delay_level_above_the_maximum_is_clamped(store_factory):
    store = store_factory()
    result = store.put_message(make_message(properties={"DELAY": "99"})).append
    record = store.look_message_by_offset(result.wrote_offset)
    assert record.queue_id == 17
    assert record.properties["DELAY"] == "18"


def test_prepared_and_rollback_records_do_not_advance_the_queue(store_factory):
    store = store_factory()
    prepared = store.put_message(make_message(sys_flag=TRANSACTION_PREPARED_TYPE, uniq="P1",
                                              properties={"DELAY": "2"})).append
    rollback = store.put_message(make_message(sys_flag=TRANSACTION_ROLLBACK_TYPE, uniq="R1")).append
    committed = store.put_message(make_message(sys_flag=TRANSACTION_COMMIT_TYPE, uniq="C1")).append
    store.wait_dispatched()
    assert (prepared.logics_offset, rollback.logics_offset, committed.logics_offset) == (0, 0, 0)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1
    # A prepared message is not delayed: the delay rewrite only applies to NOT/COMMIT types.
    assert store.look_message_by_offset(prepared.wrote_offset).topic == "TopicTest"
    # Index: prepared and committed are indexed, rollback is not.
    assert store.query_message("TopicTest", "P1", 10).messages
    assert store.query_message("TopicTest", "C1", 10).messages
    assert not store.query_message("TopicTest", "R1", 10).messages


def test_raw_read_and_append_reproduce_the_log_byte_for_byte(store_factory, tmp_path):
    master = store_factory()
    for i in range(30):
        master.put_message(make_message(body=os.urandom(100 + i * 7), keys=f"k{i}"))
    from storage.message_store import DefaultMessageStore
    from tests.conftest import small_config

    slave = DefaultMessageStore(small_config(tmp_path / "slave"))
    slave.load()
    slave.start()
    try:
        offset = 0
        while offset < master.get_max_phy_offset():
            data = master.get_commit_log_data(offset)
            # Ship in odd-sized chunks, as replication does: records arrive cut in pieces.
            for start in range(0, len(data), 333):
                slave.append_to_commit_log(offset + start, data[start : start + 333])
            offset += len(data)
            if offset % 4096:
                break
            # Files end with a blank record; the next file starts at the next file offset.
        assert slave.wait_dispatched()
        assert slave.get_max_phy_offset() == master.get_max_phy_offset()
        for a, b in zip(master.commit_log.mapped_file_queue, slave.commit_log.mapped_file_queue,
                        strict=True):
            assert a.read(0) == b.read(0)
        assert slave.get_max_offset_in_queue("TopicTest", 0) == 30
        found = slave.query_message("TopicTest", "k29", 5).messages
        assert isinstance(decode_record(found[0]), MessageRecord)
    finally:
        slave.shutdown()


def test_raw_append_at_a_wrong_offset_is_refused(store_factory):
    store = store_factory()
    store.put_message(make_message())
    with pytest.raises(StoreError):
        store.append_to_commit_log(5, b"\x00" * 10)


def test_a_record_larger_than_a_commitlog_file_is_illegal_and_nothing_is_written(store_factory):
    store = store_factory()
    with pytest.raises(MessageIllegalError, match="cannot fit"):
        store.put_message(make_message(body=b"x" * 4096))
    assert store.get_max_phy_offset() == 0
    assert store.put_message(make_message()).append.wrote_offset == 0


def test_puts_write_the_log_without_touching_its_mapping(store_factory):
    import sys

    from storage.message_id import host_to_bytes
    from tests.unit.storage.test_mapped_file import _mapped_kib

    if not sys.platform.startswith("linux"):
        pytest.skip("smaps is Linux's")
    store = store_factory(start=False)  # no dispatch: nothing reads the log meanwhile
    log = store.commit_log
    log.put_message(make_message(body=b"general"))
    entries = [BatchEntry(0, f"b{i}".encode(), "") for i in range(4)]
    log.put_messages(MessageExtBatch(topic="Batch", body=encode_batch_body(entries)))
    first = log.mapped_file_queue.get_last_mapped_file()
    while log.mapped_file_queue.get_last_mapped_file() is first:  # past a blank, into the next
        done = log.append_plain("TopicTest", b"TopicTest", 0, 0, os.urandom(700),
                                "UNIQ_KEY\x01U\x02", 0, 1, host_to_bytes("127.0.0.1", 1), 0)
        if done is None:
            log.put_message(make_message(body=os.urandom(700)))
    assert [_mapped_kib(f.path) for f in log.mapped_file_queue] == [0, 0]
    store.start()
    store.wait_dispatched()
    assert store.look_message_by_offset(0).body == b"general"
    assert [store.view_message_by_id(i).body for i in log.put_messages(MessageExtBatch(
        topic="Batch", body=encode_batch_body(entries))).msg_ids] == [b"b0", b"b1", b"b2", b"b3"]
