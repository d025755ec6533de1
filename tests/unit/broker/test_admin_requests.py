"""Admin and offset requests answered as RocketMQ answers them: system topics and the broker's
own consumers refused, resets that invent nothing, consume stats of what a group consumes now,
relays that time out with CONSUME_MSG_TIMEOUT."""

from __future__ import annotations

import asyncio
import json

from cluster.broker import client_processor
from cluster.broker.pop_checkpoint import REVIVE_GROUP
from cluster.client.route import parse_mq_table
from cluster.pop_handle import pop_retry_topic
from cluster.remoting.codec import encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.unit.broker.broker_harness import ask, connect, on_a_broker
from tests.unit.broker.test_pull_answers import _send


def _create(topic: str, queues: int = 4, perm: int = 6):
    return request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm})


def _commit(group: str, topic: str, queue_id: int, offset: int):
    return request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset})


def _heartbeat(client_id: str, group: str, *topics: str):
    body = {"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "subscriptionDataSet": [{"topic": t, "subString": "*"} for t in topics]}]}
    return request(RequestCode.HEART_BEAT, body=json.dumps(body).encode())


# -- system topics (item: UPDATE_AND_CREATE_TOPIC / DELETE_TOPIC_IN_BROKER) ----------------------
def test_system_topics_and_the_brokers_own_cannot_be_overwritten_or_deleted(tmp_path):
    # TBW102 made perm 6 (not inheritable) ended topic auto-creation for the whole broker.
    async def scenario(broker):
        before = {name: broker.topics.select(name) for name in broker.topics.table}
        for topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                      "rmq_sys_wheel_timer", "admin-b", "Here_REPLY_TOPIC", "Here",
                      "RMQ_SYS_TRACE_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"):
            answer = await ask(broker, _create(topic, 1, 6))
            assert (answer.code, answer.remark) == (
                ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        for topic in ("Here", "admin-b", "Here_REPLY_TOPIC", "TBW102", "SCHEDULE_TOPIC_XXXX"):
            answer = await ask(broker, request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                               {"topic": topic}))
            assert (answer.code, answer.remark) == (
                ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        assert {name: broker.topics.select(name) for name in broker.topics.table} == before
        # A topic of the broker's own names is its own; another broker's name is any topic.
        assert (await ask(broker, _create("other-b"))).code == ResponseCode.SUCCESS
        assert (await ask(broker, request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                          {"topic": "other-b"}))).code == ResponseCode.SUCCESS

    on_a_broker(tmp_path, scenario)


# -- UPDATE_CONSUMER_OFFSET --------------------------------------------------------------------------
def test_a_client_cannot_commit_offsets_of_the_brokers_own_consumers(tmp_path):
    # 2**63-1 for the revive group made every in-flight POP checkpoint be forgotten at restart.
    async def scenario(broker):
        revive = broker.pop_revive.topic
        before = broker.offsets.query_offset(REVIVE_GROUP, revive, 0)
        answer = await ask(broker, _commit(REVIVE_GROUP, revive, 0, 2**63 - 1))
        assert answer.code == ResponseCode.NO_PERMISSION
        assert broker.offsets.query_offset(REVIVE_GROUP, revive, 0) == before
        for group, topic in (("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC"),
                             ("cg", "SCHEDULE_TOPIC_XXXX"), ("cg", "rmq_sys_wheel_timer"),
                             ("cg", revive)):
            answer = await ask(broker, _commit(group, topic, 0, 5))
            assert answer.code == ResponseCode.NO_PERMISSION, (group, topic)
            assert broker.offsets.query_offset(group, topic, 0) == -1 or group == REVIVE_GROUP

    on_a_broker(tmp_path, scenario)


def test_offsets_are_committed_only_for_known_topics_and_their_queues(tmp_path):
    async def scenario(broker):
        assert (await ask(broker, _create("Orders", 4))).code == ResponseCode.SUCCESS
        unknown = await ask(broker, _commit("cg", "Nowhere", 0, 5))
        assert (unknown.code, unknown.remark) == (ResponseCode.TOPIC_NOT_EXIST,
                                                  "Topic Nowhere not exist!")
        beyond = await ask(broker, _commit("cg", "Orders", 4, 5))
        assert beyond.code == ResponseCode.SYSTEM_ERROR
        assert "queueId[4] is illegal" in beyond.remark
        assert (await ask(broker, _commit("cg", "Orders", 3, 5))).code == ResponseCode.SUCCESS
        assert broker.offsets.offsets_of("cg", "Orders") == {3: 5}
        assert broker.offsets.topics_of_group("cg") == {"Orders"}

    on_a_broker(tmp_path, scenario)


def test_offsets_of_a_group_that_does_not_exist_are_refused(tmp_path):
    async def scenario(broker):
        assert (await ask(broker, _create("Orders", 4))).code == ResponseCode.SUCCESS
        answer = await ask(broker, _commit("ghost", "Orders", 0, 5))
        assert (answer.code, answer.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                                "Group ghost not exist!")
        assert broker.offsets.offsets_of("ghost", "Orders") == {}

    on_a_broker(tmp_path, scenario, autoCreateSubscriptionGroup="false")


# -- INVOKE_BROKER_TO_RESET_OFFSET ----------------------------------------------------------------
def _reset(group: str, topic: str, timestamp: int):
    return request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                   {"topic": topic, "group": group, "timestamp": timestamp, "isForce": True})


async def _three_messages(broker) -> None:
    broker.topics.create_in_send_message_method("News", "TBW102", 1, 0)
    producer, _ = connect(broker)
    for opaque in (1, 2, 3):
        producer.data_received(_send("News", b"news", opaque))
    for _ in range(500):
        if broker.store.get_max_offset_in_queue("News", 0) == 3:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the messages were not dispatched")


def test_a_reset_for_a_group_with_no_offsets_changes_nothing(tmp_path):
    # It made offsets up: the group then "consumed" the topic from wherever the reset said.
    async def scenario(broker):
        await _three_messages(broker)
        answer = await ask(broker, _reset("never", "News", -1))
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                                "THe consumer group <never> not exist")
        assert broker.offsets.topics_of_group("never") == set()
        # Offsets on some queues only: refused all the same, nothing moved.
        assert (await ask(broker, _create("Two", 2))).code == ResponseCode.SUCCESS
        broker.offsets.commit_offset("half", "Two", 0, 0)
        answer = await ask(broker, _reset("half", "Two", -1))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert broker.offsets.offsets_of("half", "Two") == {0: 0}

    on_a_broker(tmp_path, scenario)


def test_only_minus_one_resets_to_the_end(tmp_path):
    async def scenario(broker):
        await _three_messages(broker)
        broker.offsets.commit_offset("cg", "News", 0, 1)
        to_end = await ask(broker, _reset("cg", "News", -1))
        assert to_end.code == ResponseCode.SUCCESS
        assert list(parse_mq_table(to_end.body.decode()).values()) == [3]
        assert broker.offsets.query_offset("cg", "News", 0) == 3
        # -2 is a time, before every message: the start.
        before_all = await ask(broker, _reset("cg", "News", -2))
        assert before_all.code == ResponseCode.SUCCESS
        assert broker.offsets.query_offset("cg", "News", 0) == 0

    on_a_broker(tmp_path, scenario)


# -- GET_CONSUME_STATS ------------------------------------------------------------------------------
def test_consume_stats_skip_topics_an_online_group_no_longer_subscribes(tmp_path):
    async def scenario(broker):
        for topic in ("Now", "Before", pop_retry_topic("cg", "Now")):
            broker.topics.create_in_send_message_back_method(topic, 1, 6)
            broker.offsets.commit_offset("cg", topic, 0, 0)

        async def topics() -> set[str]:
            answer = await ask(broker, request(RequestCode.GET_CONSUME_STATS,
                                               {"consumerGroup": "cg"}))
            assert answer.code == ResponseCode.SUCCESS
            return {mq.topic for mq in parse_mq_table(answer.body.decode())}

        assert await topics() == {"Now", "Before", pop_retry_topic("cg", "Now")}  # offline
        consumer, _ = connect(broker)
        consumer.data_received(encode(_heartbeat("c1", "cg", "Now")))
        assert await topics() == {"Now", pop_retry_topic("cg", "Now")}
        asked = await ask(broker, request(RequestCode.GET_CONSUME_STATS,
                                          {"consumerGroup": "cg", "topic": "Before"}))
        assert parse_mq_table(asked.body.decode()) == {}

    on_a_broker(tmp_path, scenario)


# -- relays to one consumer ---------------------------------------------------------------------
def test_a_consumer_that_does_not_answer_a_relay_times_out_with_consume_msg_timeout(
        tmp_path, monkeypatch):
    assert client_processor.RELAY_TIMEOUT_SECONDS == 10  # Broker2Client.callClient's
    monkeypatch.setattr(client_processor, "RELAY_TIMEOUT_SECONDS", 0.2)

    async def scenario(broker):
        consumer, _silent = connect(broker)  # heartbeats, then never answers
        consumer.data_received(encode(_heartbeat("c1", "cg", "T")))
        answer = await ask(broker, request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                           {"consumerGroup": "cg", "clientId": "c1"}))
        assert answer.code == ResponseCode.CONSUME_MSG_TIMEOUT
        assert answer.remark.startswith("consumer <cg> <c1> Timeout")
        gone = await ask(broker, request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                         {"consumerGroup": "cg", "clientId": "c2"}))
        assert (gone.code, gone.remark) == (ResponseCode.SYSTEM_ERROR,
                                            "The Consumer <cg> <c2> not online")

    on_a_broker(tmp_path, scenario)
