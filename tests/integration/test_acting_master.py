"""Delayed messages while a master is down: its slave acts for it (enableSlaveActingMaster)."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from tests.integration.acting_group import (
    acting,
    all_there,
    broker_a_queue,
    copies_reached_slave,
    key_counts,
    master_down_and_back,
)
from tests.integration.test_ha import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOPIC = "DelayFailover"
LEVELS = "1s 2s 5s 10s"
ACTING = {"enableSlaveActingMaster": "true", "enableRemoteEscape": "true",
          "messageDelayLevel": LEVELS, "mapedFileSizeCommitLog": str(1 << 20)}


async def send_delayed(producer: Producer, kind: str, count: int, level: int) -> None:
    """``count`` messages keyed ``kind-i`` with delay ``level``, all to broker-a."""
    for i in range(count):
        result = await producer.send(
            Message(TOPIC, kind.encode(), keys=f"{kind}-{i}", delay_time_level=level),
            selector=broker_a_queue)
        assert result.status is SendStatus.SEND_OK


def test_a_slave_delivers_delayed_messages_while_its_master_is_down_and_hands_back(tmp_path):
    async def before_the_failure(admin, producer):
        await admin.create_topic(TOPIC, 2, 2)
        # Delivered by the master just before it dies: its delay offsets on disk (written every
        # 10 s) do not know yet, but the slave has the copies.
        await send_delayed(producer, "early", 10, level=1)
        await wait_for(lambda: all_there(admin, TOPIC, "early", 10), timeout=15,
                       what="the master to deliver the early messages")
        await wait_for(lambda: copies_reached_slave(admin), what="the copies to reach the slave")
        sent_at = time.time()
        await send_delayed(producer, "late", 10, level=3)
        return sent_at

    async def while_the_master_is_down(admin):
        slave = await wait_for(lambda: acting(admin, True), timeout=15,
                               what="the slave to act as master")
        copies = await wait_for(lambda: all_there(admin, TOPIC, "late", 10), timeout=20,
                                what="the late messages through broker-b")
        return slave, copies, time.time()

    async def after_the_return(admin, producer):
        await send_delayed(producer, "after", 5, level=1)
        await wait_for(lambda: all_there(admin, TOPIC, "after", 5), timeout=15,
                       what="the returned master to deliver")
        await asyncio.sleep(2.0)  # room for any second copy to show up
        return await key_counts(admin, TOPIC)

    sent_at, (slave, copies, arrived_at), after = master_down_and_back(
        tmp_path, ACTING, "pg-delay-failover", before_the_failure, while_the_master_is_down,
        after_the_return)
    assert slave["brokerRole"] == "SLAVE"
    assert arrived_at - sent_at >= 5.0  # level 3 is 5 s, counted from the store time
    # Each message exactly once: the early ones only from the master, the late ones from the
    # slave, through broker-b (the only master left).
    assert all(copies[f"early-{i}"] == 1 and copies[f"late-{i}"] == 1 for i in range(10))
    # The returned master took the slave's offsets: nothing delivered twice.
    keys = [f"{kind}-{i}" for kind in ("early", "late") for i in range(10)]
    keys += [f"after-{i}" for i in range(5)]
    assert {k: after[k] for k in keys} == dict.fromkeys(keys, 1)
    assert sum(after.values()) == len(keys)
