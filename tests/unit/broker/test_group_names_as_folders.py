"""Consumer group names that become folder names: a group's retry and dead-letter topics
(``%RETRY%<group>``, ``%DLQ%<group>``) are ConsumeQueue folders. A group the store could not
give them (Windows' forbidden characters; a name differing from another group's only in case
where the file system ignores case) is refused with the reason, and nothing is created."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from cluster.broker.config import BrokerConfig
from cluster.broker.subscription_group import SubscriptionGroupManager
from cluster.broker.topic_config import TopicConfigManager
from cluster.client.pull import pull_request
from cluster.remoting.codec import encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.unit.broker.test_pull_answers import _connection, _on_a_broker, _send, _until
from tests.unit.broker.test_send_lane import _answers


@pytest.fixture
def groups(tmp_path) -> SubscriptionGroupManager:
    return SubscriptionGroupManager(str(tmp_path / "subscriptionGroup.json"), auto_create=True)


def test_a_windows_store_creates_no_group_whose_retry_topic_it_cannot_hold(groups, monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    assert groups.find("a|b") is None
    assert "a|b" not in groups.table
    assert "cannot be stored on this platform: its retry topic" in groups.folder_problem("a|b")
    assert groups.find("Orders") is not None
    assert groups.folder_problem("Orders") is None


@pytest.mark.skipif(sys.platform == "win32", reason="the names Windows forbids")
def test_other_platforms_take_rocketmqs_whole_alphabet_for_groups(groups):
    assert groups.find("a|b") is not None


def test_a_group_differing_only_in_case_is_refused_where_the_file_system_ignores_it(groups):
    assert groups.find("GroupA") is not None
    assert groups.find("groupa") is not None  # a file system that tells them apart
    groups.delete("groupa")
    groups.names_ignore_case = True
    assert groups.find("groupa") is None
    assert "groupa" not in groups.table
    assert "differs from the group GroupA only in case" in groups.folder_problem("groupa")
    assert groups.find("GroupA") is not None  # itself
    assert groups.find("GroupB") is not None
    groups.names_ignore_case = False
    assert groups.find("groupb") is not None  # (made where case counts) …
    groups.names_ignore_case = True
    assert groups.folder_problem("groupb") is None  # … and taken as it is where it does not


def test_a_retry_topic_whose_folder_another_topic_holds_is_not_created(tmp_path):
    topics = TopicConfigManager(str(tmp_path / "topics.json"), BrokerConfig(broker_name="b"))
    topics.names_ignore_case = True
    assert topics.create_in_send_message_back_method("%RETRY%Readers", 1, 6) is not None
    assert topics.create_in_send_message_back_method("%RETRY%readers", 1, 6) is None
    assert "%RETRY%readers" not in topics.table
    assert topics.create_in_send_message_back_method("%RETRY%Readers", 1, 6) is not None  # itself
    # A group is refused when a topic it needs is another's folder, whoever came first.
    groups = SubscriptionGroupManager(str(tmp_path / "groups.json"), auto_create=True)
    groups.names_ignore_case = True
    groups.topic_folder_problem = topics.folder_problem
    assert groups.find("readers") is None
    assert "cannot have its topic %RETRY%readers" in groups.folder_problem("readers")


def _pull_by(group: str, opaque: int) -> bytes:
    return encode(replace(pull_request(group, "News", 0, 0, 32), opaque=opaque))


def test_a_broker_refuses_a_case_twin_group_with_the_reason(tmp_path):
    async def scenario(broker):
        broker.subscription_groups.names_ignore_case = True
        broker.topics.names_ignore_case = True
        consumer, answers = _connection(broker)
        consumer.data_received(_pull_by("Readers", 1))
        consumer.data_received(_pull_by("readers", 2))
        twin = json.dumps({"groupName": "READERS"}).encode()
        consumer.data_received(encode(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                              twin, opaque=3)))
        # A dead-letter topic made by hand in the folder a group's would need.
        consumer.data_received(encode(request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "%DLQ%readers", "defaultTopic": "TBW102", "readQueueNums": 1,
            "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG"}, opaque=6)))
        # A consumer's own send of a message back, to its twin's retry topic.
        consumer.data_received(_send("%RETRY%Readers", b"again", 4))
        consumer.data_received(_send("%RETRY%readers", b"again", 5))
        assert await _until(lambda: len(_answers(b"".join(answers.writes))) == 6, 5)
        said = {opaque: (code, remark) for code, opaque, remark, _ in
                _answers(b"".join(answers.writes))}
        assert said[1][0] != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert said[2] == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                           "the group readers differs from the group Readers only in case, and "
                           "this store's file system would give their retry topics one folder")
        assert said[3][0] == ResponseCode.SYSTEM_ERROR
        assert "only in case" in said[3][1]
        assert said[4][0] == ResponseCode.SUCCESS
        assert said[5][0] == ResponseCode.TOPIC_NOT_EXIST
        assert "only in case" in said[5][1]
        assert said[6][0] == ResponseCode.SYSTEM_ERROR
        assert "differs from the group Readers only in case" in said[6][1]
        assert "%DLQ%readers" not in broker.topics.table
        assert set(broker.subscription_groups.table) & {"readers", "READERS"} == set()
        assert "%RETRY%readers" not in broker.topics.table

    _on_a_broker(tmp_path, scenario)


def test_a_send_to_a_case_twin_groups_retry_topic_is_refused_before_either_has_one(tmp_path):
    # The Java consumer sends a message back to %RETRY%<group> itself when the broker refuses
    # CONSUMER_SEND_MSG_BACK: that send must not take the folder of a group made earlier.
    async def scenario(broker):
        broker.subscription_groups.names_ignore_case = True
        broker.topics.names_ignore_case = True
        admin, answers = _connection(broker)
        made = json.dumps({"groupName": "Readers"}).encode()
        admin.data_received(encode(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                           made, opaque=1)))
        assert await _until(lambda: answers.writes, 5)  # (the admin command answers in a task)
        admin.data_received(_send("%RETRY%readers", b"again", 2))
        assert await _until(lambda: len(_answers(b"".join(answers.writes))) == 2, 5)
        said = {opaque: (code, remark) for code, opaque, remark, _ in
                _answers(b"".join(answers.writes))}
        assert said[1][0] == ResponseCode.SUCCESS, said[1]
        assert said[2][0] == ResponseCode.TOPIC_NOT_EXIST
        assert "differs from the group Readers only in case" in said[2][1]
        assert "%RETRY%readers" not in broker.topics.table

    _on_a_broker(tmp_path, scenario)


def test_a_windows_broker_refuses_a_send_to_a_retry_topic_it_cannot_hold(tmp_path, monkeypatch):
    async def scenario(broker):
        producer, answers = _connection(broker)
        with monkeypatch.context() as windows:  # (the broker stops as on Linux)
            windows.setattr(sys, "platform", "win32")
            producer.data_received(_send("%RETRY%a|b", b"again", 1))
            assert await _until(lambda: answers.writes, 5)
        [(code, _, remark, _)] = _answers(b"".join(answers.writes))
        assert code == ResponseCode.TOPIC_NOT_EXIST
        assert "cannot be stored on this platform" in remark
        assert "%RETRY%a|b" not in broker.topics.table

    _on_a_broker(tmp_path, scenario)
