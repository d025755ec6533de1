"""Delay levels, retries and dead letters with real processes."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from cluster.client.admin import AdminClient
from cluster.client.consumer import ConsumeStatus, PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from cluster.client.pull import PullConsumer, PullStatus
from cluster.client.route import MessageQueue
from tests.integration.procs import free_port, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import run

pytestmark = pytest.mark.integration
FAST_LEVELS = " ".join(["1s"] * 18)  # every level one second: retries within a test's patience


def test_a_delayed_message_arrives_after_its_level_even_across_a_restart(tmp_path):
    env = {"HOME": str(tmp_path)}
    port = free_port()
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        conf = broker_conf(tmp_path, ns.address, listenPort=str(port), messageDelayLevel="1s 3s 10s")
        broker = running("cluster.broker", "-c", conf, env=env)
        broker.__enter__()
        try:
            async def send():
                async with Producer("pg-delay", ns.address) as producer:
                    now = await producer.send(Message("Delayed", b"now", keys="now"))
                    later = await producer.send(Message("Delayed", b"later", keys="later",
                                                        delay_time_level=2))
                    assert now.status is later.status is SendStatus.SEND_OK
                    return time.time()

            sent_at = run(send())
        finally:
            broker.__exit__(None, None, None)  # killed at once: the delayed message is pending
        with running("cluster.broker", "-c", conf, env=env) as restarted:
            async def receive():
                got: dict[str, float] = {}
                consumer = PushConsumer("cg-delay", ns.address,
                                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                consumer.subscribe("Delayed", "*")

                async def listener(messages):
                    for m in messages:
                        got.setdefault(m.keys, time.time())

                consumer.register_listener(listener)
                await consumer.start()
                try:
                    for _ in range(300):
                        if len(got) == 2:
                            break
                        await asyncio.sleep(0.05)
                finally:
                    await consumer.shutdown()
                return got

            got = run(receive())
            assert set(got) == {"now", "later"}
            assert got["later"] - sent_at >= 3.0  # level 2 = 3 s, counted from the store time
            assert restarted.terminate() == 0  # a clean stop writes the delay offsets
            offsets = json.loads((tmp_path / "broker-a" / "config" / "delayOffset.json").read_text()
                                 .replace("{2:", '{"2":'))
            assert offsets["offsetTable"]["2"] == 1


def test_a_consumer_that_always_fails_drives_a_message_into_the_dlq(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address, messageDelayLevel=FAST_LEVELS),
                    env=env):
        async def main():
            async with Producer("pg-dlq", ns.address) as producer:
                sent = await producer.send(Message("Fragile", b"poison", keys="poison"))
            deliveries: list[tuple[str, int]] = []
            consumer = PushConsumer("cg-dlq", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                    max_reconsume_times=2)
            consumer.subscribe("Fragile", "*")

            async def listener(messages):
                deliveries.extend((m.topic, m.reconsume_times) for m in messages)
                return ConsumeStatus.RECONSUME_LATER

            consumer.register_listener(listener)
            await consumer.start()
            dlq = MessageQueue("%DLQ%cg-dlq", "broker-a", 0)
            try:
                pull = PullConsumer("tools", ns.address)
                await pull.start()
                try:
                    for _ in range(400):
                        route = await pull.instance.fetch_route(dlq.topic)
                        if route is not None:
                            result = await pull.pull(dlq, "*", 0)
                            if result.status is PullStatus.FOUND:
                                break
                        await asyncio.sleep(0.1)
                    else:
                        raise AssertionError(f"nothing in the DLQ; deliveries: {deliveries}")
                finally:
                    await pull.shutdown()
            finally:
                await consumer.shutdown()
            dead = result.messages[0]
            assert dead.body == b"poison"
            assert dead.properties["RETRY_TOPIC"] == "Fragile"
            assert dead.properties["ORIGIN_MESSAGE_ID"] == sent.msg_id
            assert dead.reconsume_times == 3
            # Delivered three times, always under the original topic: first, then two retries.
            assert [t for t, _ in deliveries[:3]] == ["Fragile"] * 3
            assert [n for _, n in deliveries[:3]] == [0, 1, 2]
            async with AdminClient(ns.address) as admin:
                assert "%RETRY%cg-dlq" in await admin.topic_list()

        run(main(), timeout=120)


def test_delay_offsets_past_their_queues_end_are_brought_back_at_start(tmp_path):
    """The delay offsets are written every few seconds: a crash can leave them ahead of a
    schedule queue that recovery cut short. At start they come back to the queue's end, and a
    message delayed afterwards is delivered (it took a queue offset below the saved one, and
    was never delivered)."""
    env = {"HOME": str(tmp_path)}
    port = free_port()
    config = tmp_path / "broker-a" / "config"
    config.mkdir(parents=True)
    (config / "delayOffset.json").write_text('{"offsetTable":{1:10}}')  # (RocketMQ's own form)
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        conf = broker_conf(tmp_path, ns.address, listenPort=str(port), messageDelayLevel="1s")
        with running("cluster.broker", "-c", conf, env=env):
            async def main():
                async with Producer("pg-delay", ns.address) as producer:
                    sent = await producer.send(Message("Delayed", b"late", keys="late",
                                                       delay_time_level=1))
                    assert sent.status is SendStatus.SEND_OK
                got: list[str] = []
                consumer = PushConsumer("cg-delay", ns.address,
                                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                consumer.subscribe("Delayed", "*")

                async def listener(messages):
                    got.extend(m.keys for m in messages)

                consumer.register_listener(listener)
                await consumer.start()
                try:
                    for _ in range(200):
                        if got:
                            break
                        await asyncio.sleep(0.05)
                finally:
                    await consumer.shutdown()
                return got

            assert run(main()) == ["late"]
