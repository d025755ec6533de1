"""Message trace with real processes: a producer and a consumer with tracing on."""

from __future__ import annotations

import asyncio

import pytest

from cluster.client.admin import AdminClient
from cluster.client.consumer import PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run, wait_route

pytestmark = pytest.mark.integration


def test_a_traced_message_shows_its_send_and_its_consumption(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Traced", 2)
            async with Producer("pg-route", ns.address) as producer:  # the consumer sees it
                await wait_route(producer, "Traced", 1)
            got = []
            consumer = PushConsumer("cg-traced", ns.address, trace=True,
                                    consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("Traced", "*")

            async def listener(messages):
                got.extend(messages)

            consumer.register_listener(listener)
            await consumer.start()
            async with Producer("pg-traced", ns.address, trace=True) as producer:
                sent = await producer.send(Message("Traced", b"follow me", keys="trace-1", tags="t"))
            try:
                for _ in range(100):
                    if got:
                        break
                    await asyncio.sleep(0.05)
            finally:
                await consumer.shutdown()  # flushes the consumer's trace records
            async with AdminClient(ns.address) as admin:
                for _ in range(100):
                    events = await admin.message_trace(sent.msg_id)
                    if {e.kind for e in events} >= {"Pub", "SubBefore", "SubAfter"}:
                        break
                    await asyncio.sleep(0.1)
            kinds = [e.kind for e in events]
            assert kinds[0] == "Pub"
            assert {"SubBefore", "SubAfter"} <= set(kinds)
            pub = events[0]
            assert pub.group == "pg-traced"
            assert pub.success is True
            assert "topic Traced" in pub.detail
            after = next(e for e in events if e.kind == "SubAfter")
            assert after.group == "cg-traced"
            assert after.success is True

        run(main(), timeout=60)
