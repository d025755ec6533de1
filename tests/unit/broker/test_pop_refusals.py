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
