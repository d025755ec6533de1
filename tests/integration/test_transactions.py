"""Transactional messages with real processes: commit, rollback, check-back, check limit."""

from __future__ import annotations

import asyncio

import pytest

from cluster.client.admin import AdminClient
from cluster.client.consumer import PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import LocalTransactionState, TransactionProducer
from cluster.remoting.codes import RequestCode
from storage.message_id import decode_message_id
from storage.record import iter_records
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run

pytestmark = pytest.mark.integration


class Parties:
    """A push consumer of Payments and a transaction producer whose checker answers from
    ``decided`` (UNKNOW when undecided) and notes every key it was asked about."""

    def __init__(self, namesrv: str, suffix: str) -> None:
        self.received: list[str] = []
        self.decided: dict[str, LocalTransactionState] = {}
        self.checked: list[str] = []
        self.consumer = PushConsumer(f"cg-{suffix}", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        self.consumer.subscribe("Payments", "*")
        self.consumer.register_listener(self._listener)
        self.producer = TransactionProducer(f"pg-{suffix}", namesrv)
        self.producer.transaction_checker = self._checker

    async def _listener(self, messages):
        self.received.extend(m.keys for m in messages)

    async def _checker(self, message):
        # The broker asks about what the producer left open; it may be decided by now.
        self.checked.append(message.keys)
        return self.decided.get(message.keys, LocalTransactionState.UNKNOW)

    async def start(self) -> None:
        await self.producer.start()
        await self.consumer.start()

    async def shutdown(self) -> None:
        await self.consumer.shutdown()
        await self.producer.shutdown()


def test_commit_rollback_and_check_back(tmp_path):
    env = {"HOME": str(tmp_path)}
    conf = broker_conf(tmp_path, "", transactionTimeOut="1000", transactionCheckInterval="1000",
                       transactionCheckMax="3")
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", conf, "-n", ns.address, env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Payments", 4)
            parties = Parties(ns.address, "tx")
            producer, received, decided = parties.producer, parties.received, parties.decided
            await parties.start()
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
                for _ in range(200):  # (a loaded machine: the consumer may take seconds)
                    if "committed" in received:
                        break
                    await asyncio.sleep(0.05)
                assert received == ["committed"]  # half messages are invisible until committed
                async with AdminClient(ns.address) as admin:
                    pending = sorted(r.keys for r in await admin.pending_half_messages())
                    info = await admin.broker_runtime_info(broker.address)
                assert pending == ["checked", "never-decided"]
                # The broker counts them too (the console's overview), and the clients here.
                assert info["transactionOpenNum"] == "2"
                assert int(info["producerClientNum"]) >= 1
                assert int(info["consumerClientNum"]) >= 1
                for _ in range(100):  # both past transactionTimeOut: the check-back asks about them
                    async with AdminClient(ns.address) as admin:
                        info = await admin.broker_runtime_info(broker.address)
                    if info["transactionCheckingNum"] == "2":
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"checking {info['transactionCheckingNum']}, not 2")
                assert info["transactionOpenNum"] == "2"
                decided["checked"] = LocalTransactionState.COMMIT_MESSAGE  # decided later
                for _ in range(200):
                    if "checked" in received:
                        break
                    await asyncio.sleep(0.05)
                assert sorted(received) == ["checked", "committed"]
                # "never-decided" is checked transactionCheckMax times, then given up.
                for _ in range(200):
                    async with AdminClient(ns.address) as admin:
                        if not await admin.pending_half_messages():
                            break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("never-decided was not given up after its checks")
                assert sorted(received) == ["checked", "committed"]
                async with AdminClient(ns.address) as admin:
                    info = await admin.broker_runtime_info(broker.address)
                assert (info["transactionOpenNum"], info["transactionCheckingNum"]) == ("0", "0")
            finally:
                await parties.shutdown()

        run(main(), timeout=90)


def test_check_counts_survive_a_restart_and_a_late_answer_commits_once(tmp_path):
    """The check-back keeps its place and its counts in the store (RocketMQ's way: copies put
    back with TRANSACTION_CHECK_TIMES, progress as CID_RMQ_SYS_TRANS offsets), so that:
    a restart neither resets a transaction's checks nor loses one; the producer's own late
    answer for a transaction already put back for a check, and the answer to that check,
    commit it once; and the pending list is right past the first thousand transactions."""
    env = {"HOME": str(tmp_path)}
    conf = broker_conf(tmp_path, "", transactionTimeOut="1000", transactionCheckInterval="1000",
                       transactionCheckMax="6")
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        async def pending_by_key():
            async with AdminClient(ns.address) as admin:
                return {r.keys: int(r.properties.get("TRANSACTION_CHECK_TIMES", "0"))
                        for r in await admin.pending_half_messages()}

        async def wait_for(condition, what, seconds=45.0):
            for _ in range(int(seconds / 0.1)):
                if await condition():
                    return
                await asyncio.sleep(0.1)
            raise AssertionError(f"timed out waiting for {what}")

        with running("cluster.broker", "-c", conf, "-n", ns.address, env=env) as broker:
            async def before_restart():
                await create_topic({"a": broker}, "Payments", 4)
                parties = Parties(ns.address, "tx2")
                producer, received, decided, checked = (parties.producer, parties.received,
                                                        parties.decided, parties.checked)
                await parties.start()
                try:
                    async def commit(msg, result):
                        return LocalTransactionState.COMMIT_MESSAGE

                    async def unknown(msg, result):
                        return LocalTransactionState.UNKNOW

                    for i in range(1100):
                        await producer.send_message_in_transaction(
                            Message("Payments", b"x", keys=f"c-{i}"), commit)
                    late, _ = await producer.send_message_in_transaction(
                        Message("Payments", b"late", keys="late"), unknown)
                    await producer.send_message_in_transaction(
                        Message("Payments", b"abandoned", keys="abandoned"), unknown)
                    async def both_pending():
                        return set(await pending_by_key()) == {"late", "abandoned"}
                    await wait_for(both_pending, "the two open transactions in the pending list", 10)

                    # "late" is put back and checked; then the producer's own answer for the
                    # original arrives, and the check is answered with a commit as well.
                    async def late_checked():
                        return "late" in checked
                    await wait_for(late_checked, "the check of 'late'")
                    await producer.instance.remoting.invoke_oneway(
                        producer.instance.master_addr("broker-a"), producer._end_request(
                            late.queue_offset, decode_message_id(late.offset_msg_id).offset,
                            LocalTransactionState.COMMIT_MESSAGE, late.msg_id, late.transaction_id,
                            from_check=False))
                    decided["late"] = LocalTransactionState.COMMIT_MESSAGE

                    async def all_received():
                        return len(set(received)) == 1101
                    await wait_for(all_received, "the committed messages", 60)
                    await asyncio.sleep(3.0)  # three more check rounds
                    assert received.count("late") == 1

                    async def abandoned_checked_twice():
                        return (await pending_by_key()).get("abandoned", 0) >= 2
                    await wait_for(abandoned_checked_twice, "two checks of 'abandoned'")
                finally:
                    await parties.shutdown()

            run(before_restart(), timeout=200)
            checks_before = run(pending_by_key())["abandoned"]
            assert broker.terminate() == 0

        with running("cluster.broker", "-c", conf, "-n", ns.address, env=env):
            async def after_restart():
                seen = await pending_by_key()
                assert set(seen) == {"abandoned"}
                assert seen["abandoned"] >= checks_before  # not counted from 0 again

                async def rolled_back():
                    return not await pending_by_key()
                await wait_for(rolled_back, "'abandoned' to be given up after its checks")
                async with AdminClient(ns.address) as admin:
                    assert not [r for r in await admin.query_by_key("Payments", "abandoned")
                                if r.topic == "Payments"]

            run(after_restart(), timeout=100)


def test_a_check_back_shows_the_real_topic_and_queue(tmp_path):
    """CHECK_TRANSACTION_STATE carries the half message restored to the topic and queue it was
    sent to, as RocketMQ's broker sends it (every client's checker sees the application's
    topic, never RMQ_SYS_TRANS_HALF_TOPIC)."""
    env = {"HOME": str(tmp_path)}
    conf = broker_conf(tmp_path, "", transactionTimeOut="1000", transactionCheckInterval="1000")
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", conf, "-n", ns.address, env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Payments", 4)
            producer = TransactionProducer("pg-real-topic", ns.address)
            asked = []
            raw = []

            async def checker(message):
                asked.append((message.topic, message.message_queue.broker_name,
                              message.message_queue.queue_id, message.keys))
                return LocalTransactionState.ROLLBACK_MESSAGE

            async def capture(connection, command):
                if command.code == RequestCode.CHECK_TRANSACTION_STATE:
                    raw.extend(iter_records(command.body))
                return  # (then handled as usual)

            producer.transaction_checker = checker
            producer.instance.server_request_hook = capture
            await producer.start()
            try:
                async def unknown(msg, result):
                    return LocalTransactionState.UNKNOW

                await producer.send_message_in_transaction(
                    Message("Payments", b"open", keys="open"), unknown)
                for _ in range(150):
                    if asked:
                        break
                    await asyncio.sleep(0.1)
            finally:
                await producer.shutdown()
            record = raw[0]
            queue_id = int(record.properties["REAL_QID"])  # (kept, as RocketMQ keeps it)
            assert (record.topic, record.queue_id, record.body) == ("Payments", queue_id, b"open")
            assert asked[0] == ("Payments", "broker-a", queue_id, "open")

        run(main(), timeout=60)
