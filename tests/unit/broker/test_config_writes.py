"""How often topics.json and subscriptionGroup.json are written: once a request, whatever it
creates, and an admin's change before it is answered."""

from __future__ import annotations

import json

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

        def persist(text, real=real, name=name):
            written[name].append(text)
            return real(text)

        file.persist = persist
    return written


def _on_disk(path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def test_a_heartbeat_naming_many_new_groups_writes_each_file_once(tmp_path):
    # 1,024 new groups took ~9 s on the event loop: a whole-file write and fsync for every
    # group and every retry topic, the file growing each time.
    groups = [f"cg-{n}" for n in range(40)]

    async def scenario(broker):
        written = _count_writes(broker)
        heartbeat = {"clientID": "c1", "consumerDataSet": [
            {"groupName": g, "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}
            for g in groups]}
        answer = await ask(broker, request(RequestCode.HEART_BEAT,
                                           body=json.dumps(heartbeat).encode()))
        assert answer.code == ResponseCode.SUCCESS
        assert (len(written["groups"]), len(written["topics"])) == (1, 1)
        # ... and that one write holds all of them, on disk when the heartbeat is answered.
        on_disk_groups = _on_disk(broker.subscription_groups.file.path)["subscriptionGroupTable"]
        on_disk_topics = _on_disk(broker.topics.file.path)["topicConfigTable"]
        assert set(groups) <= set(on_disk_groups)
        assert {f"%RETRY%{g}" for g in groups} <= set(on_disk_topics)
        # Known groups: nothing to write.
        again = await ask(broker, request(RequestCode.HEART_BEAT,
                                          body=json.dumps(heartbeat).encode()))
        assert again.code == ResponseCode.SUCCESS
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
        written = _count_writes(broker)
        with broker.topics.persist_once(), broker.subscription_groups.persist_once():
            broker.topics.create_in_send_message_back_method("%RETRY%x", 1, 6)
            assert written["topics"] == []
            broker.topics.update(TopicConfig("Admin", 2, 2))
            assert len(written["topics"]) == 1
        assert len(written["topics"]) == 2  # the batch's own write at its end

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
