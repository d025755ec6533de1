"""RocketDesk's own client against 2 name servers and 2 brokers, all real processes."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from cluster.client.consumer import ConsumeStatus, PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from cluster.client.pull import PullConsumer, PullStatus
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf

pytestmark = pytest.mark.integration


def run(coro, timeout=90):
    async def guarded():
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            stacks = "\n".join(f"{t.get_name()}: {t.get_stack(limit=8)}" for t in asyncio.all_tasks())
            task.cancel()
            raise AssertionError(f"timed out after {timeout} s; tasks:\n{stacks}")
        return task.result()

    return asyncio.run(guarded())


@contextlib.contextmanager
def two_by_two(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns1, \
            running("cluster.namesrv", "-p", "0", env=env) as ns2:
        namesrv = f"{ns1.address};{ns2.address}"
        with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv, "broker-a"), env=env) as a, \
                running("cluster.broker", "-c", broker_conf(tmp_path, namesrv, "broker-b"), env=env) as b:
            yield namesrv, {"broker-a": a, "broker-b": b}


async def create_topic(brokers, topic: str, queues: int = 4) -> None:
    client = RemotingClient()
    try:
        for node in brokers.values():
            answer = await client.invoke(node.address, request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
                "writeQueueNums": queues, "perm": 6, "topicFilterType": "SINGLE_TAG"}))
            assert answer.code == ResponseCode.SUCCESS
    finally:
        await client.close()


async def wait_route(producer: Producer, topic: str, brokers: int) -> None:
    for _ in range(100):
        route = await producer.instance.fetch_route(topic)
        if route is not None and len(route.master_addrs()) == brokers:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{topic} is not on {brokers} brokers")


def test_clustering_consumers_share_the_queues_and_each_message_is_consumed_once(tmp_path):
    with two_by_two(tmp_path) as (namesrv, brokers):
        async def main():
            await create_topic(brokers, "Shared")
            async with Producer("pg-route", namesrv) as producer:  # consumers see the topic
                await wait_route(producer, "Shared", 2)
            received: dict[str, list[bytes]] = {"c1": [], "c2": []}
            consumers = []
            for name, sink in received.items():
                consumer = PushConsumer("cg-shared", namesrv,
                                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                consumer.instance.client_id += f"-{name}"
                consumer.subscribe("Shared", "T")

                async def listener(messages, sink=sink):
                    sink.extend(m.body for m in messages)
                    return ConsumeStatus.CONSUME_SUCCESS

                consumer.register_listener(listener)
                consumers.append(consumer)
            try:
                for consumer in consumers:
                    await consumer.start()
                for consumer in consumers:  # both now see two members
                    await consumer.rebalance()
                async with Producer("pg", namesrv) as producer:
                    await wait_route(producer, "Shared", 2)
                    results = [await producer.send(Message("Shared", f"m{i}".encode(), tags="T",
                                                           keys=f"k{i}")) for i in range(40)]
                assert {r.status for r in results} == {SendStatus.SEND_OK}
                assert {r.message_queue.broker_name for r in results} == {"broker-a", "broker-b"}
                for _ in range(200):
                    if sum(len(v) for v in received.values()) >= 40:
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
                # The group's retry queues are shared out too; count the topic's own.
                owned = [{mq for mq in c._pull_tasks if mq.topic == "Shared"} for c in consumers]
            finally:
                for consumer in consumers:
                    await consumer.shutdown()
            everything = received["c1"] + received["c2"]
            assert sorted(everything) == sorted(f"m{i}".encode() for i in range(40))  # once each
            assert received["c1"]
            assert received["c2"]  # both got a share
            assert not owned[0] & owned[1]
            assert len(owned[0] | owned[1]) == 8

        run(main())


def test_broadcasting_delivers_everything_to_every_consumer(tmp_path):
    with two_by_two(tmp_path) as (namesrv, brokers):
        async def main():
            await create_topic(brokers, "Fanout", 2)
            async with Producer("pg-route", namesrv) as producer:  # consumers see the topic
                await wait_route(producer, "Fanout", 2)
            received = {"x": [], "y": []}
            consumers = []
            for name, sink in received.items():
                consumer = PushConsumer("cg-fan", namesrv, message_model="BROADCASTING",
                                        offset_store_dir=str(tmp_path / name))
                consumer.instance.client_id += f"-{name}"
                consumer.subscribe("Fanout")

                async def listener(messages, sink=sink):
                    sink.extend(m.body for m in messages)

                consumer.register_listener(listener)
                consumers.append(consumer)
                await consumer.start()
            try:
                async with Producer("pg", namesrv) as producer:
                    await wait_route(producer, "Fanout", 2)
                    for i in range(10):
                        await producer.send(Message("Fanout", f"f{i}".encode()))
                for _ in range(200):
                    if all(len(v) >= 10 for v in received.values()):
                        break
                    await asyncio.sleep(0.1)
            finally:
                for consumer in consumers:
                    await consumer.shutdown()
            expected = sorted(f"f{i}".encode() for i in range(10))
            assert sorted(received["x"]) == expected
            assert sorted(received["y"]) == expected

        run(main())


def test_pull_consumer_and_a_killed_broker_the_producer_routes_around(tmp_path):
    with two_by_two(tmp_path) as (namesrv, brokers):
        async def main():
            await create_topic(brokers, "Survive", 2)
            async with Producer("pg", namesrv, send_msg_timeout=5) as producer:
                await wait_route(producer, "Survive", 2)
                for i in range(8):
                    await producer.send(Message("Survive", f"s{i}".encode()))
                puller = PullConsumer("cg-pull", namesrv)
                await puller.start()
                try:
                    queues = await puller.fetch_subscribe_message_queues("Survive")
                    assert len(queues) == 4
                    offsets = dict.fromkeys(queues, 0)
                    bodies = []
                    for _ in range(50):  # dispatch is asynchronous: poll until all 8 are visible
                        for mq in queues:
                            result = await puller.pull(mq, "*", offsets[mq])
                            if result.status is PullStatus.FOUND:
                                bodies.extend(m.body for m in result.messages)
                                assert result.next_begin_offset == offsets[mq] + len(result.messages)
                                offsets[mq] = result.next_begin_offset
                        if len(bodies) >= 8:
                            break
                        await asyncio.sleep(0.05)
                    assert sorted(bodies) == sorted(f"s{i}".encode() for i in range(8))
                finally:
                    await puller.shutdown()

                brokers["broker-b"].process.kill()
                brokers["broker-b"].process.wait(10)
                statuses = []
                for i in range(10):
                    statuses.append(await producer.send(Message("Survive", f"after{i}".encode())))
                assert {r.message_queue.broker_name for r in statuses} == {"broker-a"}
                items = {i["brokerName"]: i for i in producer.fault_items()}
                assert items["broker-b"]["available"] is False
            # The name servers drop the dead broker from the route.
            async with Producer("pg2", namesrv) as fresh:
                for _ in range(100):
                    route = await fresh.instance.fetch_route("Survive")
                    if list(route.master_addrs()) == ["broker-a"]:
                        break
                    await asyncio.sleep(0.1)
                assert list(route.master_addrs()) == ["broker-a"]

        run(main())


def test_admin_client_topics_stats_and_resend_to_a_consumer(tmp_path):
    from cluster.client.admin import AdminClient

    with two_by_two(tmp_path) as (namesrv, _):
        async def main():
            async with AdminClient(namesrv) as admin:
                targets = await admin.create_topic("AdminTopic", 2, 2, cluster="DefaultCluster")
                assert len(targets) == 2
                async with Producer("pg", namesrv) as producer:
                    await wait_route(producer, "AdminTopic", 2)
                    sent = await producer.send(Message("AdminTopic", b"resend me", keys="rk"))
                assert "AdminTopic" in await admin.topic_list()
                stats = await admin.topic_stats("AdminTopic")
                assert sum(v["maxOffset"] for v in stats.values()) == 1
                for _ in range(50):  # the index is built just behind the put
                    found = await admin.query_by_key("AdminTopic", "rk")
                    if found:
                        break
                    await asyncio.sleep(0.05)
                assert [r.body for r in found] == [b"resend me"]
                assert (await admin.view_message(sent.offset_msg_id)).body == b"resend me"
                # Queue offsets and a reset's preview (what the console's views ask for).
                queues = await admin.readable_queues("AdminTopic")
                assert sorted({mq.broker_name for mq in queues}) == ["broker-a", "broker-b"]
                assert len(queues) == 4
                assert [mq.queue_id for mq in await admin.readable_queues("AdminTopic",
                                                                         "broker-a")] == [0, 1]
                ends = {mq: await admin.max_offset(mq) for mq in queues}
                assert sum(ends.values()) == 1
                future = int(time.time() * 1000) + 3_600_000
                assert {mq: await admin.offset_at_time(mq, 0) for mq in queues} == dict.fromkeys(
                    queues, 0)
                assert {mq: await admin.offset_at_time(mq, future) for mq in queues} == ends
                moves = await admin.preview_reset_by_time("cg-admin", "AdminTopic", 0)
                assert [(mq, target) for mq, _now, target in moves] == [(mq, 0) for mq in queues]
                with pytest.raises(BrokerResponseError, match="no route"):
                    await admin.readable_queues("NoSuchTopic")

                got = []
                consumer = PushConsumer("cg-admin", namesrv)
                consumer.subscribe("AdminTopic")

                async def listener(messages):
                    got.extend(m.body for m in messages)

                consumer.register_listener(listener)
                await consumer.start()
                try:
                    receipt = await admin.consume_message_directly(
                        "cg-admin", consumer.instance.client_id, sent.offset_msg_id)
                    assert receipt["consumeResult"] == "CR_SUCCESS"
                    assert got == [b"resend me"]
                    info = await admin.consumer_running_info("cg-admin", consumer.instance.client_id)
                    assert info["properties"]["messageModel"] == "CLUSTERING"
                    connections = await admin.consumer_connections("cg-admin")
                    assert connections["connectionSet"][0]["clientId"] == consumer.instance.client_id
                finally:
                    await consumer.shutdown()
                await admin.delete_topic("AdminTopic")
                assert "AdminTopic" not in await admin.topic_list()

        run(main())


def test_a_consumer_started_before_its_topic_exists_consumes_within_seconds(tmp_path):
    """No route for a subscribed topic: looked for again after 1 s, 2 s…, not at the next 20 s
    rebalance."""
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, "", autoCreateTopicEnable="false"),
                    "-n", ns.address, env=env) as broker:
        async def main():
            received = []
            consumer = PushConsumer("cg-early", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("NotYet", "*")

            async def listener(messages):
                received.extend(m.body for m in messages)
                return ConsumeStatus.CONSUME_SUCCESS

            consumer.register_listener(listener)
            await consumer.start()
            try:
                for _ in range(100):  # its first rebalance finds nothing
                    if consumer._routeless == ["NotYet"]:
                        break
                    await asyncio.sleep(0.05)
                assert consumer._routeless == ["NotYet"]
                await create_topic({"a": broker}, "NotYet", 2)
                async with Producer("pg-early", ns.address) as producer:
                    await wait_route(producer, "NotYet", 1)
                    assert (await producer.send(Message("NotYet", b"first"))).status is SendStatus.SEND_OK
                started = time.monotonic()
                while not received and time.monotonic() - started < 15:
                    await asyncio.sleep(0.1)
                assert received == [b"first"]
                assert time.monotonic() - started < 10  # well before the 20 s rebalance
            finally:
                await consumer.shutdown()

        run(main(), timeout=60)
