"""The check-back against a real store (no sockets): counts carried by put-back copies, the
progress kept in the consumer offsets, a fresh service picking both up, and progress offsets
that a crash left beyond the end of the half queue."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.broker.config import BrokerConfig
from cluster.broker.controller import BrokerController
from cluster.broker.transaction import TransactionalMessageService, with_real_topic
from cluster.broker.transaction_progress import GIVEN_UP_KEEP_MS
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.config import MessageStoreConfig
from storage.message import (
    TRANS_CHECK_GROUP,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    MessageExtBrokerInner,
    properties_to_string,
)
from storage.message_store import DefaultMessageStore
from storage.record import decode_record

CHECK_MAX = 4
INTERVAL_MS = 1000


@pytest.fixture
def broker(tmp_path):
    store_config = MessageStoreConfig(store_path_root_dir=str(tmp_path))
    config = BrokerConfig(transaction_check_max=CHECK_MAX, transaction_check_interval=INTERVAL_MS,
                          transaction_time_out=INTERVAL_MS)
    controller = BrokerController(config, store_config)
    controller.store = DefaultMessageStore(store_config, ("127.0.0.1", 10911))
    controller.store.load()
    controller.store.start()
    yield controller
    controller.store.shutdown()


def store_half(broker, key: str, immunity_seconds: int | str | None = None) -> tuple[int, int]:
    """A half message as the send processor stores it; its (queue offset, CommitLog offset)."""
    props = {"PGROUP": "pg", "REAL_TOPIC": "Payments", "REAL_QID": "0", "TRAN_MSG": "true",
             "KEYS": key, "UNIQ_KEY": key}
    if immunity_seconds is not None:
        props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(immunity_seconds)
    result, _ = broker.store.put_message_nowait(MessageExtBrokerInner(
        topic=TRANS_HALF_TOPIC, body=key.encode(), properties=props,
        properties_string=properties_to_string(props), born_timestamp=int(time.time() * 1000)))
    assert broker.store.wait_dispatched()
    return result.append.logics_offset, result.append.wrote_offset


def end(service, offsets: tuple[int, int], decision: int = TRANSACTION_COMMIT_TYPE) -> int:
    response = asyncio.run(service.end_transaction(None, request(RequestCode.END_TRANSACTION, {
        "producerGroup": "pg", "tranStateTableOffset": offsets[0], "commitLogOffset": offsets[1],
        "commitOrRollback": decision})))
    return response.code


def rounds_until_given_up(broker, service, now: float) -> int:
    """Check rounds, one interval apart, until the half queue has nothing open; how many."""
    for checks in range(20):
        service.check_once(now=now + checks * INTERVAL_MS / 1000)
        assert broker.store.wait_dispatched()
        if not service.progress.live and broker.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0):
            return checks + 1
    raise AssertionError("never given up")


def test_a_fresh_service_carries_on_with_the_counts_and_progress_it_finds(broker):
    store_half(broker, "abandoned")
    now = time.time() + 2
    service = broker.transactions
    service.check_once(now=now)
    assert broker.store.wait_dispatched()
    service.check_once(now=now + 1.0)
    assert broker.store.wait_dispatched()
    copies = broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) - 1
    assert copies == 2  # checked twice: put back twice
    assert broker.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 2

    again = TransactionalMessageService(broker)  # a restart: nothing kept in memory
    rounds = rounds_until_given_up(broker, again, now + 2.0)
    assert rounds == CHECK_MAX - 2 + 1  # the two remaining checks, then the give-up
    assert broker.store.get_max_offset_in_queue("Payments", 0) == 0


def test_progress_beyond_a_lost_tail_does_not_hide_new_half_messages(broker):
    store_half(broker, "a")
    # As if the offsets were persisted before a crash cost the store its tail.
    broker.offsets.commit_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, 50)
    broker.offsets.commit_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, 50)
    service = TransactionalMessageService(broker)
    service.load()  # at start, before producers send again
    offsets = store_half(broker, "b")
    assert end(service, offsets) == ResponseCode.SUCCESS
    assert broker.store.wait_dispatched()
    assert broker.store.get_max_offset_in_queue("Payments", 0) == 1  # committed
    assert end(service, offsets) == ResponseCode.SUCCESS
    assert broker.store.wait_dispatched()
    assert broker.store.get_max_offset_in_queue("Payments", 0) == 1  # once


def test_a_long_immunity_does_not_hold_up_the_transactions_after_it(broker):
    store_half(broker, "patient", immunity_seconds=3600)
    store_half(broker, "due")
    service = broker.transactions
    service.check_once(now=time.time() + 5)  # past transactionTimeOut, well within the hour
    assert broker.store.wait_dispatched()
    copies = {r.keys: props for _, r, props in service._half_messages(0)}
    assert copies["due"]["TRANSACTION_CHECK_TIMES"] == "1"  # checked
    assert copies["patient"]["TRANSACTION_CHECK_TIMES"] == "0"  # put back unchecked
    assert service.progress.half_offset == 2  # past both originals


@pytest.mark.parametrize("immunity", ["9" * 5000, "\u00b2", "-5", "x"])
def test_a_producer_s_odd_immunity_time_does_not_stop_the_check_back(broker, immunity):
    # The producer sets CHECK_IMMUNITY_TIME_IN_SECONDS: a value int() refuses used to raise in
    # every round, before any half message after it was checked.
    store_half(broker, "odd", immunity_seconds=immunity)
    store_half(broker, "due")
    service = broker.transactions
    service.check_once(now=time.time() + 5)
    assert broker.store.wait_dispatched()
    copies = {r.keys: props for _, r, props in service._half_messages(0)}
    assert copies["due"]["TRANSACTION_CHECK_TIMES"] == "1"
    assert service.progress.half_offset == 2


def test_a_committed_message_carries_none_of_the_check_backs_marks(broker):
    store_half(broker, "checked")
    service = broker.transactions
    service.check_once(now=time.time() + 5)
    assert broker.store.wait_dispatched()
    (offset, copy, _), = list(service._half_messages(0))
    assert end(service, (offset, copy.commit_log_offset)) == ResponseCode.SUCCESS
    assert broker.store.wait_dispatched()
    queue = broker.store.find_consume_queue("Payments", 0, create=False)
    unit = queue.get_unit(0)
    committed = broker.store.look_message_by_offset(unit.commit_log_offset, unit.size)
    assert committed.keys == "checked"
    assert not {"TRANSACTION_CHECK_TIMES", "TRAN_PREPARED_QUEUE_OFFSET"} & set(committed.properties)


def test_a_put_back_copy_is_counted_open_before_dispatch_shows_it(broker, monkeypatch):
    store_half(broker, "checked")
    store_half(broker, "also-checked")
    service = broker.transactions
    service.load()
    assert service.open_counts() == (2, 0)
    # Dispatch lags the put-back (a loaded machine): the queue still ends at the originals.
    shown = broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
    real = broker.store.get_max_offset_in_queue
    monkeypatch.setattr(broker.store, "get_max_offset_in_queue",
                        lambda topic, queue_id: shown if topic == TRANS_HALF_TOPIC else real(topic, queue_id))
    service.check_once(now=time.time() + 5)
    assert service.open_counts() == (2, 2)  # the originals settled, their copies not queued yet
    monkeypatch.setattr(broker.store, "get_max_offset_in_queue", real)
    assert broker.store.wait_dispatched()
    assert service.open_counts() == (2, 2)


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after a restart"])
@pytest.mark.parametrize("answer_for", ["original", "last copy"])
def test_a_late_commit_of_a_given_up_transaction_is_delivered_once(broker, answer_for, restart):
    # RocketMQ stops checking after transactionCheckMax checks, and a commit that comes later
    # still delivers; this broker answered SUCCESS and dropped it.
    original = store_half(broker, "late")
    now = time.time() + 2
    rounds_until_given_up(broker, broker.transactions, now)
    half_queue = broker.store.find_consume_queue(TRANS_HALF_TOPIC, 0, create=False)
    stored = half_queue.get_max_offset_in_queue()
    for later in range(3):  # given up: never asked about again
        broker.transactions.check_once(now=now + (CHECK_MAX + 2 + later) * INTERVAL_MS / 1000)
    assert broker.store.wait_dispatched()
    assert half_queue.get_max_offset_in_queue() == stored
    assert broker.store.get_max_offset_in_queue("Payments", 0) == 0
    unit = half_queue.get_unit(stored - 1)
    offsets = original if answer_for == "original" else (stored - 1, unit.commit_log_offset)
    service = TransactionalMessageService(broker) if restart else broker.transactions
    assert end(service, offsets) == ResponseCode.SUCCESS
    assert broker.store.wait_dispatched()
    assert broker.store.get_max_offset_in_queue("Payments", 0) == 1  # delivered
    assert end(service, offsets) == ResponseCode.SUCCESS
    assert end(service, original) == ResponseCode.SUCCESS
    assert broker.store.wait_dispatched()
    assert broker.store.get_max_offset_in_queue("Payments", 0) == 1  # once


def test_a_check_back_restores_the_topic_and_queue_and_keeps_the_rest(broker):
    """RocketMQ's sendCheckMessage shows the producer the half message under the topic and queue
    it was sent to; every other field, the half offsets included, stays as stored."""
    half_offset, commit_log_offset = store_half(broker, "open")
    raw = broker.store.select_one_message_by_offset(commit_log_offset)
    stored = decode_record(raw, 0)
    shown = decode_record(with_real_topic(raw, stored.properties), 0)
    assert (stored.topic, stored.queue_id) == (TRANS_HALF_TOPIC, 0)
    assert (shown.topic, shown.queue_id) == ("Payments", 0)
    assert (shown.queue_offset, shown.commit_log_offset) == (half_offset, commit_log_offset)
    for field in ("body", "body_crc", "properties_string", "born_timestamp", "born_host_raw",
                  "store_timestamp", "store_host_raw", "sys_flag", "flag", "reconsume_times"):
        assert getattr(shown, field) == getattr(stored, field), field
    props = dict(stored.properties, REAL_QID="3")
    assert decode_record(with_real_topic(raw, props), 0).queue_id == 3


def test_a_transaction_given_up_a_day_ago_no_longer_holds_the_op_progress(broker):
    # Its op message held the persisted op offset back until the half queue's file expired,
    # so every restart re-read the op queue from there.
    store_half(broker, "forgotten")
    now = time.time() + 2
    rounds_until_given_up(broker, broker.transactions, now)
    ops = broker.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
    assert broker.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) < ops
    broker.transactions.check_once(now=now + GIVEN_UP_KEEP_MS / 1000 + 60)
    assert broker.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == ops
