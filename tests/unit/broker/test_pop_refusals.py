"""POP against a store that refuses writes (a full disk, a failed service): no checkpoint can be
written, so nothing is handed out, the group's offset stays, and the answer is the store's
refusal with its sentence; acks that cannot be recorded are not reported as done."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from cluster.broker.config import BrokerConfig
from cluster.broker.consumer_offset import ConsumerOffsetManager
from cluster.broker.pop_order import OrderInfoManager
from cluster.broker.pop_processor import PopMessageProcessor
from cluster.broker.pop_revive import PopReviveService
from cluster.broker.stats import BrokerStats
from cluster.broker.subscription_group import SubscriptionGroupManager
from cluster.broker.topic_config import TopicConfig, TopicConfigManager
from cluster.pop_handle import ExtraInfo
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.conftest import make_message


def _broker(store, tmp_path):
    config = BrokerConfig(broker_name="broker-a")
    broker = SimpleNamespace(
        config=config, store=store, is_master=True, stats=BrokerStats(),
        topics=TopicConfigManager(str(tmp_path / "topics.json"), config),
        subscription_groups=SubscriptionGroupManager(str(tmp_path / "groups.json"), True),
        offsets=ConsumerOffsetManager(str(tmp_path / "offsets.json")),
        pop_order=OrderInfoManager(str(tmp_path / "order.json")), pull_hold=None)
    broker.topics.update(TopicConfig("PopT", 1, 1))
    broker.pop_revive = PopReviveService(broker)
    broker.topics.create_in_send_message_back_method(broker.pop_revive.topic, 1, 6)
    return broker


def _pop():
    return request(RequestCode.POP_MESSAGE, {
        "consumerGroup": "CID-r", "topic": "PopT", "queueId": -1, "maxMsgNums": 8,
        "invisibleTime": 5000, "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG",
        "exp": "*", "order": False})


def test_a_pop_whose_checkpoint_cannot_be_written_hands_out_nothing(store_factory, tmp_path):
    store = store_factory()
    for number in range(3):
        store.put_message_nowait(make_message("PopT", f"m{number}".encode()))
    store.wait_dispatched(timeout=10)
    broker = _broker(store, tmp_path)
    processor = PopMessageProcessor(broker)
    store.running_flags.set("DISK_FULL", "the disk is full")
    refused = asyncio.run(processor.pop(None, _pop()))
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
    assert "disk is full" in refused.remark
    assert broker.offsets.query_offset("CID-r", "PopT", 0) < 0  # nothing moved on
    assert broker.pop_revive.in_flight() == 0

    store.running_flags.clear("DISK_FULL")
    handed = asyncio.run(processor.pop(None, _pop()))
    assert handed.code == ResponseCode.SUCCESS
    assert broker.pop_revive.in_flight() == 3  # all three, none lost

    # An ack that cannot be recorded is refused, and the message stays in flight.
    [ck] = broker.pop_revive.table.values()
    extra = ExtraInfo(ck.start_offset, ck.pop_time, ck.invisible_time, 0, False, "broker-a", 0,
                      ck.offsets[0]).encode()
    store.running_flags.set("DISK_FULL", "the disk is full")
    ack = asyncio.run(processor.ack(None, request(RequestCode.ACK_MESSAGE, {
        "consumerGroup": "CID-r", "topic": "PopT", "queueId": 0, "extraInfo": extra,
        "offset": ck.offsets[0]})))
    assert ack.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert broker.pop_revive.in_flight() == 3


def test_checkpoints_falling_due_together_go_back_over_several_rounds(store_factory, tmp_path):
    store = store_factory()
    broker = _broker(store, tmp_path)
    processor = PopMessageProcessor(broker)
    for batch in range(2):  # two checkpoints, of 3 and 2 messages
        for number in range(3 - batch):
            store.put_message_nowait(make_message("PopT", f"c{batch}-{number}".encode()))
        store.wait_dispatched(timeout=10)
        assert asyncio.run(processor.pop(None, _pop())).code == ResponseCode.SUCCESS
    revive = broker.pop_revive
    later = max(ck.deadline for ck in revive.table.values()) + 1
    assert revive.revive_due(later, budget=1) == 3  # one whole checkpoint, never half of one
    assert revive.in_flight() == 2
    assert revive.revive_due(later, budget=1) == 2
    assert revive.in_flight() == 0
    store.wait_dispatched(timeout=10)
    retry = store.get_message("g", "%RETRY%CID-r_PopT", 0, 0, 10)
    assert len(retry.messages) == 5


def test_a_pop_whose_retry_or_dead_letter_folder_is_another_topics_is_refused(store_factory,
                                                                             tmp_path):
    # Where the file system ignores case, a topic differing only in case holds the folder the
    # group's unacked messages would come back to: nothing is handed out, with the reason.
    store = store_factory()
    store.put_message_nowait(make_message("PopT", b"m"))
    store.wait_dispatched(timeout=10)
    broker = _broker(store, tmp_path)
    broker.topics.names_ignore_case = True
    processor = PopMessageProcessor(broker)
    for twin in ("%dlq%cid-r", "%retry%cid-r_popt"):
        broker.topics.update(TopicConfig(twin, 1, 1))
        refused = asyncio.run(processor.pop(None, _pop()))
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert f"differs from the topic {twin} only in case" in refused.remark
        assert broker.pop_revive.in_flight() == 0
        broker.topics.delete(twin)
    assert asyncio.run(processor.pop(None, _pop())).code == ResponseCode.SUCCESS
    asked = []
    broker.topics.folder_problem = asked.append
    assert asyncio.run(processor.pop(None, _pop())).code == ResponseCode.PULL_NOT_FOUND  # (all out)
    assert asked == []  # free once: not asked again on every POP


def test_unacked_messages_wait_while_their_retry_folder_is_taken_and_it_is_said_once(
        store_factory, tmp_path, caplog):
    store = store_factory()
    store.put_message_nowait(make_message("PopT", b"m"))
    store.wait_dispatched(timeout=10)
    broker = _broker(store, tmp_path)
    processor = PopMessageProcessor(broker)
    assert asyncio.run(processor.pop(None, _pop())).code == ResponseCode.SUCCESS
    broker.topics.names_ignore_case = True  # a twin made since the POP took its folder
    broker.topics.update(TopicConfig("%retry%cid-r_popt", 1, 1))
    revive = broker.pop_revive
    later = max(ck.deadline for ck in revive.table.values()) + 1
    with caplog.at_level("WARNING", logger="cluster.broker.pop_revive"):
        for attempt in range(3):  # (a refused one is tried again a second later)
            revive.revive_due(later + 1500 * attempt, budget=10)
    assert revive.in_flight() == 1  # kept, not lost
    said = [r.getMessage() for r in caplog.records if "wait to come back" in r.getMessage()]
    assert len(said) == 1
    assert "differs from the topic %retry%cid-r_popt only in case" in said[0]
    broker.topics.delete("%retry%cid-r_popt")
    revive.revive_due(later + 6000, budget=10)
    assert revive.in_flight() == 0  # once the folder is free, it comes back


def test_a_message_whose_reconsume_count_is_int32s_largest_still_goes_back_with_its_checkpoint(
        store_factory, tmp_path):
    """A 4.x producer may send any int32 as its reconsume count: one more is past the field.
    The store refused that put, and the whole checkpoint (the message and those popped with
    it) stayed, retried every second, for good."""
    store = store_factory()
    store.put_message_nowait(make_message("PopT", b"before"))
    store.put_message_nowait(make_message("PopT", b"odd", reconsume_times=2**31 - 1))
    store.put_message_nowait(make_message("PopT", b"after"))
    store.wait_dispatched(timeout=10)
    broker = _broker(store, tmp_path)
    processor = PopMessageProcessor(broker)
    assert asyncio.run(processor.pop(None, _pop())).code == ResponseCode.SUCCESS
    revive = broker.pop_revive
    later = max(ck.deadline for ck in revive.table.values()) + 1
    assert revive.revive_due(later) == 3
    assert revive.in_flight() == 0
    store.wait_dispatched(timeout=10)
    retry = store.get_message("g", "%RETRY%CID-r_PopT", 0, 0, 10)
    assert len(retry.messages) == 2  # the two others, for another attempt
    [dead] = store.get_message("g", "%DLQ%CID-r", 0, 0, 10).messages  # past every limit
    from storage.record import decode_record

    assert decode_record(dead, 0).reconsume_times == 2**31 - 1


def test_a_message_sent_back_with_int32s_largest_reconsume_count_reaches_the_dlq(tmp_path):
    """CONSUMER_SEND_MSG_BACK of such a message (see above): the store refused one more, and
    the consumer's send-back failed every time it gave up on it."""
    import json

    from cluster.remoting.codec import encode
    from storage.record import decode_record
    from tests.unit.broker.test_pull_answers import _connection, _on_a_broker, _until
    from tests.unit.broker.test_send_lane import _answers

    async def scenario(broker):
        put, _ = broker.store.put_message_nowait(
            make_message("PopT", b"odd", reconsume_times=2**31 - 1))
        broker.store.wait_dispatched(timeout=10)
        connection, transport = _connection(broker)
        made = json.dumps({"groupName": "CID-back"}).encode()
        connection.data_received(encode(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                {}, made, opaque=1)))
        connection.data_received(encode(request(RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": put.append.wrote_offset, "group": "CID-back", "delayLevel": 0,
            "originMsgId": put.append.msg_id, "originTopic": "PopT", "unitMode": False,
            "maxReconsumeTimes": 16}, opaque=2)))
        assert await _until(lambda: len(_answers(b"".join(transport.writes))) == 2, 5)
        said = {opaque: (code, remark) for code, opaque, remark, _ in
                _answers(b"".join(transport.writes))}
        assert said[2][0] == ResponseCode.SUCCESS, said[2]
        broker.store.wait_dispatched(timeout=10)
        [dead] = broker.store.get_message("g", "%DLQ%CID-back", 0, 0, 10).messages
        assert decode_record(dead, 0).reconsume_times == 2**31 - 1

    _on_a_broker(tmp_path, scenario)
