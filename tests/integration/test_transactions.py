"""Transactional messages with real processes: commit, rollback, check-back, check limit."""

from __future__ import annotations

import asyncio

import pytest

from cluster.client.admin import AdminClient
from cluster.client.consumer import PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import LocalTransactionState, TransactionProducer
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run

pytestmark = pytest.mark.integration


def test_commit_rollback_and_check_back(tmp_path):
    env = {"HOME": str(tmp_path)}
    conf = broker_conf(tmp_path, "", transactionTimeOut="1000", transactionCheckInterval="1000",
                       transactionCheckMax="3")
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", conf, "-n", ns.address, env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Payments", 4)
            received: list[str] = []
            consumer = PushConsumer("cg-tx", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("Payments", "*")

            async def listener(messages):
                received.extend(m.keys for m in messages)

            consumer.register_listener(listener)
            producer = TransactionProducer("pg-tx", ns.address)
            decided: dict[str, LocalTransactionState] = {}

            async def checker(message):
                # The broker asks about what the producer left open; this one decides now.
                return decided.get(message.keys, LocalTransactionState.UNKNOW)

            producer.transaction_checker = checker
            await producer.start()
            await consumer.start()
            try:
                async def local(state):
                    async def run_local(msg, result):
                        assert result.status is SendStatus.SEND_OK
                        return state
                    return run_local

                for key, state in (("committed", LocalTransactionState.COMMIT_MESSAGE),
                                   ("rolled-back", LocalTransactionState.ROLLBACK_MESSAGE),
                                   ("checked", LocalTransactionState.UNKNOW),
                                   ("never-decided", LocalTransactionState.UNKNOW)):
                    await producer.send_message_in_transaction(
                        Message("Payments", key.encode(), keys=key), await local(state))
                for _ in range(40):
                    if "committed" in received:
                        break
                    await asyncio.sleep(0.05)
                assert received == ["committed"]  # half messages are invisible until committed
                async with AdminClient(ns.address) as admin:
                    pending = sorted(r.keys for r in await admin.pending_half_messages())
                assert pending == ["checked", "never-decided"]
                decided["checked"] = LocalTransactionState.COMMIT_MESSAGE  # decided later
                for _ in range(200):
                    if "checked" in received:
                        break
                    await asyncio.sleep(0.05)
                assert sorted(received) == ["checked", "committed"]
                # "never-decided" is checked transactionCheckMax times, then rolled back.
                for _ in range(200):
                    async with AdminClient(ns.address) as admin:
                        if not await admin.pending_half_messages():
                            break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("never-decided was not rolled back after its checks")
                assert sorted(received) == ["checked", "committed"]
            finally:
                await consumer.shutdown()
                await producer.shutdown()

        run(main(), timeout=90)
