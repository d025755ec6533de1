"""Master/slave replication with real processes: a name server, a master and a slave."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from cluster.client.admin import AdminClient
from cluster.client.consumer import PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from storage.message_id import decode_message_id
from storage.record import MessageRecord, decode_record
from tests.integration.procs import free_port, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import run

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FILE_SIZE = 1 << 20


def master_conf(tmp_path, namesrv, role, port, ha_port, flush="SYNC_FLUSH"):
    return broker_conf(tmp_path, namesrv, "master", brokerName="broker-a", brokerId="0",
                       brokerRole=role, flushDiskType=flush, listenPort=str(port),
                       haListenPort=str(ha_port), mapedFileSizeCommitLog=str(FILE_SIZE))


def slave_conf(tmp_path, namesrv, port=0):
    return broker_conf(tmp_path, namesrv, "slave", brokerName="broker-a", brokerId="1",
                       brokerRole="SLAVE", listenPort=str(port), mapedFileSizeCommitLog=str(FILE_SIZE))


def commit_log(store_dir) -> tuple[int, bytes]:
    """(offset of the first byte, every CommitLog byte up to the last one written)."""
    directory = os.path.join(store_dir, "commitlog")
    names = sorted(os.listdir(directory))
    chunks = []
    for name in names:
        with open(os.path.join(directory, name), "rb") as handle:
            chunks.append(handle.read())
    data = b"".join(chunks)
    return int(names[0]), data.rstrip(b"\x00")


async def wait_for(predicate, timeout=30.0, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


async def ha_status(namesrv, broker_id):
    async with AdminClient(namesrv) as admin:
        try:
            info = await admin.cluster_info()
            address = info["brokerAddrTable"]["broker-a"]["brokerAddrs"].get(broker_id)
            return await admin.ha_status(address) if address else None
        except Exception:
            return None


async def slave_in_sync(namesrv):
    status = await ha_status(namesrv, 0)
    if not status or not status["haConnectionInfo"]:
        return False
    slave = status["haConnectionInfo"][0]
    return slave["state"] == "TRANSFER" and slave["slaveAckOffset"] == status["masterCommitLogMaxOffset"]


async def send_load(producer, topic, acked, stop, senders=16, prefix="k"):
    """Synchronous senders until ``stop``; every SEND_OK lands in ``acked`` (key -> msgId)."""
    counter = iter(range(10**9))

    async def sender():
        while not stop.is_set():
            key = f"{prefix}-{next(counter)}"
            try:
                result = await producer.send(Message(topic, key.encode() * 8, keys=key))
            except Exception:
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                acked[key] = result.offset_msg_id

    await asyncio.gather(*(sender() for _ in range(senders)))


def test_sync_master_failover_loses_no_acknowledged_message(tmp_path):
    env = {"HOME": str(tmp_path)}
    port, ha_port = free_port(), free_port()
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        namesrv = ns.address
        mconf = master_conf(tmp_path, namesrv, "SYNC_MASTER", port, ha_port)
        master = running("cluster.broker", "-c", mconf, env=env)
        master_node = master.__enter__()
        try:
            with running("cluster.broker", "-c", slave_conf(tmp_path, namesrv), env=env) as slave_node:
                async def main():
                    producer = Producer("pg-ha", namesrv, send_msg_timeout=5)
                    await producer.start()
                    consumed: set[str] = set()
                    consumer = PushConsumer("cg-ha", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                    consumer.subscribe("HaTopic", "*")

                    gate = asyncio.Event()  # held shut until the master is gone: a backlog

                    async def listener(messages):
                        await gate.wait()
                        consumed.update(m.keys for m in messages)

                    consumer.register_listener(listener)
                    try:
                        await wait_for(lambda: slave_in_sync(namesrv), what="the slave to connect")
                        first = await producer.send(Message("HaTopic", b"first", keys="first"))
                        assert first.status is SendStatus.SEND_OK
                        await consumer.start()
                        acked: dict[str, str] = {"first": first.offset_msg_id}
                        stop = asyncio.Event()
                        load = asyncio.ensure_future(send_load(producer, "HaTopic", acked, stop))
                        await asyncio.sleep(2.5)
                        master_node.process.kill()  # SIGKILL under load
                        await asyncio.to_thread(master_node.process.wait, 10)
                        await asyncio.sleep(1.0)
                        stop.set()
                        await load
                        gate.set()
                        assert len(acked) > 100

                        # Every acknowledged message is on the slave, byte for byte as the master wrote it.
                        slave_dir = tmp_path / "slave"
                        base, slave_bytes = commit_log(slave_dir)
                        m_base, master_bytes = commit_log(tmp_path / "master")
                        assert base == m_base == 0
                        assert master_bytes[: len(slave_bytes)] == slave_bytes
                        assert len(master_bytes) >= len(slave_bytes)
                        for key, msg_id in acked.items():
                            offset = decode_message_id(msg_id).offset
                            record = decode_record(slave_bytes, offset - base)
                            assert isinstance(record, MessageRecord)
                            assert record.keys == key

                        # Consumers go on from the slave while the master is down.
                        await wait_for(lambda: _has(consumed, acked), timeout=60,
                                       what="consumers to read every acknowledged message from the slave")
                        status = await ha_status(namesrv, 1)
                        assert status["master"] is False
                        async with AdminClient(namesrv) as admin:
                            slave_addr = (await admin.cluster_info())["brokerAddrTable"]["broker-a"][
                                "brokerAddrs"][1]
                            served = await admin.broker_runtime_info(slave_addr)
                        assert int(served["msgGetTotalTodayNow"]) > 0  # the backlog came from the slave
                    finally:
                        await consumer.shutdown()
                        await producer.shutdown()
                    return acked, len(consumed)

                acked, consumed_before = run(main(), timeout=150)

                # The master comes back on its own store, the slave reconnects, sends succeed again.
                with running("cluster.broker", "-c", mconf, env=env):
                    async def after():
                        producer = Producer("pg-ha2", namesrv, send_msg_timeout=5)
                        await producer.start()
                        consumed: set[str] = set()
                        consumer = PushConsumer("cg-ha", namesrv)
                        consumer.subscribe("HaTopic", "*")

                        async def listener(messages):
                            consumed.update(m.keys for m in messages)

                        consumer.register_listener(listener)
                        try:
                            await wait_for(lambda: slave_in_sync(namesrv), what="the slave to reconnect")
                            # Offsets committed to the slave while the master was down go back to
                            # the master with the slave's next metadata copy.
                            await wait_for(lambda: _committed(namesrv, consumed_before),
                                           what="offsets to reach the master")
                            await consumer.start()

                            async def send_ok():
                                result = await producer.send(Message("HaTopic", b"after", keys="after"))
                                return result.status is SendStatus.SEND_OK

                            await wait_for(send_ok, what="SYNC_MASTER sends to succeed again")
                            await wait_for(lambda: _has(consumed, {"after": 1}), what="the new message")
                            # The group did not start over from the beginning.
                            assert "first" not in consumed
                            await wait_for(lambda: slave_in_sync(namesrv), what="the slave to catch up")
                        finally:
                            await consumer.shutdown()
                            await producer.shutdown()

                    try:
                        run(after(), timeout=90)
                    except AssertionError:
                        print("".join(slave_node.lines[-60:]))
                        for who in ("slave", "master"):
                            path = tmp_path / who / "config" / "consumerOffset.json"
                            print(who, path.read_text() if path.exists() else None)
                        raise
                    _, slave_bytes = commit_log(tmp_path / "slave")
                    _, master_bytes = commit_log(tmp_path / "master")
                    assert slave_bytes == master_bytes
                    assert len(acked) > 100
        finally:
            master.__exit__(None, None, None)


async def _committed(namesrv, count):
    """Whether the master's offsets for cg-ha cover ``count`` consumed messages."""
    async with AdminClient(namesrv) as admin:
        try:
            stats = await admin.consume_stats("cg-ha", "HaTopic")
        except Exception:
            return False
    return sum(max(v["consumerOffset"], 0) for v in stats.values()) >= count


async def _has(consumed, keys):
    return set(keys) <= consumed


def test_slave_not_available_without_a_slave(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", master_conf(tmp_path, ns.address, "SYNC_MASTER", 0, 0),
                    env=env):
        async def main():
            async with Producer("pg-alone", ns.address) as producer:
                result = await producer.send(Message("Alone", b"x"))
                assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
                # ... but the message is stored: SLAVE_NOT_AVAILABLE is not a rollback.
                async with AdminClient(ns.address) as admin:
                    # (the auto-created topic reaches the name server just after the answer)
                    stats = await wait_for(lambda: admin.topic_stats("Alone"), timeout=10,
                                           what="the topic's route")
                assert sum(v["maxOffset"] for v in stats.values()) == 1

        run(main())


def test_async_master_reports_lag_and_a_restarted_slave_resumes(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        namesrv = ns.address
        mconf = master_conf(tmp_path, namesrv, "ASYNC_MASTER", 0, 0, flush="ASYNC_FLUSH")
        with running("cluster.broker", "-c", mconf, env=env) as master:
            sconf = slave_conf(tmp_path, namesrv)
            slave = running("cluster.broker", "-c", sconf, env=env)
            slave.__enter__()
            try:
                async def load_and_watch():
                    await wait_for(lambda: slave_in_sync(namesrv), what="the slave to connect")
                    async with Producer("pg-async", namesrv) as producer:
                        acked: dict[str, str] = {}
                        stop = asyncio.Event()
                        task = asyncio.ensure_future(send_load(producer, "AsyncTopic", acked, stop, 32))
                        samples = []
                        for _ in range(10):
                            await asyncio.sleep(0.3)
                            samples.append(await ha_status(namesrv, 0))
                        stop.set()
                        await task
                    # Lag is reported while the load runs ...
                    rates = [s["haConnectionInfo"][0]["transferredByteInSecond"] for s in samples
                             if s and s["haConnectionInfo"]]
                    assert any(r > 0 for r in rates)
                    connected = [s for s in samples if s and s["haConnectionInfo"]]
                    assert all("diff" in s["haConnectionInfo"][0] for s in connected)
                    # ... and closes once it stops.
                    await wait_for(lambda: slave_in_sync(namesrv), what="the lag to close")
                    status = await ha_status(namesrv, 0)
                    assert status["haConnectionInfo"][0]["diff"] == 0
                    return status["masterCommitLogMaxOffset"]

                reached = run(load_and_watch(), timeout=90)
            finally:
                slave.__exit__(None, None, None)

            # A restarted slave resumes from its own end, not from scratch.
            with running("cluster.broker", "-c", sconf, env=env):
                async def resume():
                    async with Producer("pg-async2", namesrv) as producer:
                        for i in range(20):
                            await producer.send(Message("AsyncTopic", b"more", keys=f"more-{i}"))
                    await wait_for(lambda: slave_in_sync(namesrv), what="the slave to catch up")

                run(resume(), timeout=60)
            starts = [line for line in master.lines if "starts at offset" in line]
            assert len(starts) == 2
            assert starts[0].rstrip().endswith("offset 0")
            resumed_from = int(starts[1].rsplit(" ", 1)[1])
            assert resumed_from == reached
            _, slave_bytes = commit_log(tmp_path / "slave")
            _, master_bytes = commit_log(tmp_path / "master")
            assert slave_bytes == master_bytes
