"""Orderly consumption (queue locks, sharding keys) and broadcasting, with real processes."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from cluster.client.consumer import PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer, sharding_key_selector
from tests.integration.procs import running
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
