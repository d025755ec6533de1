"""The broker's registrations with its name servers (cluster/broker/registration.py) and the
text of its topic and group files (cluster/broker/json_config.py): a stream of topic changes
registers at once, then at most every CHANGE_GAP, each registration naming every change made
before it, and an admin's change at once; a send that created its topic is answered once the
topic is registered; the files read back as they were written, one table entry a line."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import types

import pytest

from cluster.broker import json_config, send_processor
from cluster.broker import registration as registration_module
from cluster.broker.config import BrokerConfig, load_broker_config
from cluster.broker.controller import BrokerController
from cluster.broker.json_config import table_text
from cluster.broker.registration import BrokerRegistration
from cluster.broker.topic_config import TopicConfig, TopicConfigManager
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.namesrv.__main__ import NamesrvController
from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.route_info import RouteInfoManager
from cluster.remoting.codes import RequestCode


def _registration(tmp_path, sent: list) -> tuple[BrokerRegistration, TopicConfigManager]:
    config = BrokerConfig(namesrv_addr="127.0.0.1:1")
    topics = TopicConfigManager(str(tmp_path / "topics.json"), config)
    registration = BrokerRegistration(types.SimpleNamespace(config=config, topics=topics))
    topics.on_change.append(registration.register_soon)

    async def register_one(address, fields, body, timeout) -> bool:
        sent.append((time.monotonic(), json.loads(body)))
        return True

    registration._register_one = register_one  # (the name server: what it was sent)
    return registration, topics


def _after_changes(tmp_path, changes) -> tuple[list, float]:
    """What a started registration loop sent while ``changes(topics)`` ran (a coroutine giving
    when its change of interest was made) and for 0.2 s after."""
    sent: list = []

    async def scenario() -> float:
        registration, topics = _registration(tmp_path, sent)
        registration.start(initial_delay=True)
        await asyncio.sleep(0.05)
        began = await changes(topics)
        await asyncio.sleep(0.2)
        await registration.stop()
        return began

    return sent, asyncio.run(scenario())


def _registered(sent: list, number: int) -> set[str]:
    return set(sent[number][1]["topicConfigSerializeWrapper"]["topicConfigTable"])


def test_a_stream_of_new_topics_registers_at_once_then_every_gap(tmp_path, monkeypatch):
    # (what is checked is the order of things, not how fast a loaded machine gets to them:
    # under load a registration comes later, and its gaps grow, never shrink)
    gap = 0.2
    monkeypatch.setattr(registration_module, "CHANGE_GAP", gap)

    async def changes(topics) -> float:
        for i in range(80):  # one new topic every 5 ms, for 0.4 s at least
            topics.create_in_send_message_method(f"Stream{i}", "TBW102", 4)
            await asyncio.sleep(0.005)
        await asyncio.sleep(2 * gap)
        return 0.0

    sent, _ = _after_changes(tmp_path, changes)
    first = _registered(sent, 0)
    assert "Stream0" in first  # the first change: registered at once, while the stream went on
    assert "Stream79" not in first
    assert 2 <= len(sent) <= 6  # not one a topic
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(sent)]
    assert min(gaps) >= gap * 0.9
    assert {f"Stream{i}" for i in range(80)} <= _registered(sent, -1)


def test_a_lone_change_registers_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(registration_module, "CHANGE_GAP", 10.0)

    async def changes(topics) -> float:
        began = time.monotonic()
        topics.create_in_send_message_method("Lone", "TBW102", 4)
        return began

    sent, began = _after_changes(tmp_path, changes)
    assert len(sent) == 1
    assert sent[0][0] - began < 1.0  # (not held for the gap of 10 s)
    assert "Lone" in _registered(sent, 0)


def test_an_admins_change_is_not_held_back_by_the_gap(tmp_path, monkeypatch):
    monkeypatch.setattr(registration_module, "CHANGE_GAP", 10.0)

    async def changes(topics) -> float:
        topics.create_in_send_message_method("Auto", "TBW102", 4)  # registered at once
        await asyncio.sleep(0.05)
        topics.create_in_send_message_method("Auto2", "TBW102", 4)  # held for the gap...
        await asyncio.sleep(0.05)
        began = time.monotonic()
        topics.update(TopicConfig("ByHand", 8, 8))  # ... until an admin's change comes
        return began

    sent, began = _after_changes(tmp_path, changes)
    assert len(sent) == 2
    assert sent[1][0] - began < 1.0  # (not held for the gap of 10 s)
    assert {"Auto2", "ByHand"} <= _registered(sent, 1)


def test_a_table_file_reads_back_as_written_one_entry_a_line():
    wrapper = {"dataVersion": {"counter": 7, "timestamp": 1},
               "topicConfigTable": {f"T{i}": {"topicName": f"T{i}", "perm": 6, "ü": "ß"}
                                    for i in range(3)}}
    text = table_text(wrapper, "topicConfigTable")
    assert json.loads(text) == wrapper == json.loads(json.dumps(wrapper, indent=1))
    lines = text.splitlines()
    assert lines[:3] == ['{', ' "dataVersion": {"counter": 7, "timestamp": 1},',
                         ' "topicConfigTable": {']
    assert len(lines) == 3 + 3 + 2
    empty = {"dataVersion": {"counter": 1}, "subscriptionGroupTable": {}}
    assert json.loads(table_text(empty, "subscriptionGroupTable")) == empty


def test_the_topics_file_is_the_table_text(tmp_path):
    config = BrokerConfig()
    topics = TopicConfigManager(str(tmp_path / "topics.json"), config)
    topics.create_in_send_message_method("Saved", "TBW102", 4)
    assert topics.wait_written(10)  # (written aside)
    written = (tmp_path / "topics.json").read_text(encoding="utf-8")
    assert written == table_text(topics.wrapper_json(), "topicConfigTable")
    again = TopicConfigManager(str(tmp_path / "topics.json"), config)
    again.load()
    assert again.table["Saved"] == topics.table["Saved"]


def test_the_entry_encoder_writes_what_json_dumps_writes():
    values = ["TopicA", "ü\u2028\"\\", {"order": False, "perm": 6, "x": None, "f": 1.5,
                                         "big": 2**63, "list": [1, "a", {"n": True}]}, {}, []]
    for value in values:
        assert json_config._encode(value) == json.dumps(value)
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_config._encode({"a": object()})


@contextlib.asynccontextmanager
async def _slow_name_server(tmp_path, delay: float, flush: str = "ASYNC_FLUSH"):
    """A real name server whose registrations take ``delay`` s once the broker started, the
    broker and a started producer, on loopback: (name server, producer)."""
    namesrv = NamesrvController(NamesrvConfig(listen_port=0,
                                              kv_config_path=str(tmp_path / "kv.json")))
    await namesrv.start()
    config, store_config, _ = load_broker_config({
        "brokerName": "reg-b", "brokerClusterName": "Here", "listenPort": "0",
        "storePathRootDir": str(tmp_path / "store"), "brokerIP1": "127.0.0.1",
        "namesrvAddr": namesrv.server.address, "autoCreateTopicEnable": "true",
        "flushDiskType": flush})
    broker = BrokerController(config, store_config)
    await broker.start()
    producer = Producer("RegGroup", namesrv.server.address)
    try:
        register = namesrv.server.processors[int(RequestCode.REGISTER_BROKER)]

        async def slowly(connection, command):
            await asyncio.sleep(delay)
            return register(connection, command)

        namesrv.server.processors[int(RequestCode.REGISTER_BROKER)] = slowly
        await producer.start()
        yield namesrv, producer
    finally:
        await producer.shutdown()
        await broker.stop()
        await namesrv.stop()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])  # (at once; an answer that waits)
def test_a_send_that_creates_its_topic_is_answered_once_the_topic_is_registered(tmp_path, flush):
    # The name server's registrations slowed down: the producer's send to a new topic returns
    # only when the name server has its route (as RocketMQ's createTopicInSendMessageMethod
    # registers before the send is answered), and a second send to it, the topic known, is not
    # held back.
    delay = 0.4

    async def scenario() -> None:
        async with _slow_name_server(tmp_path, delay, flush) as (namesrv, producer):
            routes = namesrv.routes.topic_queue_table
            began = time.monotonic()
            result = await producer.send(Message("BornInASend", b"first"))
            assert "BornInASend" in routes  # registered before the answer
            assert result.status.name == "SEND_OK"
            assert time.monotonic() - began >= delay * 0.9
            batch = await producer.send_batch([Message("BornInABatch", b"m")] * 3)
            assert "BornInABatch" in routes
            assert batch.status.name == "SEND_OK"
            began = time.monotonic()
            await producer.send(Message("BornInASend", b"second"))
            assert time.monotonic() - began < delay  # an existing topic's send waits for nothing

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_name_server_that_hangs_does_not_hold_the_answer_past_the_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(send_processor, "NEW_TOPIC_WAIT", 0.3)

    async def scenario() -> None:
        async with _slow_name_server(tmp_path, 2.0) as (namesrv, producer):
            began = time.monotonic()
            result = await producer.send(Message("BornSlowly", b"x"))
            waited = time.monotonic() - began
            assert result.status.name == "SEND_OK"
            assert 0.25 <= waited < 1.5  # the wait, not the name server's 2 s
            assert "BornSlowly" not in namesrv.routes.topic_queue_table  # (not yet)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_registration_of_topics_alone_under_way_is_cancelled_by_stop(tmp_path):
    sent: list = []

    async def scenario() -> bool:
        registration, topics = _registration(tmp_path, sent)
        topics.create_in_send_message_method("Late", "TBW102", 4)

        async def slow_one(address, fields, body, timeout) -> bool:
            await asyncio.sleep(0.3)
            sent.append(body)
            return True

        registration._register_one = slow_one
        registration.unregister_all = _nothing  # (no name server to tell)
        underway = registration.register_topics(["Late"])
        await asyncio.sleep(0.05)
        await registration.stop()
        await asyncio.sleep(0.4)
        return underway.cancelled()

    assert asyncio.run(scenario())
    assert sent == []  # nothing registered after the broker left


async def _nothing() -> None:
    return None


def test_a_name_server_that_lost_the_topics_has_them_all_after_a_topic_registered_alone(
        tmp_path):
    # A name server restarted (it knows nothing of the broker) gets a new topic registered
    # alone, then the whole registration that follows: it must take the whole one, though the
    # single topic's registration came with the version the topics had then.
    sent: list = []

    async def scenario() -> None:
        registration, topics = _registration(tmp_path, sent)
        for i in range(3):
            topics.create_in_send_message_method(f"Old{i}", "TBW102", 4)
        await registration.register_all()  # (a name server that then restarts)
        topics.create_in_send_message_method("New", "TBW102", 4)
        await registration.register_topics(["New"])
        await registration.register_all()

    asyncio.run(scenario())
    alone, whole = sent[1][1], sent[2][1]
    assert set(alone["topicConfigSerializeWrapper"]["topicConfigTable"]) == {"New"}
    restarted = RouteInfoManager()
    for body in (alone, whole):
        restarted.register_broker("C", "127.0.0.1:10911", "b", 0, "127.0.0.1:10912",
                                  body["topicConfigSerializeWrapper"])
    assert {"Old0", "Old1", "Old2", "New"} <= set(restarted.topic_queue_table)


def test_topics_created_one_after_another_are_all_taken_by_a_name_server(tmp_path):
    # Each registers alone: a name server takes a registration's topics only when its data
    # version is new to it, so no two may go with the same version.
    sent: list = []

    async def scenario() -> None:
        registration, topics = _registration(tmp_path, sent)
        await registration.register_all()
        topics.create_in_send_message_method("TwinA", "TBW102", 4)
        topics.create_in_send_message_method("TwinB", "TBW102", 4)
        await registration.register_topics(["TwinA"])
        await registration.register_topics(["TwinB"])

    asyncio.run(scenario())
    assert len(sent) == 3
    routes = RouteInfoManager()
    for _, body in sent:
        routes.register_broker("C", "127.0.0.1:10911", "b", 0, "127.0.0.1:10912",
                               body["topicConfigSerializeWrapper"])
    assert {"TwinA", "TwinB"} <= set(routes.topic_queue_table)


def test_topics_asked_for_in_one_loop_turn_go_in_one_registration(tmp_path):
    sent: list = []

    async def scenario() -> None:
        registration, topics = _registration(tmp_path, sent)
        underway = []
        for i in range(5):  # (as five sends of one read, each creating its topic)
            topics.create_in_send_message_method(f"Burst{i}", "TBW102", 4)
            underway.append(registration.register_topics([f"Burst{i}"]))
        await asyncio.gather(*underway)
        registration.register_topics(["Burst0"])  # (the next turn's: a registration of its own)
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert len(sent) == 2
    assert _registered(sent, 0) == {f"Burst{i}" for i in range(5)}
    assert _registered(sent, 1) == {"Burst0"}

