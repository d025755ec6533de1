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
from tests.integration.acting_group import (
    acting,
    all_there,
    broker_a_queue,
    copies_reached_slave,
    key_counts,
    master_down_and_back,
    records,
    runtime,
)
from tests.integration.test_ha import wait_for

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


async def _pending(admin: AdminClient, broker_id: int, count: int) -> dict | None:
    info = await runtime(admin, "broker-a", broker_id)
    return info if info is not None and info.get("timerPendingNum") == str(count) else None


def test_a_slave_delivers_timers_while_its_master_is_down_and_the_master_does_not_repeat_them(
        tmp_path):
    async def before_the_failure(admin, producer):
        await admin.create_topic(TOPIC, 2, 2)
        # Delivered by the master just before it dies: the progress the slave copied (every
        # 10 s) does not know yet, but the slave has the copies.
        await send_timers(producer, "early", 5, TIMER_DELAY_MS="500")
        await wait_for(lambda: all_there(admin, TOPIC, "early", 5), timeout=15,
                       what="the master to deliver the early timers")
        await wait_for(lambda: copies_reached_slave(admin), what="the copies to reach the slave")
        due = int(time.time() * 1000) + 4_000
        await send_timers(producer, "late", 10, TIMER_DELIVER_MS=str(due))
        # Pending on the slave long after the master is back: handed back, not lost.
        await send_timers(producer, "far", 3, TIMER_DELAY_SEC="3600")
        return due

    async def while_the_master_is_down(admin):
        slave = await wait_for(lambda: acting(admin, True), timeout=15,
                               what="the slave to act as master")
        await wait_for(lambda: all_there(admin, TOPIC, "late", 10), timeout=20,
                       what="the late timers through broker-b")
        return slave, await records(admin, TOPIC)

    async def after_the_return(admin, producer):
        master_info = await wait_for(lambda: _pending(admin, 0, 3), timeout=15,
                                     what="the returned master to file the far timers")
        await send_timers(producer, "after", 5, TIMER_DELAY_MS="500")
        await wait_for(lambda: all_there(admin, TOPIC, "after", 5), timeout=15,
                       what="the returned master to deliver")
        await asyncio.sleep(2.0)  # room for any second copy to show up
        return master_info, await key_counts(admin, TOPIC)

    due, (slave, while_down), (master_info, after) = master_down_and_back(
        tmp_path, ACTING, "pg-timer-failover", before_the_failure, while_the_master_is_down,
        after_the_return)
    assert slave["brokerRole"] == "SLAVE"
    assert "timerPendingNum" in slave  # its timers show while it acts
    found = Counter(record.keys for _, record in while_down)
    # Each once: the early ones only from the master, the late ones from the slave through
    # broker-b (the only master left), none before its time.
    assert all(found[f"early-{i}"] == 1 for i in range(5))
    assert all(found[f"late-{i}"] == 1 for i in range(10))
    late = [(name, r) for name, r in while_down if r.keys.startswith("late-")]
    assert all(name == "broker-b" and r.store_timestamp >= due for name, r in late)
    assert not any(k.startswith("far-") for k in found)
    # The returned master took the slave's progress: nothing delivered twice, and the far
    # timers wait with it.
    keys = [f"{kind}-{i}" for kind, count in (("early", 5), ("late", 10), ("after", 5))
            for i in range(count)]
    assert {k: after[k] for k in keys} == dict.fromkeys(keys, 1)
    assert sum(after.values()) == len(keys)
    assert master_info["timerPendingNum"] == "3"
