"""Topic names that become folder names (common/platform/file_names.py): what Windows refuses,
and topics that differ only in case where the store's file system ignores it (macOS, Windows)."""

from __future__ import annotations

import sys

import pytest

from cluster import topic_validator
from cluster.broker.config import BrokerConfig
from cluster.broker.topic_config import TopicConfig, TopicConfigManager
from common.platform import file_names


@pytest.fixture
def as_on_windows(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    topic_validator._name_problem.cache_clear()  # (answers are cached by name)
    yield
    topic_validator._name_problem.cache_clear()


def test_windows_refuses_names_it_cannot_give_a_folder(as_on_windows):
    assert topic_validator.validate_topic_name("Orders") is None
    for name in ("a|b", "CON", "nul", "COM1", "LPT9"):
        problem = topic_validator.validate_topic_name(name)
        assert problem is not None
        assert "cannot be used on this platform" in problem
    assert topic_validator.validate_group_name("AUX") is not None


def test_other_platforms_keep_rocketmqs_alphabet():
    topic_validator._name_problem.cache_clear()
    assert topic_validator.validate_topic_name("a|b") is None
    assert file_names.name_problem("CON") is None


def test_this_file_system_is_asked_whether_it_ignores_case(tmp_path):
    assert file_names.ignores_case(str(tmp_path)) is False  # Linux's ext4, as here
    assert list(tmp_path.iterdir()) == []  # the probe is gone


def test_a_topic_differing_only_in_case_is_refused_where_the_file_system_ignores_it(tmp_path):
    config = BrokerConfig(broker_name="broker-a")
    topics = TopicConfigManager(str(tmp_path / "topics.json"), config)
    topics.update(TopicConfig("Orders", 4, 4))
    assert topics.case_clash("orders") is None  # a file system that tells them apart
    assert topics.create_in_send_message_method("orders", "TBW102", 4) is not None
    topics.delete("orders")
    topics.names_ignore_case = True
    assert "differs from the topic Orders only in case" in topics.case_clash("orders")
    assert topics.case_clash("Orders") is None  # itself
    assert topics.case_clash("Payments") is None
    assert topics.create_in_send_message_method("ORDERS", "TBW102", 4) is None  # not auto-created
    assert topics.select("ORDERS") is None
