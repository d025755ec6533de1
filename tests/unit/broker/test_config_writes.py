"""How often and where topics.json and subscriptionGroup.json are written: once a request,
whatever it creates, aside from the event loop; an admin's change before it is answered."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from cluster.broker import json_config, send_processor
from cluster.broker.json_config import PersistBatch
from cluster.broker.topic_config import TopicConfig
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.unit.broker.broker_harness import ask, on_a_broker


def _count_writes(broker) -> dict[str, list[str]]:
    """The texts each of the two files is given from now on, by file name."""
    written: dict[str, list[str]] = {"topics": [], "groups": []}
    for name, file in (("topics", broker.topics.file), ("groups", broker.subscription_groups.file)):
        real = file.persist

        def persist(text, sequence=None, real=real, name=name):
            written[name].append(text)
            return real(text, sequence)

        file.persist = persist
    return written


async def _written_aside(broker) -> None:
    """Until the writes asked for aside so far are done (the writers' threads finish them)."""
    assert await asyncio.to_thread(broker.topics.wait_written, 10)
    assert await asyncio.to_thread(broker.subscription_groups.wait_written, 10)


def _send_to_new_topic(broker):
    """A send to the topic Fresh, which it creates (from TBW102)."""
    return ask(broker, request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "P", "topic": "Fresh", "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
        "properties": "", "reconsumeTimes": 0}, body=b"hello"))


def _on_disk(path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def test_a_heartbeat_naming_many_new_groups_writes_each_file_once(tmp_path):
    # 1,024 new groups took ~9 s on the event loop: a whole-file write and fsync for every
    # group and every retry topic, the file growing each time.
    groups = [f"cg-{n}" for n in range(40)]

    async def scenario(broker):
        await _written_aside(broker)  # (the broker's own, at its start)
        written = _count_writes(broker)
        heartbeat = {"clientID": "c1", "consumerDataSet": [
            {"groupName": g, "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}
            for g in groups]}
        answer = await ask(broker, request(RequestCode.HEART_BEAT,
                                           body=json.dumps(heartbeat).encode()))
        assert answer.code == ResponseCode.SUCCESS
        await _written_aside(broker)
        assert (len(written["groups"]), len(written["topics"])) == (1, 1)
        # ... and that one write holds all of them.
        on_disk_groups = _on_disk(broker.subscription_groups.file.path)["subscriptionGroupTable"]
        on_disk_topics = _on_disk(broker.topics.file.path)["topicConfigTable"]
        assert set(groups) <= set(on_disk_groups)
        assert {f"%RETRY%{g}" for g in groups} <= set(on_disk_topics)
        # Known groups: nothing to write.
        again = await ask(broker, request(RequestCode.HEART_BEAT,
                                          body=json.dumps(heartbeat).encode()))
        assert again.code == ResponseCode.SUCCESS
        await _written_aside(broker)
        assert (len(written["groups"]), len(written["topics"])) == (1, 1)

    on_a_broker(tmp_path, scenario)


def test_admin_changes_are_on_disk_when_answered(tmp_path):
    async def scenario(broker):
        created = await ask(broker, request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "Orders", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}))
        assert created.code == ResponseCode.SUCCESS
        assert "Orders" in _on_disk(broker.topics.file.path)["topicConfigTable"]
        group = await ask(broker, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                          body=b'{"groupName":"billing"}'))
        assert group.code == ResponseCode.SUCCESS
        path = broker.subscription_groups.file.path
        assert "billing" in _on_disk(path)["subscriptionGroupTable"]
        deleted = await ask(broker, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Orders"}))
        assert deleted.code == ResponseCode.SUCCESS
        assert "Orders" not in _on_disk(broker.topics.file.path)["topicConfigTable"]

    on_a_broker(tmp_path, scenario)


def test_an_admin_change_inside_a_batch_is_written_at_once(tmp_path):
    # The batch defers only auto-creation: an admin's update must not wait for it to end.
    async def scenario(broker):
        await _written_aside(broker)  # (the broker's own, at its start)
        written = _count_writes(broker)
        with broker.topics.persist_once(), broker.subscription_groups.persist_once():
            broker.topics.create_in_send_message_back_method("%RETRY%x", 1, 6)
            await _written_aside(broker)
            assert written["topics"] == []
            broker.topics.update(TopicConfig("Admin", 2, 2))
            assert await asyncio.wrap_future(broker.topics.written_aside())  # (the batch open)
            assert len(written["topics"]) == 1
        await _written_aside(broker)
        assert len(written["topics"]) == 2  # the batch's own write, asked for at its end

    on_a_broker(tmp_path, scenario)


def test_a_batch_writes_once_at_its_outermost_end_and_only_when_something_changed():
    writes = []
    batch = PersistBatch(lambda: writes.append(1))
    with batch:
        pass
    assert writes == []
    with batch:
        batch.persist()
        with batch:
            batch.persist()
        assert writes == []
        batch.persist()
    assert writes == [1]
    batch.persist()  # outside a batch: at once
    assert writes == [1, 1]


class _SlowDisk:
    """Config files whose write (its fsync) takes until ``release``, as a disk busy with other
    writers made it take seconds; ``finished`` tells whether one got past it."""

    def __init__(self, monkeypatch) -> None:
        self.released = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()
        real = json_config.write_config_file

        def slow_write(path, text):
            self.started.set()
            self.released.wait(10)  # (the old code waited here on the event loop itself)
            real(path, text)
            self.finished.set()

        monkeypatch.setattr(json_config, "write_config_file", slow_write)

    def release(self) -> None:
        self.released.set()


def test_a_heartbeat_creating_a_group_is_answered_while_its_write_waits_for_the_disk(
        tmp_path, monkeypatch):
    # The official C++ client waits 3 s for a heartbeat's answer, then closes its connection;
    # the offset queries of its rebalance failed with it, and it started the queue at its end.
    heartbeat = {"clientID": "c1", "consumerDataSet": [
        {"groupName": "CID-slow", "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}]}

    async def scenario(broker):
        disk = _SlowDisk(monkeypatch)
        try:
            answer = await ask(broker, request(RequestCode.HEART_BEAT,
                                               body=json.dumps(heartbeat).encode()))
            assert answer.code == ResponseCode.SUCCESS
            offset = await ask(broker, request(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": "CID-slow", "topic": "T", "queueId": 0}))
            assert offset.code in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
            assert await asyncio.to_thread(disk.started.wait, 10)
            assert not disk.finished.is_set()  # both answered while the write waited
        finally:
            disk.release()
        await _written_aside(broker)
        groups = _on_disk(broker.subscription_groups.file.path)["subscriptionGroupTable"]
        assert "CID-slow" in groups
        assert "%RETRY%CID-slow" in _on_disk(broker.topics.file.path)["topicConfigTable"]

    on_a_broker(tmp_path, scenario)


def test_a_send_creating_its_topic_waits_for_its_write_at_most_the_new_topic_wait(
        tmp_path, monkeypatch):
    monkeypatch.setattr(send_processor, "NEW_TOPIC_WAIT", 0.3)

    async def scenario(broker):
        disk = _SlowDisk(monkeypatch)
        try:
            sent = await _send_to_new_topic(broker)
            assert sent.code == ResponseCode.SUCCESS
            assert not disk.finished.is_set()  # answered after the wait, the write still going
        finally:
            disk.release()
        await _written_aside(broker)
        assert "Fresh" in _on_disk(broker.topics.file.path)["topicConfigTable"]

    on_a_broker(tmp_path, scenario)


def test_a_send_creating_its_topic_is_answered_with_the_topic_on_disk_in_one_write(
        tmp_path, monkeypatch):
    monkeypatch.setattr(send_processor, "NEW_TOPIC_WAIT", 30.0)

    async def scenario(broker):
        await _written_aside(broker)  # (the broker's own, at its start)
        written = _count_writes(broker)
        real = json_config.write_config_file

        def slow_write(path, text):  # (the write under way when the send waits for it)
            time.sleep(0.2)
            real(path, text)

        monkeypatch.setattr(json_config, "write_config_file", slow_write)
        sent = await _send_to_new_topic(broker)
        assert sent.code == ResponseCode.SUCCESS
        assert "Fresh" in _on_disk(broker.topics.file.path)["topicConfigTable"]
        await _written_aside(broker)
        assert len(written["topics"]) == 1  # the write the creation asked for, not a second

    on_a_broker(tmp_path, scenario)


@pytest.mark.parametrize("manager", ["topics", "subscription_groups"])
def test_a_slaves_copy_of_its_masters_configs_is_written_aside(tmp_path, monkeypatch, manager):
    table_key = {"topics": "topicConfigTable", "subscription_groups": "subscriptionGroupTable"}
    entry = ({"topicName": "Copied", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
             if manager == "topics" else {"groupName": "Copied"})

    async def scenario(broker):
        disk = _SlowDisk(monkeypatch)
        try:
            changed = getattr(broker, manager).replace_from_master(
                {"dataVersion": {"counter": 99, "timestamp": 1}, table_key[manager]: {
                    "Copied": entry}})
            assert changed
            assert not disk.finished.is_set()
        finally:
            disk.release()
        await _written_aside(broker)
        path = getattr(broker, manager).file.path
        assert "Copied" in _on_disk(path)[table_key[manager]]

    on_a_broker(tmp_path, scenario)


def test_admin_changes_are_answered_once_written_while_the_others_are_served(
        tmp_path, monkeypatch):
    async def scenario(broker):
        disk = _SlowDisk(monkeypatch)
        try:
            created = asyncio.ensure_future(ask(broker, request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": "Orders", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})))
            assert await asyncio.to_thread(disk.started.wait, 10)
            other = await ask(broker, request(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert other.code == ResponseCode.SUCCESS  # served while the write waits
            assert not created.done()  # the admin's answer waits for its write
        finally:
            disk.release()
        assert (await created).code == ResponseCode.SUCCESS
        assert disk.finished.is_set()
        assert "Orders" in _on_disk(broker.topics.file.path)["topicConfigTable"]

    on_a_broker(tmp_path, scenario)
