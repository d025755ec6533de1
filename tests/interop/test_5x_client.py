"""The official RocketMQ 5.x Python client (gRPC, through the proxy) against a cluster the
supervisor runs: sends, POP receives, acks, redelivery, the DLQ, status codes, and 4.x clients
on the same topics and groups."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from cluster.client.admin import AdminClient
from cluster.client.consumer import PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.client.pull import PullConsumer
from cluster.proxy.schema import Code, pb, services
from cluster.remoting.errors import BrokerResponseError
from cluster.supervisor.spec import load_profile
from cluster.supervisor.supervisor import Supervisor

pytestmark = [pytest.mark.interop, pytest.mark.integration]
DRIVER = os.path.join(os.path.dirname(__file__), "py5_client.py")


def py5(client_path: str, tmp_path, *args: str, timeout: float = 90) -> list[dict]:
    env = {"PYTHONPATH": client_path, "HOME": str(tmp_path),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    result = subprocess.run([sys.executable, DRIVER, *args], capture_output=True, text=True,
                            env=env, timeout=timeout, check=False)
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0, (result.stdout, result.stderr[-3000:])
    return events


@pytest.fixture
def cluster(tmp_path):
    """A `single` cluster (name server, broker, proxy) made and run by the supervisor; its
    broker checks open transactions every second."""
    spec = load_profile("single")
    spec.prefer_default_ports = False
    spec.groups[0].conf.update(transactionTimeOut="1000", transactionCheckInterval="1000")
    supervisor = Supervisor.create(spec, "py5", root=tmp_path / "clusters")
    asyncio.run(supervisor.start())
    try:
        yield supervisor
    finally:
        asyncio.run(supervisor.stop(grace=5))


def admin(supervisor, action):
    async def main():
        async with AdminClient(supervisor.state.namesrv_addr) as client:
            return await action(client)
    return asyncio.run(main())


def dead_letters(supervisor, group: str) -> list:
    """What reached ``%DLQ%<group>`` (waiting up to 10 s for the first one)."""
    async def main():
        consumer = PullConsumer("CID-inspect", supervisor.state.namesrv_addr)
        await consumer.start()
        try:
            for _ in range(100):
                try:
                    [mq] = await consumer.fetch_subscribe_message_queues(f"%DLQ%{group}")
                    result = await consumer.pull(mq, "*", 0)
                    if result.messages:
                        return result.messages
                except Exception:  # the DLQ topic appears when the first message lands there
                    pass
                await asyncio.sleep(0.1)
            return []
        finally:
            await consumer.shutdown()
    return asyncio.run(main())


def make_topic(supervisor, topic: str, queues: int = 4) -> None:
    admin(supervisor, lambda c: c.create_topic(topic, queues, queues))


def test_producer_and_simple_consumer_round_trip_with_properties_intact(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Round")
    proxy = cluster.state.proxy_addr
    sent = py5(py5_client, tmp_path, "send", proxy, "T5Round", "5", "--tag", "tagA")
    assert len(sent) == 5
    got = py5(py5_client, tmp_path, "receive", proxy, "T5Round", "CID-round", "5", "--tag", "tagA",
              "--timeout", "20")
    received = sorted((e["body"], e["msg_id"], tuple(e["keys"]), e["tag"], e["properties"]["seq"],
                       e["attempt"], e["topic"]) for e in got if e["event"] == "received")
    assert received == sorted((f"py5-{i}", sent[i]["msg_id"], (f"py5-key-{i}",), "tagA", str(i), 1,
                               "T5Round") for i in range(5))
    # Acked: nothing comes back, not even after the invisible duration the test used (2 s).
    again = py5(py5_client, tmp_path, "receive", proxy, "T5Round", "CID-round", "1", "--timeout",
                "4", "--invisible", "2")
    assert [e for e in again if e["event"] == "received"] == []


def test_an_unacked_message_comes_back_after_its_invisible_duration(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Again")
    proxy = cluster.state.proxy_addr
    py5(py5_client, tmp_path, "send", proxy, "T5Again", "1")
    first = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Again", "CID-again", "1",
                            "--invisible", "3", "--no-ack") if e["event"] == "received"]
    assert [e["attempt"] for e in first] == [1]
    began = time.monotonic()
    second = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Again", "CID-again", "1",
                             "--timeout", "20") if e["event"] == "received"]
    assert [(e["body"], e["attempt"], e["msg_id"]) for e in second] == [
        ("py5-0", 2, first[0]["msg_id"])]
    assert time.monotonic() - began < 15


def test_a_poison_message_reaches_the_dlq_after_the_groups_attempts(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Poison", 1)
    admin(cluster, lambda c: c.create_group("CID-poison", retryMaxTimes=1))  # 2 deliveries
    proxy = cluster.state.proxy_addr
    py5(py5_client, tmp_path, "send", proxy, "T5Poison", "1")
    attempts = [e["attempt"] for e in py5(
        py5_client, tmp_path, "receive", proxy, "T5Poison", "CID-poison", "2", "--invisible", "1",
        "--no-ack", "--timeout", "20") if e["event"] == "received"]
    assert attempts == [1, 2]

    [dead] = dead_letters(cluster, "CID-poison")
    assert dead.body == b"py5-0"
    assert dead.properties["RETRY_TOPIC"] == "T5Poison"
    # Nothing more for the group.
    assert [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Poison", "CID-poison", "1",
                           "--timeout", "4") if e["event"] == "received"] == []


def test_4x_and_5x_clients_share_topics_and_groups(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Mixed")
    proxy, namesrv = cluster.state.proxy_addr, cluster.state.namesrv_addr

    async def send_4x():
        async with Producer("PID-4x", namesrv) as producer:
            for number in range(3):
                await producer.send(Message("T5Mixed", f"4x-{number}".encode(), tags="tagA",
                                            keys=f"k4-{number}", properties={"from": "4x"}))
    asyncio.run(send_4x())
    got = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Mixed", "CID-mixed", "3",
                          "--timeout", "20") if e["event"] == "received"]
    assert sorted((e["body"], e["properties"]["from"], e["tag"]) for e in got) == [
        (f"4x-{i}", "4x", "tagA") for i in range(3)]

    # The reverse: a 5.x producer and a 4.x push consumer in the same group, which goes on
    # from the offsets the 5.x consumer moved (it does not see the 4.x messages again).
    async def consume_4x():
        seen: list = []
        done = asyncio.Event()

        async def listener(messages):
            seen.extend(messages)
            if len(seen) >= 2:
                done.set()
            return True

        consumer = PushConsumer("CID-mixed", namesrv)
        consumer.subscribe("T5Mixed", "*")
        consumer.register_listener(listener)
        await consumer.start()
        try:
            await asyncio.sleep(1.0)  # rebalanced: its queues are assigned
            sent = await asyncio.to_thread(py5, py5_client, tmp_path, "send", proxy, "T5Mixed", "2",
                                           "--prefix", "5x")
            await asyncio.wait_for(done.wait(), 30)
            await asyncio.sleep(0.5)
        finally:
            await consumer.shutdown()
        return seen, sent

    seen, sent = asyncio.run(consume_4x())
    assert sorted(m.body for m in seen) == [b"5x-0", b"5x-1"]
    assert sorted(m.msg_id for m in seen) == sorted(e["msg_id"] for e in sent)


def test_bad_requests_get_the_status_code_a_5x_client_expects(cluster):
    make_topic(cluster, "T5Bad")
    channel = grpc.insecure_channel(cluster.state.proxy_addr)
    stub = services.MessagingServiceStub(channel)
    meta = [("x-mq-client-id", "test-client")]
    try:
        route = stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")),
                                metadata=meta)
        assert route.status.code == Code.TOPIC_NOT_FOUND
        message = pb.Message(topic=pb.Resource(name="T5Bad"), body=b"x" * (4 * 1024 * 1024 + 1),
                             system_properties=pb.SystemProperties(message_id="01AB"))
        sent = stub.SendMessage(pb.SendMessageRequest(messages=[message]), metadata=meta)
        assert sent.entries[0].status.code == Code.MESSAGE_BODY_TOO_LARGE
        illegal = pb.Message(topic=pb.Resource(name="T5Bad"), body=b"x",
                             system_properties=pb.SystemProperties(message_id="01AB", tag="a||b"))
        assert stub.SendMessage(pb.SendMessageRequest(messages=[illegal]),
                                metadata=meta).entries[0].status.code == Code.ILLEGAL_MESSAGE_TAG
        acked = stub.AckMessage(pb.AckMessageRequest(
            group=pb.Resource(name="CID-bad"), topic=pb.Resource(name="T5Bad"),
            entries=[pb.AckMessageEntry(message_id="01AB", receipt_handle="not a handle")]),
            metadata=meta)
        assert acked.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
        [answer] = list(stub.ReceiveMessage(pb.ReceiveMessageRequest(
            group=pb.Resource(name="bad group!"), message_queue=pb.MessageQueue(
                topic=pb.Resource(name="T5Bad")), batch_size=1), metadata=meta))
        assert answer.status.code == Code.ILLEGAL_CONSUMER_GROUP
        # Bytes that are no protobuf message: that call fails, the proxy serves on.
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                  request_serializer=bytes, response_deserializer=bytes)
        with pytest.raises(grpc.RpcError):
            raw(b"\xff\xff\xff\xff garbage", metadata=meta, timeout=5)
        [hostile] = list(stub.ReceiveMessage(pb.ReceiveMessageRequest(
            group=pb.Resource(name="CID-bad"), message_queue=pb.MessageQueue(
                topic=pb.Resource(name="T5Bad")), batch_size=2**31 - 1,
            invisible_duration=Duration(seconds=-5)), metadata=meta))
        assert hostile.status.code == Code.ILLEGAL_INVISIBLE_TIME
        assert stub.EndTransaction(pb.EndTransactionRequest(
            topic=pb.Resource(name="T5Bad"), transaction_id="forged"),
            metadata=meta).status.code == Code.INVALID_TRANSACTION_ID
        # Times that are no times (protobuf's own conversion would raise out of the call).
        unborn = pb.Message(topic=pb.Resource(name="T5Bad"), body=b"x",
                            system_properties=pb.SystemProperties(message_id="01AB"))
        unborn.system_properties.born_timestamp.nanos = 1_000_000_000
        assert stub.SendMessage(pb.SendMessageRequest(messages=[unborn]),
                                metadata=meta).entries[0].status.code == Code.BAD_REQUEST
        query = pb.QueryOffsetRequest(message_queue=pb.MessageQueue(
            topic=pb.Resource(name="T5Bad"), broker=pb.Broker(name="broker-a"), id=0),
            query_offset_policy=pb.TIMESTAMP)
        query.timestamp.seconds = 315_576_000_000  # past the year 9999
        assert stub.QueryOffset(query, metadata=meta).status.code == Code.BAD_REQUEST
        [skewed] = list(stub.ReceiveMessage(pb.ReceiveMessageRequest(
            group=pb.Resource(name="CID-bad"), message_queue=pb.MessageQueue(
                topic=pb.Resource(name="T5Bad")), batch_size=1,
            invisible_duration=Duration(seconds=30, nanos=-1)), metadata=meta))
        assert skewed.status.code == Code.ILLEGAL_INVISIBLE_TIME
        assert stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="T5Bad")),
                               metadata=meta).status.code == Code.OK
        # ... and nothing of it reached the topic.
        stats = admin(cluster, lambda c: c.topic_stats("T5Bad"))
        assert sum(s["maxOffset"] for s in stats.values()) == 0
    finally:
        channel.close()


def test_fifo_order_per_message_group_holds_across_a_consumer_restart(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Fifo", 2)
    admin(cluster, lambda c: c.create_group("CID-fifo", consumeMessageOrderly=True))
    proxy = cluster.state.proxy_addr
    for group in ("g0", "g1", "g2"):
        py5(py5_client, tmp_path, "send", proxy, "T5Fifo", "4", "--prefix", group, "--group", group)
    # A first consumer takes what it is given and dies without acking anything.
    first = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Fifo", "CID-fifo", "1",
                            "--invisible", "3", "--no-ack", "--timeout", "10")
             if e["event"] == "received"]
    assert first
    # The next one gets everything, each message group in the order it was sent, the first
    # consumer's messages again (their second delivery) before anything after them.
    got = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Fifo", "CID-fifo", "12",
                          "--invisible", "10", "--timeout", "40") if e["event"] == "received"]
    by_group: dict[str, list[int]] = {}
    for event in got:
        group, number = event["body"].rsplit("-", 1)
        by_group.setdefault(group, []).append(int(number))
    assert by_group == {"g0": [0, 1, 2, 3], "g1": [0, 1, 2, 3], "g2": [0, 1, 2, 3]}
    again = {e["msg_id"]: e["attempt"] for e in got}
    assert all(again[e["msg_id"]] == 2 for e in first)


def test_a_timer_message_arrives_no_sooner_than_its_time(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Timer")
    proxy = cluster.state.proxy_addr
    [sent] = py5(py5_client, tmp_path, "send", proxy, "T5Timer", "1", "--deliver-in-ms", "3000")
    got = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Timer", "CID-timer", "1",
                          "--timeout", "20") if e["event"] == "received"]
    assert [e["body"] for e in got] == ["py5-0"]
    assert sent["due"] >= sent["at"] + 2
    assert sent["due"] <= got[0]["at"] < sent["due"] + 2.5


def test_transactions_commit_roll_back_and_recover_through_the_checker(cluster, py5_client,
                                                                      tmp_path):
    make_topic(cluster, "T5Tx")
    proxy = cluster.state.proxy_addr
    events = py5(py5_client, tmp_path, "transact", proxy, "T5Tx")
    assert [e["body"] for e in events if e["event"] == "checked"][:1] == ["tx-orphan"]
    got = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Tx", "CID-tx", "2",
                          "--timeout", "20") if e["event"] == "received"]
    assert sorted(e["body"] for e in got) == ["tx-commit", "tx-orphan"]
    # The rolled-back one never shows up.
    assert [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Tx", "CID-tx", "1",
                           "--timeout", "4") if e["event"] == "received"] == []


def test_push_consumer_consumes_and_gives_up_into_the_dlq(cluster, py5_client, tmp_path):
    make_topic(cluster, "T5Push")
    proxy = cluster.state.proxy_addr
    py5(py5_client, tmp_path, "send", proxy, "T5Push", "4")
    got = [e for e in py5(py5_client, tmp_path, "push", proxy, "T5Push", "CID-push", "4")
           if e["event"] == "received"]
    assert sorted(e["body"] for e in got) == [f"py5-{i}" for i in range(4)]

    # A listener that always fails: redelivered until the group's attempts are spent (2 here),
    # then forwarded to the DLQ by the client, and gone for the group.
    make_topic(cluster, "T5PushFail", 1)
    admin(cluster, lambda c: c.create_group("CID-push-fail", retryMaxTimes=1))
    py5(py5_client, tmp_path, "send", proxy, "T5PushFail", "1")
    failed = [e for e in py5(py5_client, tmp_path, "push", proxy, "T5PushFail", "CID-push-fail",
                             "2", "--fail", "--timeout", "60", "--linger", "3")
              if e["event"] == "received"]
    assert [e["attempt"] for e in failed] == [1, 2]

    assert [m.body for m in dead_letters(cluster, "CID-push-fail")] == [b"py5-0"]

    # In a FIFO group the client retries in place and then forwards the message to the DLQ
    # itself (ForwardMessageToDeadLetterQueue), so that the group's next message can go out.
    make_topic(cluster, "T5PushFifo", 1)
    admin(cluster, lambda c: c.create_group("CID-push-fifo", retryMaxTimes=1,
                                            consumeMessageOrderly=True))
    py5(py5_client, tmp_path, "send", proxy, "T5PushFifo", "2", "--group", "g")
    fifo = [e for e in py5(py5_client, tmp_path, "push", proxy, "T5PushFifo", "CID-push-fifo",
                           "4", "--fail", "--timeout", "30", "--linger", "2")
            if e["event"] == "received"]
    # (a local retry is the same delivery: its attempt stays 1)
    assert [e["body"] for e in fifo] == ["py5-0", "py5-0", "py5-1", "py5-1"]
    assert sorted(m.body for m in dead_letters(cluster, "CID-push-fifo")) == [
        b"py5-0", b"py5-1"]


def test_the_official_cpp_4x_client_and_a_5x_client_on_one_topic_and_group(
        cluster, py5_client, cpp_clients, tmp_path):
    from tests.interop.test_cpp_client import client as cpp

    make_topic(cluster, "T5Cpp")
    proxy, namesrv = cluster.state.proxy_addr, cluster.state.namesrv_addr
    # 4.x (C++ core, remoting) -> 5.x (gRPC, POP)
    sent = [e for e in cpp(cpp_clients["cpp"], tmp_path, "produce", namesrv, "T5Cpp", "3",
                           "--tags", "tagA") if e["event"] == "sent"]
    got = [e for e in py5(py5_client, tmp_path, "receive", proxy, "T5Cpp", "CID-both", "3",
                          "--tag", "tagA", "--timeout", "20") if e["event"] == "received"]
    assert sorted((e["body"], e["tag"], e["msg_id"]) for e in got) == sorted(
        (f"cpp-{i}", "tagA", sent[i]["msg_id"]) for i in range(3))

    # 5.x -> 4.x, same group: the C++ push consumer goes on from the group's offsets, so it gets
    # the 5.x messages and not the C++ ones the 5.x consumer took already.
    def consume():
        return cpp(cpp_clients["cpp"], tmp_path, "consume", namesrv, "T5Cpp", "CID-both", "2",
                   "--timeout", "40")

    async def both():
        consuming = asyncio.create_task(asyncio.to_thread(consume))
        await asyncio.sleep(5)  # the C++ consumer has started and rebalanced
        await asyncio.to_thread(py5, py5_client, tmp_path, "send", proxy, "T5Cpp", "2",
                                "--prefix", "5x", "--tag", "tagB")
        return await consuming

    received = [e for e in asyncio.run(both()) if e["event"] == "received"]
    assert sorted((e["body"], e["tags"]) for e in received) == [("5x-0", "tagB"), ("5x-1", "tagB")]


def consumer_settings(group: str, topic: str) -> pb.Settings:
    """What a simple consumer of ``topic`` (all tags) in ``group`` says over Telemetry."""
    return pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic),
            expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))


async def listed(client: AdminClient, group: str, client_id: str, wait: float = 5) -> dict:
    """The group's connections once they list ``client_id`` (waiting up to ``wait`` s)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            connections = await client.consumer_connections(group)
            if client_id in [c["clientId"] for c in connections["connectionSet"]]:
                return connections
        except BrokerResponseError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"{client_id} is not listed in {group}: {connections}")
        await asyncio.sleep(0.1)


def test_a_5x_consumer_of_a_topic_not_routed_yet_joins_its_group_once_it_is(cluster):
    """A broker tells the name servers of a new topic a moment after creating it; a 5.x client
    that subscribes in between is heartbeated to the brokers as soon as the route is there, not
    left out of its group (and out of the console's reach) until a later round."""
    import queue

    channel = grpc.insecure_channel(cluster.state.proxy_addr)
    stub = services.MessagingServiceStub(channel)
    outgoing: queue.Queue = queue.Queue()
    outgoing.put(pb.TelemetryCommand(settings=consumer_settings("CID-late", "T5Late")))
    stream = stub.Telemetry(iter(outgoing.get, None), timeout=60, metadata=[
        ("x-mq-client-id", "late-client@1"), ("x-mq-language", "PYTHON")])
    try:
        answer = next(stream)  # the proxy has looked the topic up: there is no route yet
        assert answer.WhichOneof("command") == "settings"
        make_topic(cluster, "T5Late")

        async def console():
            async with AdminClient(cluster.state.namesrv_addr) as client:
                return await listed(client, "CID-late", "late-client@1", wait=8)

        connections = asyncio.run(console())
    finally:
        outgoing.put(None)
        channel.close()
    [entry] = connections["connectionSet"]
    assert (entry["language"], entry["consumeType"]) == ("PYTHON", "CONSUME_POP")


def test_consoles_see_5x_clients_and_reach_them_over_telemetry(cluster):
    """A 5.x consumer (here a raw gRPC client) is listed in its group with its language and
    type; the console's consume-directly and running-info requests reach it over Telemetry."""
    import queue
    import threading

    make_topic(cluster, "T5Seen")
    channel = grpc.insecure_channel(cluster.state.proxy_addr)
    stub = services.MessagingServiceStub(channel)
    meta = [("x-mq-client-id", "seen-client@1"), ("x-mq-language", "JAVA"),
            ("x-mq-client-version", "5.0.7")]
    outgoing: queue.Queue = queue.Queue()

    def commands():
        while (item := outgoing.get()) is not None:
            yield item

    outgoing.put(pb.TelemetryCommand(settings=consumer_settings("CID-seen", "T5Seen")))
    stream = stub.Telemetry(commands(), metadata=meta)
    answered: list = []

    def answer_commands():
        try:
            serve_commands()
        except grpc.RpcError:
            pass  # the channel closed at the end of the test

    def serve_commands():
        for command in stream:
            kind = command.WhichOneof("command")
            answered.append(kind)
            if kind == "verify_message_command":
                outgoing.put(pb.TelemetryCommand(verify_message_result=pb.VerifyMessageResult(
                    nonce=command.verify_message_command.nonce), status=pb.Status(code=Code.OK)))
            elif kind == "print_thread_stack_trace_command":
                outgoing.put(pb.TelemetryCommand(thread_stack_trace=pb.ThreadStackTrace(
                    nonce=command.print_thread_stack_trace_command.nonce,
                    thread_stack_trace="main: waiting")))

    reader = threading.Thread(target=answer_commands, daemon=True)
    reader.start()
    try:
        async def console():
            async with AdminClient(cluster.state.namesrv_addr) as client:
                connections = await listed(client, "CID-seen", "seen-client@1")
                async with Producer("PID-seen", cluster.state.namesrv_addr) as producer:
                    await producer.send(Message("T5Seen", b"look", keys="seen-key"))
                [record] = await client.query_by_key("T5Seen", "seen-key")
                verdict = await client.consume_message_directly("CID-seen", "seen-client@1",
                                                                record.msg_id)
                info = await client.consumer_running_info("CID-seen", "seen-client@1")
                return connections, verdict, info

        connections, verdict, info = asyncio.run(console())
    finally:
        outgoing.put(None)
        channel.close()
    [seen] = connections["connectionSet"]
    assert (seen["clientId"], seen["language"], seen["consumeType"]) == (
        "seen-client@1", "JAVA", "CONSUME_POP")
    assert verdict["consumeResult"] == "CR_SUCCESS"
    assert "verify_message_command" in answered
    assert info["properties"]["clientType"] == "SIMPLE_CONSUMER"
    assert info["properties"]["clientVersion"] == "5.0.7"


def test_lite_pull_rpcs_read_from_an_offset_and_keep_the_groups_offset(cluster, py5_client,
                                                                       tmp_path):
    make_topic(cluster, "T5Pull", 1)
    proxy = cluster.state.proxy_addr
    py5(py5_client, tmp_path, "send", proxy, "T5Pull", "3")
    channel = grpc.insecure_channel(proxy)
    stub = services.MessagingServiceStub(channel)
    meta = [("x-mq-client-id", "puller@1")]
    try:
        route = stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="T5Pull")),
                                metadata=meta)
        [queue] = [q for q in route.message_queues if q.id == 0]
        group = pb.Resource(name="CID-pull")
        end = stub.QueryOffset(pb.QueryOffsetRequest(message_queue=queue,
                                                     query_offset_policy=pb.END), metadata=meta)
        assert end.offset == 3
        answers = list(stub.PullMessage(pb.PullMessageRequest(
            group=group, message_queue=queue, offset=1, batch_size=8,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*")), metadata=meta))
        assert [a.message.body for a in answers if a.WhichOneof("content") == "message"] == [
            b"py5-1", b"py5-2"]
        assert answers[-1].next_offset == 3
        # A new group in a young queue starts at its beginning, as RocketMQ answers it.
        fresh = stub.GetOffset(pb.GetOffsetRequest(group=group, message_queue=queue),
                               metadata=meta)
        assert (fresh.status.code, fresh.offset) == (Code.OK, 0)
        assert stub.UpdateOffset(pb.UpdateOffsetRequest(group=group, message_queue=queue, offset=3),
                                 metadata=meta).status.code == Code.OK
        assert stub.GetOffset(pb.GetOffsetRequest(group=group, message_queue=queue),
                              metadata=meta).offset == 3
        [empty] = list(stub.PullMessage(pb.PullMessageRequest(
            group=group, message_queue=queue, offset=-1), metadata=meta))
        assert empty.status.code == Code.ILLEGAL_OFFSET
    finally:
        channel.close()


def test_a_groups_retry_count_at_int32s_limit_still_gets_its_consumers_their_settings(cluster):
    """retryMaxTimes is any int32 an admin sets; its attempts (+1) once overflowed the
    settings' field, the Telemetry stream's reader died, and every 5.x consumer of the group
    waited for settings that never came."""
    make_topic(cluster, "T5Retry")
    admin(cluster, lambda c: c.create_group("CID-huge-retry", retryMaxTimes=2**31 - 1))
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name="CID-huge-retry"), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name="T5Retry"),
            expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
    channel = grpc.insecure_channel(cluster.state.proxy_addr)
    try:
        [answer] = list(services.MessagingServiceStub(channel).Telemetry(
            iter([pb.TelemetryCommand(settings=settings)]),
            metadata=[("x-mq-client-id", "huge-retry")], timeout=10))
    finally:
        channel.close()
    assert answer.status.code == Code.OK
    assert answer.settings.backoff_policy.max_attempts == 2**31 - 1


def test_a_4x_message_with_values_past_5xs_fields_reaches_a_5x_consumer(cluster):
    """A 4.x producer's born time may be any int64 and its reconsume count any int32; such a
    message once failed every 5.x receive of its queue (popped, failed, back again)."""
    from cluster.remoting.client import RemotingClient
    from cluster.remoting.codec import request
    from cluster.remoting.codes import RequestCode, ResponseCode
    from storage.message import properties_to_string

    make_topic(cluster, "T5Odd", queues=1)
    broker = next(n.address for n in cluster.state.nodes if n.kind == "broker")

    async def send():
        fields = {"a": "PG-odd", "b": "T5Odd", "c": "TBW102", "d": 4, "e": 0, "f": 0,
                  "g": 2**63 - 1, "h": 0, "j": 2**31 - 1, "k": False, "m": False,
                  "i": properties_to_string({"UNIQ_KEY": "0A0B0C0D0E0F", "WAIT": "true"})}
        client = RemotingClient()
        try:
            return await client.invoke(broker, request(RequestCode.SEND_MESSAGE_V2, fields,
                                                       b"odd"), 5)
        finally:
            await client.close()

    assert asyncio.run(send()).code == ResponseCode.SUCCESS
    receive = pb.ReceiveMessageRequest(
        group=pb.Resource(name="CID-odd"), message_queue=pb.MessageQueue(
            topic=pb.Resource(name="T5Odd")), batch_size=8,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    receive.invisible_duration.FromSeconds(30)
    receive.long_polling_timeout.FromSeconds(3)
    channel = grpc.insecure_channel(cluster.state.proxy_addr)
    try:
        stub = services.MessagingServiceStub(channel)
        got = []
        for _ in range(5):  # (the group's first receive may start it at the end: ask again)
            answers = list(stub.ReceiveMessage(receive, metadata=[("x-mq-client-id", "odd")],
                                               timeout=15))
            assert all(a.status.code in (Code.OK, Code.MESSAGE_NOT_FOUND)
                       for a in answers if a.HasField("status")), answers
            got += [a.message for a in answers if a.WhichOneof("content") == "message"]
            if got:
                break
    finally:
        channel.close()
    [message] = got
    assert message.body == b"odd"
    assert message.system_properties.delivery_attempt == 2**31 - 1
    assert message.system_properties.born_timestamp.seconds == 253_402_300_799
