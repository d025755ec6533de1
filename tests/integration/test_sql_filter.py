"""SQL92 subscriptions evaluated on the broker, with real processes."""

from __future__ import annotations

import asyncio

import pytest

from cluster.client.consumer import PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.client.pull import PullConsumer, pull_message
from cluster.client.route import MessageQueue
from cluster.remoting.errors import BrokerResponseError
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run

pytestmark = pytest.mark.integration


def test_a_sql92_subscription_gets_only_the_matching_messages(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address, enablePropertyFilter="true"),
                    env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Orders", 2)
            async with Producer("pg-sql", ns.address) as producer:
                for i in range(20):
                    region = "eu" if i % 2 else "us"
                    await producer.send(Message("Orders", f"order {i}".encode(), tags="paid",
                                                properties={"amount": str(i), "region": region}))
            got: list[bytes] = []
            consumer = PushConsumer("cg-sql", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("Orders", "amount BETWEEN 5 AND 14 AND region = 'eu' AND TAGS = 'paid'",
                               expression_type="SQL92")

            async def listener(messages):
                got.extend(m.body for m in messages)

            consumer.register_listener(listener)
            await consumer.start()
            try:
                for _ in range(100):
                    if len(got) >= 5:
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
            finally:
                await consumer.shutdown()
            assert sorted(got) == sorted(f"order {i}".encode() for i in (5, 7, 9, 11, 13))

            pull = PullConsumer("cg-bad-sql", ns.address)
            await pull.start()
            try:
                with pytest.raises(BrokerResponseError, match="SUBSCRIPTION_PARSE_FAILED"):
                    await pull_message(pull.instance, "cg-bad-sql", MessageQueue("Orders", "broker-a", 0),
                                       "amount >", 0, expression_type="SQL92")
            finally:
                await pull.shutdown()

        run(main())
