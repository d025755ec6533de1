"""Topic names that become folder names (common/platform/file_names.py): what Windows refuses,
and topics that differ only in case where the store's file system ignores it (macOS, Windows).
Only the broker's store is concerned: the name server and clients keep RocketMQ's alphabet."""

from __future__ import annotations

import sys

import pytest

from cluster import topic_validator
from cluster.broker.config import BrokerConfig
from cluster.broker.topic_config import TopicConfig, TopicConfigManager
from common.platform import file_names


@pytest.fixture
def topics(tmp_path) -> TopicConfigManager:
    return TopicConfigManager(str(tmp_path / "topics.json"), BrokerConfig(broker_name="broker-a"))


def test_a_windows_store_refuses_names_it_cannot_give_a_folder(topics, monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    assert topics.folder_problem("Orders") is None
    for name in ("a|b", "CON", "nul", "COM1", "LPT9"):
        assert "cannot be stored on this platform" in topics.folder_problem(name)
    topic_validator._name_problem.cache_clear()
    assert topic_validator.validate_topic_name("a|b") is None  # RocketMQ's alphabet, elsewhere


@pytest.mark.skipif(sys.platform == "win32", reason="the names Windows forbids")
def test_other_platforms_store_rocketmqs_whole_alphabet(topics):
    assert topics.folder_problem("a|b") is None
    assert file_names.name_problem("CON") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's file systems respect case")
def test_this_file_system_is_asked_whether_it_ignores_case(tmp_path):
    assert file_names.ignores_case(str(tmp_path)) is False
    assert list(tmp_path.iterdir()) == []  # the probe is gone


def test_a_topic_differing_only_in_case_is_refused_where_the_file_system_ignores_it(topics):
    topics.update(TopicConfig("Orders", 4, 4))
    assert topics.folder_problem("orders") is None  # a file system that tells them apart
    assert topics.create_in_send_message_method("orders", "TBW102", 4) is not None
    topics.delete("orders")
    topics.names_ignore_case = True
    assert "differs from the topic Orders only in case" in topics.folder_problem("orders")
    assert topics.folder_problem("Orders") is None  # itself
    assert topics.folder_problem("Payments") is None
