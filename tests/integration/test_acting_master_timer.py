"""Timer messages while a master is down: its slave acts for it (enableSlaveActingMaster),
delivers them through another group's master, and hands its progress back."""

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
from storage.record import MessageRecord
from tests.integration.procs import running
from tests.integration.test_acting_master import broker_a_queue, group_confs, runtime
from tests.integration.test_client import run
from tests.integration.test_ha import slave_in_sync, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOPIC = "TimerFailover"
ACTING = {"enableSlaveActingMaster": "true", "enableRemoteEscape": "true",
          "mapedFileSizeCommitLog": str(1 << 20)}


async def send_timers(producer: Producer, kind: str, count: int, **timer: str) -> None:
    """``count`` timer messages keyed ``kind-i`` (``timer``: their timer property), to broker-a."""
    for i in range(count):
        result = await producer.send(Message(TOPIC, kind.encode(), keys=f"{kind}-{i}",
                                             properties=dict(timer)), selector=broker_a_queue)
        assert result.status is SendStatus.SEND_OK


async def copies(admin: AdminClient) -> list[tuple[str, MessageRecord]]:
    """(broker name, record) of every record the topic holds, over both groups' queues."""
    route = await admin.instance.fetch_route(TOPIC)
    records = []
    for queue_data in route.queue_datas:
        for queue_id in range(int(queue_data["readQueueNums"])):
            mq = MessageQueue(TOPIC, queue_data["brokerName"], queue_id)
            records.extend((mq.broker_name, r) for r in await read_queue(admin.instance, mq))
    return records


async def all_there(admin: AdminClient, prefix: str, count: int) -> Counter | None:
    found = Counter(record.keys for _, record in await copies(admin))
    return found if sum(1 for k in found if k.startswith(prefix + "-")) >= count else None


async def acting(admin: AdminClient, wanted: bool) -> dict | None:
    info = await runtime(admin, "broker-a", 1)
    if info is not None and (info.get("actingMaster") == "true") == wanted:
        return info
    return None


def test_a_slave_delivers_timers_while_its_master_is_down_and_the_master_does_not_repeat_them(
        tmp_path):
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
                    # Delivered by the master just before it dies: the progress the slave
                    # copied (every 10 s) does not know yet, but the slave has the copies.
                    await send_timers(producer, "early", 5, TIMER_DELAY_MS="500")
                    await wait_for(lambda: all_there(admin, "early", 5), timeout=15,
                                   what="the master to deliver the early timers")
                    await wait_for(lambda: slave_in_sync(namesrv), what="the copies to reach the slave")
                    due = int(time.time() * 1000) + 4_000
                    await send_timers(producer, "late", 10, TIMER_DELIVER_MS=str(due))
                    # Pending on the slave long after the master is back: handed back, not lost.
                    await send_timers(producer, "far", 3, TIMER_DELAY_SEC="3600")
                    return due

                async def while_the_master_is_down(admin):
                    slave = await wait_for(lambda: acting(admin, True), timeout=15,
                                           what="the slave to act as master")
                    await wait_for(lambda: all_there(admin, "late", 10), timeout=20,
                                   what="the late timers through broker-b")
                    return slave, await copies(admin)

                async def main():
                    async with AdminClient(namesrv) as admin, \
                            Producer("pg-timer-failover", namesrv, send_msg_timeout=5) as producer:
                        due = await before_the_failure(admin, producer)
                        master_node.process.kill()  # SIGKILL: nothing persisted at shutdown
                        await asyncio.to_thread(master_node.process.wait, 10)
                        slave, records = await while_the_master_is_down(admin)
                        return due, slave, records

                due, slave, records = run(main())
                assert slave["brokerRole"] == "SLAVE"
                assert "timerPendingNum" in slave  # its timers show while it acts
                found = Counter(record.keys for _, record in records)
                # Each once: the early ones only from the master, the late ones from the slave
                # through broker-b (the only master left), none before its time.
                assert all(found[f"early-{i}"] == 1 for i in range(5))
                assert all(found[f"late-{i}"] == 1 for i in range(10))
                late = [(name, r) for name, r in records if r.keys.startswith("late-")]
                assert all(name == "broker-b" and r.store_timestamp >= due for name, r in late)
                assert not any(k.startswith("far-") for k in found)

                master.__exit__(None, None, None)
                with running("cluster.broker", "-c", mconf, env=env):
                    async def after_the_return():
                        async with AdminClient(namesrv) as admin, \
                                Producer("pg-timer-failover", namesrv, send_msg_timeout=5) as producer:
                            await wait_for(lambda: acting(admin, False), timeout=15,
                                           what="the slave to stand down")
                            await wait_for(lambda: slave_in_sync(namesrv), what="the slave to reconnect")
                            master_info = await wait_for(
                                lambda: _pending(admin, 0, 3), timeout=15,
                                what="the returned master to file the far timers")
                            await send_timers(producer, "after", 5, TIMER_DELAY_MS="500")
                            await wait_for(lambda: all_there(admin, "after", 5), timeout=15,
                                           what="the returned master to deliver")
                            await asyncio.sleep(2.0)  # room for any second copy to show up
                            return master_info, Counter(r.keys for _, r in await copies(admin))

                    master_info, found = run(after_the_return())
                    # The returned master took the slave's progress: nothing delivered twice,
                    # and the far timers wait with it.
                    keys = [f"{kind}-{i}" for kind, count in (("early", 5), ("late", 10),
                                                               ("after", 5)) for i in range(count)]
                    assert {k: found[k] for k in keys} == dict.fromkeys(keys, 1)
                    assert sum(found.values()) == len(keys)
                    assert master_info["timerPendingNum"] == "3"
        finally:
            master.__exit__(None, None, None)


async def _pending(admin: AdminClient, broker_id: int, count: int) -> dict | None:
    info = await runtime(admin, "broker-a", broker_id)
    return info if info is not None and info.get("timerPendingNum") == str(count) else None
