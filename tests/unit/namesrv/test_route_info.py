"""Route tables without a network: expiry, master/slave switches, fastjson and properties parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.namesrv.errors import BrokerNameConflictError
from cluster.namesrv.route_info import RouteInfoManager
from cluster.properties import parse_properties
from cluster.remoting import fastjson

WRAPPER = {"dataVersion": {"counter": 1, "timestamp": 1},
           "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2,
                                      "perm": 6}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_broker_silent_for_120_seconds_expires():
    clock = Clock()
    routes = RouteInfoManager(clock)
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "127.0.0.1:2", WRAPPER)
    clock.now += 119
    assert routes.scan_not_active_broker() == []
    clock.now += 2
    assert routes.scan_not_active_broker() == ["127.0.0.1:1"]
    assert routes.pickup_topic_route_data("T") is None
    assert routes.get_all_cluster_info() == ({}, {})


def test_topics_come_only_from_the_master_registration():
    routes = RouteInfoManager()
    slave_only = dict(WRAPPER, topicConfigTable={"S": {"topicName": "S"}})
    routes.register_broker("C", "127.0.0.1:3", "b", 1, "127.0.0.1:4", slave_only)
    assert routes.get_all_topic_list() == []
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "127.0.0.1:2", WRAPPER)
    assert routes.get_all_topic_list() == ["T"]


def test_the_same_address_under_a_new_id_replaces_the_old_id():
    routes = RouteInfoManager()
    routes.register_broker("C", "127.0.0.1:3", "b", 1, "h", WRAPPER)
    routes.register_broker("C", "127.0.0.1:3", "b", 0, "h", WRAPPER)  # the slave became master
    [broker] = routes.pickup_topic_route_data("T")["brokerDatas"]
    assert broker.broker_addrs == {0: "127.0.0.1:3"}


def test_wipe_and_restore_write_permission():
    routes = RouteInfoManager()
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    assert routes.change_write_perm_of_broker("b", add=False) == 1
    assert routes.pickup_topic_route_data("T")["queueDatas"][0].perm == 4
    routes.change_write_perm_of_broker("b", add=True)
    assert routes.pickup_topic_route_data("T")["queueDatas"][0].perm == 6


def test_restoring_write_permission_sets_read_and_write_as_rocketmq_does():
    routes = RouteInfoManager()
    unreadable = dict(WRAPPER, topicConfigTable={"T": dict(WRAPPER["topicConfigTable"]["T"],
                                                           perm=0)})
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "h", unreadable)
    assert routes.change_write_perm_of_broker("b", add=True) == 1
    assert routes.pickup_topic_route_data("T")["queueDatas"][0].perm == 6  # not 0 | 2


def test_an_unregister_that_names_the_address_under_a_wrong_name_changes_nothing():
    clock = Clock()
    routes = RouteInfoManager(clock)
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    routes.unregister_broker("C", "127.0.0.1:1", "not-b", 0)
    routes.unregister_broker("C", "127.0.0.1:1", "b", 1)  # the right name, a wrong id
    assert "127.0.0.1:1" in routes.broker_live_table
    # Still alive, so still expiring: it leaves once silent, as any broker does.
    clock.now += 121
    assert routes.scan_not_active_broker() == ["127.0.0.1:1"]
    assert routes.pickup_topic_route_data("T") is None


def test_an_unregister_names_the_cluster_it_pleases_but_the_broker_leaves_its_own():
    routes = RouteInfoManager()
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    routes.unregister_broker("Other", "127.0.0.1:1", "b", 0)
    assert routes.get_all_cluster_info() == ({}, {})
    assert routes.broker_live_table == {}


def test_a_broker_registering_under_a_new_cluster_name_moves_there():
    routes = RouteInfoManager()
    routes.register_broker("C1", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    routes.register_broker("C2", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    brokers, clusters = routes.get_all_cluster_info()
    assert clusters == {"C2": ["b"]}
    assert brokers["b"].cluster == "C2"
    routes.delete_topic("T", "C1")  # the cluster it left no longer reaches its routes
    assert routes.pickup_topic_route_data("T") is not None
    routes.delete_topic("T", "C2")
    assert routes.pickup_topic_route_data("T") is None


def test_another_address_cannot_claim_a_broker_name_in_another_cluster():
    routes = RouteInfoManager()
    routes.register_broker("C1", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    with pytest.raises(BrokerNameConflictError, match=r"registered in cluster C1 by 127\.0\.0\.1:1"):
        routes.register_broker("C2", "10.0.0.9:1", "b", 1, "h", WRAPPER)
    brokers, clusters = routes.get_all_cluster_info()
    assert clusters == {"C1": ["b"]}
    assert brokers["b"].broker_addrs == {0: "127.0.0.1:1"}
    assert "10.0.0.9:1" not in routes.broker_live_table
    routes.delete_topic("T", "C2")
    assert routes.pickup_topic_route_data("T") is not None
    # Once the first broker has left, the name is free for the other cluster.
    routes.unregister_broker("C1", "127.0.0.1:1", "b", 0)
    routes.register_broker("C2", "10.0.0.9:1", "b", 0, "h", WRAPPER)
    assert routes.get_all_cluster_info()[1] == {"C2": ["b"]}


def test_a_data_version_query_keeps_a_broker_alive_only_when_the_versions_match():
    clock = Clock()
    routes = RouteInfoManager(clock)
    routes.register_broker("C", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    clock.now += 100
    assert routes.query_data_version("127.0.0.1:1", {"counter": 2, "timestamp": 1}) == (
        True, {"counter": 1, "timestamp": 1})
    assert routes.query_data_version("127.0.0.1:1", None)[0] is True
    clock.now += 21  # 121 s since it registered: the differing queries kept nothing alive
    assert routes.scan_not_active_broker() == ["127.0.0.1:1"]

    routes.register_broker("C", "127.0.0.1:1", "b", 0, "h", WRAPPER)
    clock.now += 100
    assert routes.query_data_version("127.0.0.1:1", {"counter": 1, "timestamp": 1})[0] is False
    clock.now += 21
    assert routes.scan_not_active_broker() == []
    assert routes.query_data_version("127.0.0.1:9", {}) == (True, {})


def test_fastjson_unquoted_integer_keys_are_read_and_strings_left_alone():
    text = '{"brokerAddrs":{0:"10.0.0.1:10911", 1 :"a,2:b"},"offsetTable":{"T@g":{0:250,-1:3}}}'
    assert fastjson.loads(text) == {"brokerAddrs": {"0": "10.0.0.1:10911", "1": "a,2:b"},
                                    "offsetTable": {"T@g": {"0": 250, "-1": 3}}}


@given(st.dictionaries(st.integers(-5, 10**6), st.text(max_size=20), max_size=5))
def test_fastjson_legacy_dump_reads_back(table):
    assert fastjson.loads(fastjson.dumps_legacy({"m": table})) == {
        "m": {str(k): v for k, v in table.items()}}


def test_java_properties_syntax():
    text = "# comment\n! also\nbrokerName = broker-a\nbrokerId:1\ndeleteWhen 04\n" \
           "long = a \\\n   b\nesc=tab\\there\\u0041\nempty=\n"
    assert parse_properties(text) == {"brokerName": "broker-a", "brokerId": "1", "deleteWhen": "04",
                                      "long": "a b", "esc": "tab\thereA", "empty": ""}
