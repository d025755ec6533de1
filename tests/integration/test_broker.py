"""A real name server and broker on loopback, driven over the protocol as any client would."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from cluster.remoting import fastjson
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message import properties_to_string
from storage.record import iter_records
from tests.integration.procs import running

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def broker_conf(tmp_path, namesrv: str, name: str = "broker-a", **extra) -> str:
    lines = {"brokerName": name, "brokerClusterName": "DefaultCluster", "listenPort": "0",
             "namesrvAddr": namesrv, "storePathRootDir": str(tmp_path / name),
             "mapedFileSizeCommitLog": str(1 << 20), "flushDiskType": "ASYNC_FLUSH"}
    lines.update(extra)
    path = tmp_path / f"{name}.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return str(path)


def send_v2(topic, body, queue_id=-1, tags=None, keys=None, group="pg"):
    props = {"WAIT": "true"}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    return request(RequestCode.SEND_MESSAGE_V2, {
        "a": group, "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0,
        "g": int(time.time() * 1000), "h": 0, "i": properties_to_string(props), "j": 0,
        "k": False, "m": False}, body)


def pull(topic, queue_id, offset, group="cg", suspend_ms=0, max_nums=32):
    return request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_nums, "sysFlag": 0x2 | 0x4 if suspend_ms else 0x4, "commitOffset": 0,
        "suspendTimeoutMillis": suspend_ms, "subscription": "*", "subVersion": 0,
        "expressionType": "TAG"})


async def wait_for_route(client, namesrv, topic, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = await client.invoke(namesrv, request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                      {"topic": topic}))
        if answer.code == ResponseCode.SUCCESS:
            return json.loads(answer.body)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no route for {topic}")


def test_send_pull_query_offsets_and_admin_against_real_processes(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as namesrv:
        conf = broker_conf(tmp_path, namesrv.address)
        with running("cluster.broker", "-c", conf, env=env) as broker:
            async def main():
                client = RemotingClient()
                try:
                    # The TBW102 route exists because the broker allows auto-creation.
                    await wait_for_route(client, namesrv.address, "TBW102")
                    sent = await client.invoke(broker.address, send_v2(
                        "Orders", b"first", queue_id=0, tags="TagA", keys="order-1"))
                    assert sent.code == ResponseCode.SUCCESS, sent.remark
                    assert sent.field("queueId") == "0"
                    assert sent.field("queueOffset") == "0"
                    msg_id = sent.field("msgId")
                    assert len(msg_id) == 32
                    route = await wait_for_route(client, namesrv.address, "Orders")
                    assert route["queueDatas"][0]["writeQueueNums"] == 4

                    # Dispatch runs behind the put: a long poll waits for it instead of racing it.
                    got = await client.invoke(broker.address, pull("Orders", 0, 0, suspend_ms=5000))
                    assert got.code == ResponseCode.SUCCESS
                    [record] = iter_records(got.body, check_crc=True)
                    assert (record.body, record.tags, record.keys) == (b"first", "TagA", "order-1")
                    assert record.msg_id == msg_id
                    assert record.properties["CLUSTER"] == "DefaultCluster"
                    assert record.uniq_key  # the broker made one: the client sent none
                    assert got.field("nextBeginOffset") == "1"
                    assert (got.field("minOffset"), got.field("maxOffset")) == ("0", "1")

                    # Nothing new: PULL_NOT_FOUND at once without the suspend flag...
                    empty = await client.invoke(broker.address, pull("Orders", 0, 1))
                    assert empty.code == ResponseCode.PULL_NOT_FOUND
                    assert empty.field("nextBeginOffset") == "1"
                    # ...and with it, the pull waits and answers as soon as a message lands.
                    started = time.monotonic()
                    held = asyncio.ensure_future(client.invoke(
                        broker.address, pull("Orders", 0, 1, suspend_ms=15_000), timeout=30))
                    await asyncio.sleep(0.3)
                    assert not held.done()
                    await client.invoke(broker.address, send_v2("Orders", b"second", queue_id=0))
                    woke = await held
                    assert woke.code == ResponseCode.SUCCESS
                    assert time.monotonic() - started < 5
                    assert [r.body for r in iter_records(woke.body)] == [b"second"]
                    timed_out = await client.invoke(broker.address,
                                                    pull("Orders", 0, 2, suspend_ms=500), timeout=10)
                    assert timed_out.code == ResponseCode.PULL_NOT_FOUND
                    moved = await client.invoke(broker.address, pull("Orders", 0, 50))
                    assert moved.code == ResponseCode.PULL_OFFSET_MOVED

                    # Query by key and view by offset msgId.
                    found = await client.invoke(broker.address, request(RequestCode.QUERY_MESSAGE, {
                        "topic": "Orders", "key": "order-1", "maxNum": 32, "beginTimestamp": 0,
                        "endTimestamp": int(time.time() * 1000) + 60_000}))
                    assert found.code == ResponseCode.SUCCESS
                    assert [r.body for r in iter_records(found.body)] == [b"first"]
                    offset = int(msg_id[16:], 16)
                    viewed = await client.invoke(broker.address, request(
                        RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
                    assert next(iter_records(viewed.body)).body == b"first"

                    # Consumer offsets: a brand-new group starts at 0; commits are read back.
                    fresh = await client.invoke(broker.address, request(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": "cg", "topic": "Orders", "queueId": 0}))
                    assert (fresh.code, fresh.field("offset")) == (ResponseCode.SUCCESS, "0")
                    await client.invoke_oneway(broker.address, request(
                        RequestCode.UPDATE_CONSUMER_OFFSET,
                        {"consumerGroup": "cg", "topic": "Orders", "queueId": 0, "commitOffset": 2}))
                    await asyncio.sleep(0.2)
                    committed = await client.invoke(broker.address, request(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": "cg", "topic": "Orders", "queueId": 0}))
                    assert committed.field("offset") == "2"
                    max_offset = await client.invoke(broker.address, request(
                        RequestCode.GET_MAX_OFFSET, {"topic": "Orders", "queueId": 0}))
                    assert max_offset.field("offset") == "2"
                    by_time = await client.invoke(broker.address, request(
                        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                        {"topic": "Orders", "queueId": 0, "timestamp": 0}))
                    assert by_time.field("offset") == "0"

                    # Heartbeats register consumers; the group lists them.
                    heartbeat = {"clientID": "127.0.0.1@test", "consumerDataSet": [{
                        "groupName": "cg", "consumeType": "CONSUME_PASSIVELY",
                        "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                        "subscriptionDataSet": [{"topic": "Orders", "subString": "*"}]}],
                        "producerDataSet": [{"groupName": "pg"}]}
                    beat = await client.invoke(broker.address, request(
                        RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()))
                    assert beat.code == ResponseCode.SUCCESS
                    assert beat.version >= 232  # clients refuse SQL92 below V4_1_0
                    ids = await client.invoke(broker.address, request(
                        RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"}))
                    assert json.loads(ids.body)["consumerIdList"] == ["127.0.0.1@test"]

                    # Admin: create a topic, see it in the config and in the routes.
                    created = await client.invoke(broker.address, request(
                        RequestCode.UPDATE_AND_CREATE_TOPIC, {
                            "topic": "Audit", "defaultTopic": "TBW102", "readQueueNums": 2,
                            "writeQueueNums": 2, "perm": 6, "topicFilterType": "SINGLE_TAG"}))
                    assert created.code == ResponseCode.SUCCESS
                    topics = json.loads((await client.invoke(broker.address, request(
                        RequestCode.GET_ALL_TOPIC_CONFIG))).body)["topicConfigTable"]
                    assert topics["Audit"]["readQueueNums"] == 2
                    await wait_for_route(client, namesrv.address, "Audit")
                    runtime = json.loads((await client.invoke(broker.address, request(
                        RequestCode.GET_BROKER_RUNTIME_INFO))).body)["table"]
                    assert int(runtime["commitLogMaxOffset"]) > 0
                    assert runtime["brokerVersionDesc"] == "V4_9_7"
                    stats = (await client.invoke(broker.address, request(
                        RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Orders"}))).body.decode()
                    assert '{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:' in stats

                    unknown = await client.invoke(broker.address, request(9999))
                    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                    bad = await client.invoke(broker.address, send_v2("bad topic!", b"x"))
                    assert bad.code == ResponseCode.SYSTEM_ERROR
                finally:
                    await client.close()

            run(main())
            assert broker.terminate() == 0
        store = tmp_path / "broker-a"
        assert not (store / "abort").exists()  # a clean shutdown
        offsets = fastjson.loads((store / "config" / "consumerOffset.json").read_text())
        assert offsets["offsetTable"]["Orders@cg"] == {"0": 2}

        async def gone():
            client = RemotingClient()
            try:
                answer = await client.invoke(namesrv.address, request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}))
                return answer.code
            finally:
                await client.close()

        assert run(gone()) == ResponseCode.TOPIC_NOT_EXIST  # it unregistered on the way out


def test_a_killed_broker_leaves_the_routes_and_recovers_its_messages(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as namesrv:
        conf = broker_conf(tmp_path, namesrv.address, flushDiskType="SYNC_FLUSH")

        async def send_some(address):
            client = RemotingClient()
            try:
                for i in range(20):
                    sent = await client.invoke(address, send_v2("Kill", f"m{i}".encode(), queue_id=0))
                    assert sent.code == ResponseCode.SUCCESS
            finally:
                await client.close()

        with running("cluster.broker", "-c", conf, env=env) as broker:
            run(send_some(broker.address))
            broker.process.kill()
            broker.process.wait(10)

        async def routes_gone():
            client = RemotingClient()
            try:
                for _ in range(100):
                    answer = await client.invoke(namesrv.address, request(
                        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Kill"}))
                    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                        return True
                    await asyncio.sleep(0.05)
                return False
            finally:
                await client.close()

        assert run(routes_gone())
        assert os.path.exists(tmp_path / "broker-a" / "abort")
        with running("cluster.broker", "-c", conf, env=env) as broker:
            async def read_back():
                client = RemotingClient()
                try:
                    got = await client.invoke(broker.address, pull("Kill", 0, 0))
                    return [r.body for r in iter_records(got.body, check_crc=True)]
                finally:
                    await client.close()

            assert run(read_back()) == [f"m{i}".encode() for i in range(20)]
