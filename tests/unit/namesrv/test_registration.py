"""The name server's processor without a network: registrations (a topic config the routes
cannot take, a broker name claimed in another cluster), orderTopicConf, QUERY_DATA_VERSION.

A topic config the routes cannot take: the rest registers, the broker gets SUCCESS, the log says
so once (the million-request fuzz campaign's seed 7 found this path answering SYSTEM_ERROR with
a traceback)."""

from __future__ import annotations

import json
import logging

from cluster.namesrv.__main__ import NamesrvController
from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from cluster.namesrv.processor import NamesrvProcessor
from cluster.namesrv.route_info import RouteInfoManager
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode


class Peer:
    remote_address = "127.0.0.1:40000"
    peer = ("127.0.0.1", 40000)


def _registration(topics: dict) -> object:
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": topics}}).encode()
    return request(RequestCode.REGISTER_BROKER, {
        "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C",
        "haServerAddr": "127.0.0.1:10912", "brokerId": "0"}, body, version=407)


def test_a_topic_config_left_out_is_said_once_and_the_rest_registers(tmp_path, caplog):
    processor = NamesrvProcessor(RouteInfoManager(), KVConfigManager(str(tmp_path / "kv.json")))
    topics = {
        "Good": {"topicName": "Good", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
        "Bad": {"topicName": "bad topic name!", "readQueueNums": 4, "writeQueueNums": 4},
    }
    with caplog.at_level(logging.WARNING, logger="cluster.namesrv.processor"):
        first = processor.register_broker(Peer(), _registration(topics))
        again = processor.register_broker(Peer(), _registration(topics))
    assert first.code == ResponseCode.SUCCESS, first.remark
    assert again.code == ResponseCode.SUCCESS, again.remark
    said = [r for r in caplog.records if "cannot take" in r.getMessage()]
    assert len(said) == 1  # once per broker and count, not every registration
    assert "Good" in processor.routes.topic_queue_table
    assert "bad topic name!" not in processor.routes.topic_queue_table


def _register(broker_name: str, addr: str, cluster: str = "C", topics: dict | None = None):
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": topics or {
            "Good": {"topicName": "Good", "readQueueNums": 4, "writeQueueNums": 4}}}}).encode()
    return request(RequestCode.REGISTER_BROKER, {
        "brokerName": broker_name, "brokerAddr": addr, "clusterName": cluster,
        "haServerAddr": "h", "brokerId": "0"}, body, version=407)


def test_what_was_said_about_a_broker_is_forgotten_when_it_leaves_the_routes(tmp_path):
    # Wired as the name server wires it (nothing listens before start()).
    controller = NamesrvController(NamesrvConfig(listen_port=0,
                                                 kv_config_path=str(tmp_path / "kv.json")))
    processor = controller.processor
    bad = {"Bad": {"topicName": "bad topic name!"}}
    for i in range(3):
        processor.register_broker(Peer(), _register(f"b{i}", f"127.0.0.1:{i + 1}", topics=bad))
    assert len(processor._skipped_said) == 3
    processor.unregister_broker(Peer(), request(RequestCode.UNREGISTER_BROKER, {
        "brokerName": "b0", "brokerAddr": "127.0.0.1:1", "clusterName": "C", "brokerId": "0"}))
    assert set(processor._skipped_said) == {"b1", "b2"}
    assert controller.routes.scan_not_active_broker(expired_ms=-1000) == ["127.0.0.1:2",
                                                                          "127.0.0.1:3"]
    assert processor._skipped_said == {}


def test_a_broker_name_of_another_cluster_is_refused_with_a_sentence():
    processor = NamesrvProcessor(RouteInfoManager(), KVConfigManager(None))
    assert processor.register_broker(Peer(), _register("b", "127.0.0.1:1", "C1")).code == \
        ResponseCode.SUCCESS
    refused = processor.register_broker(Peer(), _register("b", "10.0.0.9:1", "C2"))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert "registered in cluster C1" in refused.remark
    assert processor.routes.get_all_cluster_info()[1] == {"C1": ["b"]}


def test_order_topic_conf_is_served_only_with_order_message_enable():
    kv = KVConfigManager(None)
    kv.put(ORDER_TOPIC_CONFIG, "Good", "b:4")
    route = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Good"}, version=407)
    processor = NamesrvProcessor(RouteInfoManager(), kv)
    processor.register_broker(Peer(), _register("b", "127.0.0.1:1"))
    assert "orderTopicConf" not in json.loads(processor.get_route_info(Peer(), route).body)
    enabled = NamesrvProcessor(processor.routes, kv, NamesrvConfig(order_message_enable=True))
    assert json.loads(enabled.get_route_info(Peer(), route).body)["orderTopicConf"] == "b:4"


def test_a_data_version_query_that_differs_does_not_keep_the_broker_alive():
    clock_now = [1000.0]
    routes = RouteInfoManager(lambda: clock_now[0])
    processor = NamesrvProcessor(routes, KVConfigManager(None))
    processor.register_broker(Peer(), _register("b", "127.0.0.1:1"))

    def query(version: dict):
        return processor.query_data_version(Peer(), request(RequestCode.QUERY_DATA_VERSION, {
            "brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "C", "brokerId": "0"},
            json.dumps(version).encode()))

    clock_now[0] += 100
    assert query({"counter": 2, "timestamp": 5}).field("changed") == "true"
    clock_now[0] += 21
    assert routes.scan_not_active_broker() == ["127.0.0.1:1"]  # it must register its topics

    processor.register_broker(Peer(), _register("b", "127.0.0.1:1"))
    clock_now[0] += 100
    assert query({"counter": 1, "timestamp": 1}).field("changed") == "false"
    clock_now[0] += 21
    assert routes.scan_not_active_broker() == []
