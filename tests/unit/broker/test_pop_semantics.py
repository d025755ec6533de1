"""POP as RocketMQ's own clients use it: acks naming the retry topic, FIFO acks and
invisible-time changes, checkpoints changed in the millisecond they were made."""

from __future__ import annotations

import asyncio

from cluster.broker.pop_processor import PopMessageProcessor
from cluster.pop_handle import ExtraInfo
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.conftest import make_message
from tests.unit.broker.test_pop_refusals import _broker


def _pop(invisible_ms=5000, order=False, topic="PopT", **more):
    return request(RequestCode.POP_MESSAGE, {
        "consumerGroup": "CID-r", "topic": topic, "queueId": -1, "maxMsgNums": 8,
        "invisibleTime": invisible_ms, "pollTime": 0, "bornTime": 0, "initMode": 0,
        "expType": "TAG", "exp": "*", "order": order, **more})


def _setup(store_factory, tmp_path, *bodies, topic="PopT"):
    store = store_factory()
    for body in bodies:
        store.put_message_nowait(make_message(topic, body))
    store.wait_dispatched(timeout=10)
    broker = _broker(store, tmp_path)
    return broker, PopMessageProcessor(broker)


def _revive_all(broker):
    for ck in list(broker.pop_revive.table.values()):
        broker.pop_revive.revive_due(ck.deadline + 1)
    broker.store.wait_dispatched(timeout=10)


def test_an_ack_naming_the_retry_topic_settles_a_redelivered_message(store_factory, tmp_path):
    # RocketMQ's Java push consumer and its proxy put the retry topic itself in the header of
    # an ack for a message that came back. It was wrapped again (%RETRY%G_%RETRY%G_T): the ack
    # answered SUCCESS, found nothing, and the message came back until the DLQ.
    broker, processor = _setup(store_factory, tmp_path, b"m0")
    asyncio.run(processor.pop(None, _pop(invisible_ms=1000)))
    _revive_all(broker)
    again = asyncio.run(processor.pop(None, _pop(invisible_ms=60_000)))
    assert again.code == ResponseCode.SUCCESS
    [ck] = broker.pop_revive.table.values()
    extra = ExtraInfo(ck.start_offset, ck.pop_time, ck.invisible_time, 0, True, "broker-a",
                      ck.queue_id, ck.offsets[0]).encode()
    fields = {"consumerGroup": "CID-r", "topic": "%RETRY%CID-r_PopT", "queueId": ck.queue_id,
              "extraInfo": extra, "offset": ck.offsets[0]}
    changed = asyncio.run(processor.change_invisible_time(None, request(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**fields, "invisibleTime": 5000})))
    assert changed.code == ResponseCode.SUCCESS, changed.remark
    [moved] = broker.pop_revive.table.values()
    extra = ExtraInfo(moved.start_offset, moved.pop_time, moved.invisible_time, 0, True,
                      "broker-a", moved.queue_id, moved.offsets[0]).encode()
    acked = asyncio.run(processor.ack(None, request(RequestCode.ACK_MESSAGE,
                                                    {**fields, "extraInfo": extra})))
    assert acked.code == ResponseCode.SUCCESS
    assert broker.pop_revive.in_flight() == 0


def test_a_message_put_straight_into_the_retry_topic_comes_back_there(store_factory, tmp_path):
    # It has no RETRY_TOPIC property: it was revived into a retry topic of the retry topic,
    # which nobody reads.
    broker, processor = _setup(store_factory, tmp_path)
    broker.topics.create_in_send_message_back_method("%RETRY%CID-r_PopT", 1, 6)
    broker.store.put_message_nowait(make_message("%RETRY%CID-r_PopT", b"direct"))
    broker.store.wait_dispatched(timeout=10)
    first = asyncio.run(processor.pop(None, _pop(invisible_ms=1000)))
    assert first.code == ResponseCode.SUCCESS
    _revive_all(broker)
    assert [t for t in broker.topics.table if t.startswith("%RETRY%")] == ["%RETRY%CID-r_PopT"]
    again = asyncio.run(processor.pop(None, _pop()))
    assert again.code == ResponseCode.SUCCESS


def test_a_change_in_the_millisecond_of_the_pop_keeps_every_message(store_factory, tmp_path,
                                                                     monkeypatch):
    # The moved checkpoint took the original's key (same group, topic, queue, start offset and
    # pop time): the original was replaced, then acked away, and all three messages were lost.
    from cluster.broker import pop_processor

    monkeypatch.setattr(pop_processor, "now_ms", lambda: 1_700_000_000_000)
    broker, processor = _setup(store_factory, tmp_path, b"m0", b"m1", b"m2")
    handed = asyncio.run(processor.pop(None, _pop(invisible_ms=60_000)))
    assert handed.code == ResponseCode.SUCCESS
    [ck] = broker.pop_revive.table.values()
    extra = ExtraInfo(ck.start_offset, ck.pop_time, ck.invisible_time, 0, False, "broker-a",
                      ck.queue_id, ck.offsets[0]).encode()
    changed = asyncio.run(processor.change_invisible_time(None, request(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": "CID-r", "topic": "PopT", "queueId": ck.queue_id,
            "extraInfo": extra, "offset": ck.offsets[0], "invisibleTime": 5000})))
    assert changed.code == ResponseCode.SUCCESS
    assert broker.pop_revive.in_flight() == 3
    revived_before = broker.pop_revive.revived
    _revive_all(broker)
    assert broker.pop_revive.revived - revived_before == 3


def test_acks_naming_nothing_make_no_group_and_get_rocketmqs_codes(store_factory, tmp_path):
    # Acks were checked like a POP, which makes the group it names: each made-up name became
    # a group written to the broker's config, and every ack answered SUCCESS.
    broker, processor = _setup(store_factory, tmp_path, b"m0")
    before = set(broker.subscription_groups.table)

    def ack(group, queue_id=0, offset=0):
        return asyncio.run(processor.ack(None, request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": group, "topic": "PopT", "queueId": queue_id,
            "extraInfo": ExtraInfo(0, 1, 60_000, 0, False, "broker-a", queue_id,
                                   offset).encode(), "offset": offset}))).code

    assert [ack(f"made-up-{n}") for n in range(20)] == [ResponseCode.SUCCESS] * 20
    assert set(broker.subscription_groups.table) == before
    assert ack("g", queue_id=5) == ResponseCode.MESSAGE_ILLEGAL  # the topic has one queue
    assert ack("g", offset=7) == ResponseCode.NO_MESSAGE  # past the queue's end
    batch = asyncio.run(processor.batch_ack(None, request(
        RequestCode.BATCH_ACK_MESSAGE, body=(
            b'{"brokerName": "broker-a", "acks": [{"c": "made-up-x", "t": "PopT", "r": "0",'
            b' "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 60000, "b": [1]}]}'))))
    assert batch.code == ResponseCode.SUCCESS
    assert set(broker.subscription_groups.table) == before


def test_a_pop_as_the_brokers_own_consumers_is_refused_and_moves_nothing(store_factory,
                                                                        tmp_path):
    # A POP as the revive group on the revive log moved the revive offset past checkpoints
    # still in flight: after a restart they were forgotten and never came back.
    broker, processor = _setup(store_factory, tmp_path, b"m0")
    handed = asyncio.run(processor.pop(None, _pop(invisible_ms=60_000)))
    assert handed.code == ResponseCode.SUCCESS
    revive_topic = broker.pop_revive.topic
    before = broker.offsets.query_offset("CID_RMQ_SYS_REVIVE_GROUP", revive_topic, 0)
    hostile = asyncio.run(processor.pop(None, request(RequestCode.POP_MESSAGE, {
        "consumerGroup": "CID_RMQ_SYS_REVIVE_GROUP", "topic": revive_topic, "queueId": 0,
        "maxMsgNums": 8, "invisibleTime": 5000, "pollTime": 0, "bornTime": 0, "initMode": 0,
        "expType": "TAG", "exp": "*", "order": False})))
    assert hostile.code == ResponseCode.NO_PERMISSION
    assert broker.offsets.query_offset("CID_RMQ_SYS_REVIVE_GROUP", revive_topic, 0) == before
