"""A real name server process: registration, routes in both JSON dialects, expiry, KV config."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from cluster.remoting import fastjson
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.procs import ROOT, running

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def _register_body(topics: dict[str, int], counter: int = 1) -> bytes:
    table = {t: {"order": False, "perm": 6, "readQueueNums": n, "topicFilterType": "SINGLE_TAG",
                 "topicName": t, "topicSysFlag": 0, "writeQueueNums": n} for t, n in topics.items()}
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1}, "topicConfigTable": table}}).encode()


def _register(broker_name, addr, broker_id, ha, topics, version=407):
    return request(RequestCode.REGISTER_BROKER, {
        "brokerName": broker_name, "brokerAddr": addr, "clusterName": "DefaultCluster",
        "haServerAddr": ha, "brokerId": broker_id}, _register_body(topics), version=version)


def test_routes_clusters_and_a_slave_learning_its_master(tmp_path):
    with running("cluster.namesrv", "-p", "0", env={"HOME": str(tmp_path)}) as node:
        async def main():
            master, slave = RemotingClient(), RemotingClient()
            client = RemotingClient()
            try:
                ok = await master.invoke(node.address, _register(
                    "broker-a", "127.0.0.1:10911", 0, "127.0.0.1:10912", {"TopicTest": 4, "TBW102": 8}))
                assert ok.code == ResponseCode.SUCCESS
                assert ok.field("masterAddr") is None
                answer = await slave.invoke(node.address, _register(
                    "broker-a", "127.0.0.1:20911", 1, "127.0.0.1:20912", {"TopicTest": 4}))
                assert answer.field("masterAddr") == "127.0.0.1:10911"
                assert answer.field("haServerAddr") == "127.0.0.1:10912"

                standard = await client.invoke(node.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, version=407))
                route = json.loads(standard.body)  # standard JSON for >= 4.9.4
                [broker] = route["brokerDatas"]
                assert broker["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:20911"}
                assert route["queueDatas"] == [{"brokerName": "broker-a", "perm": 6,
                                                "readQueueNums": 4, "topicSysFlag": 0,
                                                "writeQueueNums": 4}]
                legacy = await client.invoke(node.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, version=317))
                assert b'{0:"127.0.0.1:10911",1:"127.0.0.1:20911"}' in legacy.body
                assert fastjson.loads(legacy.body)["brokerDatas"][0]["brokerName"] == "broker-a"

                missing = await client.invoke(node.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"}))
                assert missing.code == ResponseCode.TOPIC_NOT_EXIST
                assert "Nope" in missing.remark

                info = fastjson.loads((await client.invoke(node.address, request(
                    RequestCode.GET_BROKER_CLUSTER_INFO))).body)
                assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
                topics = json.loads((await client.invoke(node.address, request(
                    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))).body)["topicList"]
                assert topics == ["TBW102", "TopicTest"]
                by_cluster = json.loads((await client.invoke(node.address, request(
                    RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}))).body)
                assert by_cluster["topicList"] == ["TBW102", "TopicTest"]

                # A broker whose connection closes leaves the routes at once.
                await master.close()
                for _ in range(50):
                    route = await client.invoke(node.address, request(
                        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}))
                    addrs = json.loads(route.body)["brokerDatas"][0]["brokerAddrs"]
                    if "0" not in addrs:
                        break
                    await asyncio.sleep(0.05)
                assert addrs == {"1": "127.0.0.1:20911"}

                # Unregister removes the last address and with it the broker and its topics.
                gone = await slave.invoke(node.address, request(RequestCode.UNREGISTER_BROKER, {
                    "brokerName": "broker-a", "brokerAddr": "127.0.0.1:20911",
                    "clusterName": "DefaultCluster", "brokerId": 1}))
                assert gone.code == ResponseCode.SUCCESS
                after = await client.invoke(node.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}))
                assert after.code == ResponseCode.TOPIC_NOT_EXIST
            finally:
                for c in (master, slave, client):
                    await c.close()

        run(main())
        assert node.terminate() == 0


def test_kv_config_and_order_topic_conf(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("orderMessageEnable=true\n")  # orderTopicConf is served only with it
    with running("cluster.namesrv", "-p", "0", "-c", str(conf),
                 env={"HOME": str(tmp_path)}) as node:
        async def main():
            client = RemotingClient()
            try:
                put = await client.invoke(node.address, request(RequestCode.PUT_KV_CONFIG, {
                    "namespace": "ORDER_TOPIC_CONFIG", "key": "Orders", "value": "broker-a:4"}))
                assert put.code == ResponseCode.SUCCESS
                # Answered once on disk.
                stored = json.loads((tmp_path / "namesrv" / "kvConfig.json").read_text())
                assert stored["configTable"]["ORDER_TOPIC_CONFIG"] == {"Orders": "broker-a:4"}
                got = await client.invoke(node.address, request(RequestCode.GET_KV_CONFIG, {
                    "namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"}))
                assert got.field("value") == "broker-a:4"
                await client.invoke(node.address, _register(
                    "broker-a", "127.0.0.1:10911", 0, "127.0.0.1:10912", {"Orders": 4}))
                route = json.loads((await client.invoke(node.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}))).body)
                assert route["orderTopicConf"] == "broker-a:4"
                await client.invoke(node.address, request(RequestCode.DELETE_KV_CONFIG, {
                    "namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"}))
                none = await client.invoke(node.address, request(RequestCode.GET_KV_CONFIG, {
                    "namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"}))
                assert none.code == ResponseCode.QUERY_NOT_FOUND
                bad = await client.invoke(node.address, request(RequestCode.GET_KV_CONFIG, {}))
                assert bad.code == ResponseCode.SYSTEM_ERROR
                assert "namespace" in bad.remark
            finally:
                await client.close()

        run(main())


def test_order_topic_conf_is_not_served_by_default_and_the_kv_table_is_bounded(tmp_path):
    with running("cluster.namesrv", "-p", "0", env={"HOME": str(tmp_path)}) as node:
        async def main():
            client = RemotingClient()
            try:
                put = await client.invoke(node.address, request(RequestCode.PUT_KV_CONFIG, {
                    "namespace": "ORDER_TOPIC_CONFIG", "key": "Orders", "value": "broker-a:4"}))
                assert put.code == ResponseCode.SUCCESS
                ok = await client.invoke(node.address, _register(
                    "broker-a", "127.0.0.1:10911", 0, "127.0.0.1:10912", {"Orders": 4}))
                assert json.loads(ok.body) == {"table": {"Orders": "broker-a:4"}}
                route = json.loads((await client.invoke(node.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}))).body)
                assert "orderTopicConf" not in route  # orderMessageEnable defaults to false

                # 64 KiB values: the namespace's 2 MiB is reached within 32 puts; past it every
                # put is refused with a sentence, and registrations still answer.
                codes = []
                for i in range(40):
                    answer = await client.invoke(node.address, request(
                        RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG",
                                                    "key": f"K{i}", "value": "x" * 65_536}))
                    codes.append(answer.code)
                assert ResponseCode.MESSAGE_ILLEGAL in codes
                assert "the limit is" in answer.remark
                again = await client.invoke(node.address, _register(
                    "broker-a", "127.0.0.1:10911", 0, "127.0.0.1:10912", {"Orders": 4}))
                assert again.code == ResponseCode.SUCCESS
                assert len(again.body) <= 2 * 1024 * 1024 + 64
            finally:
                await client.close()

        run(main())


def test_a_bad_setting_is_a_sentence_naming_the_key(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=ninety\nsomethingUnknown=1\n")
    result = subprocess.run([sys.executable, "-m", "cluster.namesrv", "-c", str(conf)], cwd=ROOT,
                            capture_output=True, text=True, timeout=30,
                            env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"}, check=False)
    assert result.returncode == 2
    assert "listenPort" in result.stderr
    assert "Traceback" not in result.stderr
