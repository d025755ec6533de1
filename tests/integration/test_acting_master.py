"""Delayed messages while a master is down: its slave acts for it (enableSlaveActingMaster)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from cluster.client.admin import AdminClient
from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from cluster.client.pull import read_queue
from cluster.client.route import MessageQueue
from tests.integration.procs import free_port, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import run
from tests.integration.test_ha import slave_in_sync, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOPIC = "DelayFailover"
LEVELS = "1s 2s 5s 10s"
ACTING = {"enableSlaveActingMaster": "true", "enableRemoteEscape": "true",
          "messageDelayLevel": LEVELS, "mapedFileSizeCommitLog": str(1 << 20)}


def group_confs(tmp_path, namesrv: str, acting: dict[str, str]) -> tuple[str, str, str]:
    """broker.conf files of broker-a's SYNC_MASTER (fixed ports, so that it comes back where
    it was) and its slave, and of broker-b's master, all with ``acting``'s settings."""
    port, ha_port = free_port(), free_port()
    mconf = broker_conf(tmp_path, namesrv, "a-master", brokerName="broker-a", brokerId="0",
                        brokerRole="SYNC_MASTER", listenPort=str(port),
                        haListenPort=str(ha_port), **acting)
    sconf = broker_conf(tmp_path, namesrv, "a-slave", brokerName="broker-a", brokerId="1",
                        brokerRole="SLAVE", **acting)
    bconf = broker_conf(tmp_path, namesrv, "b-master", brokerName="broker-b", **acting)
    return mconf, sconf, bconf


def broker_a_queue(queues: list[MessageQueue]) -> MessageQueue:
    return next(q for q in queues if q.broker_name == "broker-a")


async def send_delayed(producer: Producer, kind: str, count: int, level: int) -> None:
    """``count`` messages keyed ``kind-i`` with delay ``level``, all to broker-a."""
    for i in range(count):
        result = await producer.send(
            Message(TOPIC, kind.encode(), keys=f"{kind}-{i}", delay_time_level=level),
            selector=broker_a_queue)
        assert result.status is SendStatus.SEND_OK


async def deliveries(admin: AdminClient) -> Counter:
    """How many copies of each key the topic holds, over every queue of both groups."""
    route = await admin.instance.fetch_route(TOPIC)
    copies: Counter = Counter()
    for queue_data in route.queue_datas:
        for queue_id in range(int(queue_data["readQueueNums"])):
            mq = MessageQueue(TOPIC, queue_data["brokerName"], queue_id)
            copies.update(r.keys for r in await read_queue(admin.instance, mq))
    return copies


async def runtime(admin: AdminClient, group: str, broker_id: int) -> dict | None:
    try:
        info = await admin.cluster_info()
        address = info["brokerAddrTable"][group]["brokerAddrs"].get(broker_id)
        return await admin.broker_runtime_info(address) if address else None
    except Exception:
        return None


def test_a_slave_delivers_delayed_messages_while_its_master_is_down_and_hands_back(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        namesrv = ns.address
        mconf, sconf, bconf = group_confs(tmp_path, namesrv, ACTING)
        master = running("cluster.broker", "-c", mconf, env=env)
        master_node = master.__enter__()
        try:
            with running("cluster.broker", "-c", sconf, env=env), \
                    running("cluster.broker", "-c", bconf, env=env):
                async def before_the_failure(admin, producer):
                    await wait_for(lambda: slave_in_sync(namesrv), what="the slave to connect")
                    await admin.create_topic(TOPIC, 2, 2)
                    # Delivered by the master just before it dies: its delay offsets on disk
                    # (written every 10 s) do not know yet, but the slave has the copies.
                    await send_delayed(producer, "early", 10, level=1)
                    await wait_for(lambda: _all_there(admin, "early", 10), timeout=15,
                                   what="the master to deliver the early messages")
                    await wait_for(lambda: slave_in_sync(namesrv), what="the copies to reach the slave")
                    sent_at = time.time()
                    await send_delayed(producer, "late", 10, level=3)
                    return sent_at

                async def while_the_master_is_down(admin):
                    slave = await wait_for(lambda: _acting(admin, True), timeout=15,
                                           what="the slave to act as master")
                    assert slave["brokerRole"] == "SLAVE"
                    copies = await wait_for(lambda: _all_there(admin, "late", 10), timeout=20,
                                            what="the late messages through broker-b")
                    return copies, time.time()

                async def main():
                    async with AdminClient(namesrv) as admin, \
                            Producer("pg-delay-failover", namesrv, send_msg_timeout=5) as producer:
                        sent_at = await before_the_failure(admin, producer)
                        master_node.process.kill()  # SIGKILL: nothing persisted at shutdown
                        await asyncio.to_thread(master_node.process.wait, 10)
                        copies, arrived_at = await while_the_master_is_down(admin)
                        return sent_at, copies, arrived_at

                sent_at, copies, arrived_at = run(main())
                assert arrived_at - sent_at >= 5.0  # level 3 is 5 s, counted from the store time
                # Each message exactly once: the early ones only from the master, the late ones
                # from the slave, through broker-b (the only master left).
                assert all(copies[f"early-{i}"] == 1 and copies[f"late-{i}"] == 1 for i in range(10))

                master.__exit__(None, None, None)
                with running("cluster.broker", "-c", mconf, env=env):
                    async def after_the_return():
                        async with AdminClient(namesrv) as admin, \
                                Producer("pg-delay-failover", namesrv, send_msg_timeout=5) as producer:
                            await wait_for(lambda: _acting(admin, False), timeout=15,
                                           what="the slave to stand down")
                            await wait_for(lambda: slave_in_sync(namesrv), what="the slave to reconnect")
                            await send_delayed(producer, "after", 5, level=1)
                            await wait_for(lambda: _all_there(admin, "after", 5), timeout=15,
                                           what="the returned master to deliver")
                            await asyncio.sleep(2.0)  # room for any second copy to show up
                            return await deliveries(admin)

                    copies = run(after_the_return())
                    # The returned master took the slave's offsets: nothing delivered twice.
                    keys = [f"{kind}-{i}" for kind in ("early", "late") for i in range(10)]
                    keys += [f"after-{i}" for i in range(5)]
                    assert {k: copies[k] for k in keys} == dict.fromkeys(keys, 1)
                    assert sum(copies.values()) == len(keys)
        finally:
            master.__exit__(None, None, None)


async def _all_there(admin: AdminClient, prefix: str, count: int) -> Counter | None:
    copies = await deliveries(admin)
    return copies if sum(1 for k in copies if k.startswith(prefix + "-")) >= count else None


async def _acting(admin: AdminClient, wanted: bool) -> dict | None:
    info = await runtime(admin, "broker-a", 1)
    if info is not None and (info.get("actingMaster") == "true") == wanted:
        return info
    return None
