"""REGISTER_BROKER with a topic config the routes cannot take: the rest registers, the broker
gets SUCCESS, the log says so once (the million-request fuzz campaign's seed 7 found this path
answering SYSTEM_ERROR with a traceback)."""

from __future__ import annotations

import json
import logging

from cluster.namesrv.kv_config import KVConfigManager
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
