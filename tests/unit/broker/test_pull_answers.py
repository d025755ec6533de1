"""PULL_MESSAGE answered in the call that reads it, and held pulls that learn of every arrival.

A real broker (store, dispatch; no sockets) takes frames on connections with recording
transports, as the server's protocol would hand them over.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace

import pytest

from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.broker.subscription_group import SubscriptionGroupConfig
from cluster.client.pull import pull_request
from cluster.remoting.codec import encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message import properties_to_string
from tests.unit.broker.test_send_lane import _answers
from tests.unit.remoting.transports import RecordingTransport


def _send(topic: str, body: bytes, opaque: int) -> bytes:
    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
              "g": 1_700_000_000_000, "h": 0,
              "i": properties_to_string({"UNIQ_KEY": f"{opaque:032X}", "WAIT": "true"}),
              "j": 0, "k": False, "m": False}
    return encode(request(RequestCode.SEND_MESSAGE_V2, fields, body, opaque=opaque))


def _pull(topic: str, offset: int, opaque: int, suspend_ms: int = 0) -> bytes:
    command = pull_request("cg", topic, 0, offset, 32, suspend_ms=suspend_ms)
    return encode(replace(command, opaque=opaque))


async def _broker(folder) -> BrokerController:
    config, store_config, _ = load_broker_config({
        "brokerName": "pulls", "listenPort": "0", "storePathRootDir": str(folder),
        "autoCreateTopicEnable": "true", "brokerIP1": "127.0.0.1",
    })
    broker = BrokerController(config, store_config)
    await broker.start()
    broker.topics.create_in_send_message_method("News", "TBW102", 1, 0)
    return broker


def _connection(broker: BrokerController) -> tuple:
    connection = broker.server._new_connection()
    transport = RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


def _on_a_broker(tmp_path, scenario, **config) -> None:
    """Run ``scenario(broker)`` on a started broker (``config``: its attributes to set), then
    stop the broker whatever happened."""
    async def run():
        broker = await _broker(tmp_path)
        for name, value in config.items():
            setattr(broker.config, name, value)
        try:
            await scenario(broker)
        finally:
            await broker.stop()

    asyncio.run(run())


def _only_answer(transport) -> tuple[int, int, str]:
    """(code, opaque, nextBeginOffset) of the one answer written to ``transport``."""
    [(code, opaque, _remark, fields)] = _answers(b"".join(transport.writes))
    return code, opaque, fields["nextBeginOffset"]


async def _until(predicate, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def test_a_pull_that_finds_messages_is_answered_with_no_task(tmp_path):
    async def scenario(broker):
        producer, _sent = _connection(broker)
        producer.data_received(_send("News", b"first", 1))
        assert await _until(lambda: broker.store.get_max_offset_in_queue("News", 0) == 1, 5)
        consumer, answers = _connection(broker)
        consumer.data_received(_pull("News", 0, 7, suspend_ms=15_000))
        # Answered within the read that brought it: nothing in flight, nothing to wait on.
        assert consumer.inflight == 0
        assert answers.writes
        assert _only_answer(answers) == (ResponseCode.SUCCESS, 7, "1")

    _on_a_broker(tmp_path, scenario)


def test_a_message_landing_before_a_held_pull_starts_waiting_still_answers_it(
        tmp_path):
    # A send is stored in one loop iteration and dispatched to its queue in the next. A pull
    # read between the two finds the queue empty and is held, but its wait begins a loop
    # iteration later, after the dispatch has reported the arrival to no one: the held pull
    # must still learn of it at once, not at the end of its 15 s hold.
    async def scenario(broker):
        consumer, answers = _connection(broker)
        producer, _sent = _connection(broker)
        producer.data_received(_send("News", b"news", 1))
        consumer.data_received(_pull("News", 0, 7, suspend_ms=15_000))
        assert consumer.inflight == 1  # held: the message is not in its queue yet
        assert await _until(lambda: answers.writes, 3), "the held pull was not woken"
        assert _only_answer(answers) == (ResponseCode.SUCCESS, 7, "1")

    _on_a_broker(tmp_path, scenario)


def test_a_held_pull_with_nothing_arriving_answers_pull_not_found_when_its_hold_ends(
        tmp_path):
    async def scenario(broker):
        consumer, answers = _connection(broker)
        consumer.data_received(_pull("News", 0, 3, suspend_ms=300))
        await asyncio.sleep(0.1)
        assert not answers.writes
        assert await _until(lambda: answers.writes, 3)
        assert _only_answer(answers) == (ResponseCode.PULL_NOT_FOUND, 3, "0")

    _on_a_broker(tmp_path, scenario)


def test_an_arrival_from_the_dispatch_thread_absorbed_by_a_queued_report_still_wakes_the_pull(
        tmp_path):
    # The other way an arrival can slip by: dispatch on its own thread, whose reports reach the
    # loop once per burst. A report is already queued (an earlier arrival elsewhere) when the
    # pull is held, so the new arrival joins that report, which runs before the held pull's
    # wait has begun and finds no one waiting.
    async def scenario(broker):
        store = broker.store
        store.commit_log.on_append = lambda *_args: store.reput.wakeup()  # the thread's way
        hold = broker.pull_hold
        reporter = threading.Thread(target=hold.notify_from_thread, args=("Other", 0, 5))
        reporter.start()
        reporter.join()
        consumer, answers = _connection(broker)
        producer, _sent = _connection(broker)
        consumer.data_received(_pull("News", 0, 7, suspend_ms=15_000))
        assert consumer.inflight == 1  # held
        producer.data_received(_send("News", b"news", 1))
        deadline = time.monotonic() + 3
        while store.get_max_offset_in_queue("News", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)  # (the loop blocked: the thread dispatches and reports)
        assert store.get_max_offset_in_queue("News", 0) == 1
        assert await _until(lambda: answers.writes, 3), "the held pull was not woken"
        assert _only_answer(answers) == (ResponseCode.SUCCESS, 7, "1")

    _on_a_broker(tmp_path, scenario)


def _consumer_heartbeat(topic: str, sub_version: int, model: str = "CLUSTERING") -> bytes:
    return json.dumps({"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": model,
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{
            "topic": topic, "subString": "TagA", "expressionType": "TAG", "tagsSet": ["TagA"],
            "codeSet": [], "subVersion": sub_version, "classFilterMode": False}]}]}).encode()


@pytest.mark.parametrize(("heartbeat", "pulled_version", "expected"), [
    (None, 1, ResponseCode.SUBSCRIPTION_NOT_EXIST),  # right after a restart: no heartbeat yet
    (("Other", 1, "CLUSTERING"), 1, ResponseCode.SUBSCRIPTION_NOT_EXIST),  # not this topic
    (("News", 1, "CLUSTERING"), 2, ResponseCode.SUBSCRIPTION_NOT_LATEST),  # changed since
    (("News", 1, "BROADCASTING"), 1, ResponseCode.NO_PERMISSION),  # broadcast not allowed
    (("News", 2, "CLUSTERING"), 1, ResponseCode.PULL_RETRY_IMMEDIATELY),  # served: no TagA
], ids=["no heartbeat", "other topic", "stale", "broadcast", "registered"])
def test_a_pull_without_a_subscription_is_served_only_by_the_one_its_group_registered(
        tmp_path, heartbeat, pulled_version, expected):
    # A 4.x Java push consumer pulls with no subscription of its own. Without one registered
    # the broker served the whole queue unfiltered: an SQL92 or TAG consumer got what its
    # expression excludes. RocketMQ refuses the pull; the consumer pulls again later.
    async def scenario(broker):
        broker.subscription_groups.update(
            SubscriptionGroupConfig("cg", consume_broadcast_enable=False))
        producer, _sent = _connection(broker)
        producer.data_received(_send("News", b"first", 1))
        assert await _until(lambda: broker.store.get_max_offset_in_queue("News", 0) == 1, 5)
        frames = b""
        if heartbeat is not None:
            frames += encode(request(RequestCode.HEART_BEAT, body=_consumer_heartbeat(*heartbeat),
                                     opaque=7))
        frames += encode(request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "cg", "topic": "News", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subVersion": pulled_version}, opaque=8))
        consumer, answers = _connection(broker)
        consumer.data_received(frames)
        assert await _until(lambda: 8 in {a[1] for a in _answers(b"".join(answers.writes))}, 3)
        [pulled] = [a for a in _answers(b"".join(answers.writes)) if a[1] == 8]
        assert pulled[0] == expected, pulled

    _on_a_broker(tmp_path, scenario)


def test_a_pull_read_after_a_heartbeat_sees_the_subscription_it_registered(tmp_path):
    # One read: HEART_BEAT registering a SQL92 subscription, then a pull that carries none
    # (RocketMQ's Java consumer leaves the subscription to the heartbeat). Both are answered
    # at once, in order: the pull filters by the heartbeat's expression.
    async def scenario(broker):
        producer, _sent = _connection(broker)
        producer.data_received(_send("News", b"first", 1))
        assert await _until(lambda: broker.store.get_max_offset_in_queue("News", 0) == 1, 5)
        heartbeat = json.dumps({"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
            "groupName": "cg", "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "unitMode": False, "subscriptionDataSet": [{
                "topic": "News", "subString": "region = 'nowhere'", "expressionType": "SQL92",
                "tagsSet": [], "codeSet": [], "subVersion": 1, "classFilterMode": False}]}]})
        pull = request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "cg", "topic": "News", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subVersion": 1}, opaque=8)
        consumer, answers = _connection(broker)
        consumer.data_received(encode(request(RequestCode.HEART_BEAT, body=heartbeat.encode(),
                                              opaque=7)) + encode(pull))
        # (the broker also tells the group its members changed: a request of its own)
        assert await _until(lambda: {7, 8} <= {a[1] for a in _answers(b"".join(answers.writes))}, 3)
        by_opaque = {a[1]: a for a in _answers(b"".join(answers.writes))}
        assert by_opaque[7][0] == ResponseCode.SUCCESS
        # The one message has no property region: filtered out, not handed over.
        assert by_opaque[8][:3] == (ResponseCode.PULL_RETRY_IMMEDIATELY, 8, "NO_MATCHED_MESSAGE")

    _on_a_broker(tmp_path, scenario, enable_property_filter=True)


async def _pulled_by(consumer: tuple, topic: str, sub_version: int) -> tuple:
    """The answer to a pull of queue 0 from offset 0 by ``consumer`` (its connection and
    transport), without the SUBSCRIPTION flag: filtered by what its group registered."""
    connection, transport = consumer
    connection.data_received(encode(request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "cg", "topic": topic, "queueId": 0, "queueOffset": 0,
        "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
        "subVersion": sub_version}, opaque=8)))
    assert await _until(lambda: 8 in {a[1] for a in _answers(b"".join(transport.writes))}, 3)
    [pulled] = [a for a in _answers(b"".join(transport.writes)) if a[1] == 8]
    return pulled


def test_a_group_of_two_consumers_keeps_the_newer_subscription_version(tmp_path):
    # Two Java consumers of one group carry their own start times as subVersion; the one that
    # heartbeated last (the older) replaced the newer one's, and the newer one's pulls were
    # refused as SUBSCRIPTION_NOT_LATEST about half the time.
    async def scenario(broker):
        producer, _sent = _connection(broker)
        producer.data_received(_send("News", b"first", 1))
        assert await _until(lambda: broker.store.get_max_offset_in_queue("News", 0) == 1, 5)
        newer, older = _connection(broker), _connection(broker)
        newer[0].data_received(encode(request(RequestCode.HEART_BEAT,
                                              body=_consumer_heartbeat("News", 2000), opaque=1)))
        older[0].data_received(encode(request(RequestCode.HEART_BEAT,
                                              body=_consumer_heartbeat("News", 1000), opaque=1)))
        pulled = await _pulled_by(newer, "News", 2000)
        assert pulled[0] != ResponseCode.SUBSCRIPTION_NOT_LATEST, pulled

    _on_a_broker(tmp_path, scenario)


def test_a_proxys_heartbeat_keeps_the_topics_of_the_groups_4x_members(tmp_path):
    # A group with a 4.x member and a 5.x one behind the proxy: the proxy heartbeats only the
    # 5.x member's topics, which replaced the group's set, and the 4.x member's pulls of its
    # %RETRY% topic were refused as SUBSCRIPTION_NOT_EXIST until its next heartbeat.
    async def scenario(broker):
        producer, _sent = _connection(broker)
        producer.data_received(_send("News", b"first", 1))
        assert await _until(lambda: broker.store.get_max_offset_in_queue("News", 0) == 1, 5)
        member, proxy = _connection(broker), _connection(broker)
        four = json.loads(_consumer_heartbeat("News", 2000))
        four["consumerDataSet"][0]["subscriptionDataSet"].append({
            "topic": "%RETRY%cg", "subString": "*", "expressionType": "TAG", "tagsSet": [],
            "codeSet": [], "subVersion": 2000, "classFilterMode": False})
        member[0].data_received(encode(request(RequestCode.HEART_BEAT,
                                               body=json.dumps(four).encode(), opaque=1)))
        five = json.loads(_consumer_heartbeat("News", 0))
        five["clientID"] = "proxied"
        five["consumerDataSet"][0]["consumeType"] = "CONSUME_POP"
        proxy[0].data_received(encode(request(RequestCode.HEART_BEAT,
                                              body=json.dumps(five).encode(), opaque=1)))
        assert await _until(lambda: len(broker.consumers.find("cg").channels) == 2, 3)
        pulled = await _pulled_by(member, "%RETRY%cg", 2000)
        assert pulled[0] != ResponseCode.SUBSCRIPTION_NOT_EXIST, pulled

    _on_a_broker(tmp_path, scenario)
