"""Orderly consumption (queue locks, sharding keys) and broadcasting, with real processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections import defaultdict

import pytest

from cluster.client import consumer as consumer_module
from cluster.client.consumer import ConsumeStatus, PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer, sharding_key_selector
from cluster.client.pull import PullConsumer, PullStatus
from cluster.client.route import MessageQueue
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.procs import ROOT, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run, wait_route

pytestmark = pytest.mark.integration
ORDERS, STEPS = 6, 30


def test_an_orderly_consumer_keeps_per_order_sequence_across_a_restart(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Orders", 4)
            async with Producer("pg-orderly", ns.address) as producer:
                for step in range(STEPS):
                    for order in range(ORDERS):
                        key = f"order-{order}"
                        await producer.send(Message("Orders", f"{key}:{step}".encode(), keys=key),
                                            selector=sharding_key_selector(key))
            sessions: list[dict[str, list[int]]] = []

            async def consume_some(limit: int) -> None:
                seen: dict[str, list[int]] = defaultdict(list)
                sessions.append(seen)
                consumer = PushConsumer("cg-orderly", ns.address, orderly=True,
                                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                consumer.subscribe("Orders", "*")
                count = [0]

                async def listener(messages):
                    for m in messages:
                        key, step = m.body.decode().split(":")
                        seen[key].append(int(step))
                        count[0] += 1
                    await asyncio.sleep(0.002)

                consumer.register_listener(listener)
                await consumer.start()
                for _ in range(600):
                    got = {(o, n) for session in sessions for o, steps in session.items() for n in steps}
                    if count[0] >= limit or len(got) == ORDERS * STEPS:
                        break
                    await asyncio.sleep(0.05)
                await consumer.shutdown()

            await consume_some(ORDERS * STEPS // 3)  # stop a third of the way through
            await consume_some(ORDERS * STEPS)  # a new consumer of the group carries on
            first, second = sessions
            for order in (f"order-{n}" for n in range(ORDERS)):
                # Within each consumer's life an order's steps come strictly in sequence; the
                # second consumer resumes where the first committed (a step may come twice,
                # never one skipped), and between them every step arrives.
                for session in sessions:
                    steps = session.get(order, [])
                    assert steps == sorted(set(steps))
                    if steps:
                        assert steps == list(range(steps[0], steps[-1] + 1))
                before, after = first.get(order, []), second.get(order, [])
                assert not after or not before or after[0] <= before[-1] + 1
                assert set(before) | set(after) == set(range(STEPS))

        run(main(), timeout=120)


def test_broadcasting_consumers_each_get_every_message_and_keep_local_offsets(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "News", 4)
            # Consumers refresh routes every 30 s: one that starts before the name server
            # has the topic would see no queue for longer than this test waits.
            async with Producer("pg-news", ns.address) as producer:
                await wait_route(producer, "News", 1)
            received: dict[str, list[bytes]] = {"c1": [], "c2": []}
            consumers = []
            for name, sink in received.items():
                consumer = PushConsumer("cg-news", ns.address, message_model="BROADCASTING",
                                        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                        offset_store_dir=str(tmp_path / name))
                consumer.instance.client_id += f"-{name}"
                consumer.subscribe("News", "*")

                async def listener(messages, sink=sink):
                    sink.extend(m.body for m in messages)

                consumer.register_listener(listener)
                await consumer.start()
                consumers.append(consumer)
            async with Producer("pg-news", ns.address) as producer:
                for i in range(20):
                    await producer.send(Message("News", f"news {i}".encode()))
            for _ in range(200):
                if all(len(v) >= 20 for v in received.values()):
                    break
                await asyncio.sleep(0.05)
            for consumer in consumers:
                await consumer.shutdown()
            for sink in received.values():
                assert sorted(sink) == sorted(f"news {i}".encode() for i in range(20))
            # A broadcasting consumer restarts from its own file, not from the broker.
            again = []
            consumer = PushConsumer("cg-news", ns.address, message_model="BROADCASTING",
                                    consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                    offset_store_dir=str(tmp_path / "c1"))
            consumer.instance.client_id += "-c1"
            consumer.subscribe("News", "*")

            async def listener(messages):
                again.extend(m.body for m in messages)

            consumer.register_listener(listener)
            await consumer.start()
            async with Producer("pg-news", ns.address) as producer:
                await producer.send(Message("News", b"late news"))
            for _ in range(100):
                if again:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            await consumer.shutdown()
            assert again == [b"late news"]

        run(main(), timeout=90)


# A broadcasting consumer in a process of its own: prints "ready" once it consumes every queue,
# then each body it gets, and stops cleanly (its offsets saved) after ``want`` of them.
BROADCAST_CONSUMER = """
import asyncio, sys
from cluster.client.consumer import PushConsumer

async def main(namesrv, directory, want):
    got = []
    consumer = PushConsumer("cg-survivor", namesrv, message_model="BROADCASTING",
                            offset_store_dir=directory)
    consumer.subscribe("Survivors", "*")

    async def listener(messages):
        for m in messages:
            got.append(m.body)
            print(m.body.decode(), flush=True)

    consumer.register_listener(listener)
    await consumer.start()
    while len(consumer.process_queues) < 2:
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    while len(got) < want:
        await asyncio.sleep(0.05)
    await consumer.shutdown()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@contextlib.contextmanager
def broadcast_consumer(namesrv: str, directory: str, want: int, env: dict):
    """The consumer above, its printed lines in a queue; killed if still running on exit."""
    process = subprocess.Popen([sys.executable, "-c", BROADCAST_CONSUMER, namesrv, directory,
                                str(want)], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                               env=dict(os.environ, PYTHONPATH=ROOT, **env))
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.strip()) for line in process.stdout],
                              daemon=True)
    reader.start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        reader.join(5)
        process.stdout.close()


def test_a_restarted_broadcasting_consumer_gets_what_was_sent_while_it_was_down(tmp_path):
    """Its offsets file is found again by the new process (a new pid): from the last offset it
    would otherwise skip everything sent while it was down."""
    env = {"HOME": str(tmp_path)}
    offsets = str(tmp_path / "offsets")
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def send(body: bytes) -> None:
            async with Producer("pg-survivor", ns.address) as producer:
                await wait_route(producer, "Survivors", 1)
                await producer.send(Message("Survivors", body))

        run(create_topic({"a": broker}, "Survivors", 2))
        with broadcast_consumer(ns.address, offsets, 1, env) as (first, lines):
            assert lines.get(timeout=30) == "ready"
            run(send(b"while-up"))
            assert lines.get(timeout=30) == "while-up"
            assert first.wait(30) == 0
        run(send(b"while-down"))
        with broadcast_consumer(ns.address, offsets, 1, env) as (second, lines):
            printed = {lines.get(timeout=30), lines.get(timeout=30)}  # (in either order)
            assert printed == {"ready", "while-down"}
            assert second.wait(30) == 0


def test_an_orderly_consumer_stops_consuming_a_queue_whose_lock_it_lost(tmp_path, monkeypatch):
    """Another client holds the queue's lock now (as after a broker restart that forgot ours):
    the consumer stops consuming it at its next renewal and takes it up again, in order, once
    it can lock it again (ConsumeMessageOrderlyService consumes only under a fresh lock)."""
    monkeypatch.setattr(consumer_module, "ORDERLY_LOCK_RENEW", 0.3)
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Locked", 1)
            mq = {"topic": "Locked", "brokerName": "broker-a", "queueId": 0}
            got: list[bytes] = []
            consumer = PushConsumer("cg-locked", ns.address, orderly=True,
                                    consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("Locked", "*")

            async def listener(messages):
                got.extend(m.body for m in messages)

            consumer.register_listener(listener)
            client = RemotingClient()

            async def lock(code, client_id):
                answer = await client.invoke(broker.address, request(code, body=json.dumps(
                    {"consumerGroup": "cg-locked", "clientId": client_id, "mqSet": [mq]}).encode()))
                assert answer.code == ResponseCode.SUCCESS
                return answer.body and json.loads(answer.body).get("lockOKMQSet")

            async def wait_for(expected, seconds):
                for _ in range(int(seconds / 0.05)):
                    if got == expected:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"consumed {got}, not {expected}")

            async with Producer("pg-locked", ns.address) as producer:
                await wait_route(producer, "Locked", 1)
                await consumer.start()
                try:
                    await producer.send(Message("Locked", b"before"))
                    await wait_for([b"before"], 20)
                    for _ in range(20):  # (its renewal may take the lock back in between)
                        await lock(RequestCode.UNLOCK_BATCH_MQ, consumer.instance.client_id)
                        if await lock(RequestCode.LOCK_BATCH_MQ, "intruder"):
                            break
                    else:
                        raise AssertionError("the lock never went to the other client")
                    await asyncio.sleep(1.0)  # renewals refused: the consumer knows
                    for body in (b"during-1", b"during-2"):
                        await producer.send(Message("Locked", body))
                    await asyncio.sleep(3.0)
                    assert got == [b"before"]
                    await lock(RequestCode.UNLOCK_BATCH_MQ, "intruder")
                    await wait_for([b"before", b"during-1", b"during-2"], 15)
                finally:
                    await consumer.shutdown()
                    await client.close()

        run(main(), timeout=60)


def test_an_orderly_consumer_gives_up_a_message_after_the_limit_set(tmp_path):
    """With max_reconsume_times set, an orderly consumer stops retrying a message in place
    after that many reconsumptions: it goes to the group's DLQ and the queue moves on."""
    env = {"HOME": str(tmp_path)}
    fast = " ".join(["1s"] * 18)
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address, messageDelayLevel=fast),
                    env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "OrderlyPoison", 1)
            async with Producer("pg-poison", ns.address) as producer:
                await wait_route(producer, "OrderlyPoison", 1)
                sent = await producer.send(Message("OrderlyPoison", b"poison"))
                await producer.send(Message("OrderlyPoison", b"next"))
            deliveries: list[tuple[bytes, int]] = []
            consumer = PushConsumer("cg-orderly-dlq", ns.address, orderly=True, max_reconsume_times=2,
                                    consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("OrderlyPoison", "*")

            async def listener(messages):
                deliveries.extend((m.body, m.reconsume_times) for m in messages)
                return ConsumeStatus.RECONSUME_LATER if messages[0].body == b"poison" else None

            consumer.register_listener(listener)
            await consumer.start()
            dlq = MessageQueue("%DLQ%cg-orderly-dlq", "broker-a", 0)
            puller = PullConsumer("tools", ns.address)
            await puller.start()
            try:
                for _ in range(300):
                    if (b"next", 0) in deliveries and await puller.instance.fetch_route(dlq.topic):
                        result = await puller.pull(dlq, "*", 0)
                        if result.status is PullStatus.FOUND:
                            break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"nothing in the DLQ; deliveries: {deliveries}")
            finally:
                await puller.shutdown()
                await consumer.shutdown()
            assert deliveries == [(b"poison", 0), (b"poison", 1), (b"poison", 2), (b"next", 0)]
            [dead] = result.messages
            assert dead.body == b"poison"
            assert dead.properties["RETRY_TOPIC"] == "OrderlyPoison"
            assert dead.properties["ORIGIN_MESSAGE_ID"] == sent.msg_id

        run(main(), timeout=90)
