"""Route tables without a network: expiry, master/slave switches, fastjson and properties parsing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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
