"""A broker group whose master goes down and comes back while its slave acts for it
(enableSlaveActingMaster), beside a second group's master: what the failover tests of delayed
messages (test_acting_master.py) and of timer messages (test_acting_master_timer.py) share."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

from cluster.client.admin import AdminClient
from cluster.client.producer import Producer
from cluster.client.pull import read_queue
from cluster.client.route import MessageQueue
from storage.record import MessageRecord
from tests.integration.procs import free_port, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import run
from tests.integration.test_ha import slave_in_sync, wait_for


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


async def runtime(admin: AdminClient, group: str, broker_id: int) -> dict | None:
    try:
        info = await admin.cluster_info()
        address = info["brokerAddrTable"][group]["brokerAddrs"].get(broker_id)
        return await admin.broker_runtime_info(address) if address else None
    except Exception:
        return None


async def acting(admin: AdminClient, wanted: bool) -> dict | None:
    """broker-a's slave's runtime info once it acts as master (``wanted``) or stood down."""
    info = await runtime(admin, "broker-a", 1)
    if info is not None and (info.get("actingMaster") == "true") == wanted:
        return info
    return None


async def copies_reached_slave(admin: AdminClient) -> bool:
    """Whether broker-a's slave has every byte its master wrote."""
    return await slave_in_sync(admin.instance.namesrv_addrs[0])


async def records(admin: AdminClient, topic: str) -> list[tuple[str, MessageRecord]]:
    """(broker name, record) of every record ``topic`` holds, over both groups' queues."""
    route = await admin.instance.fetch_route(topic)
    found = []
    for queue_data in route.queue_datas:
        for queue_id in range(int(queue_data["readQueueNums"])):
            mq = MessageQueue(topic, queue_data["brokerName"], queue_id)
            found.extend((mq.broker_name, r) for r in await read_queue(admin.instance, mq))
    return found


async def key_counts(admin: AdminClient, topic: str) -> Counter:
    """How many copies of each key ``topic`` holds, over both groups' queues."""
    return Counter(record.keys for _, record in await records(admin, topic))


async def all_there(admin: AdminClient, topic: str, prefix: str, count: int) -> Counter | None:
    """The key counts once ``count`` keys ``prefix-i`` are there, else None."""
    found = await key_counts(admin, topic)
    return found if sum(1 for k in found if k.startswith(prefix + "-")) >= count else None


def master_down_and_back(tmp_path, settings: dict[str, str], producer_group: str,
                         before: Callable[[AdminClient, Producer], Awaitable],
                         during: Callable[[AdminClient], Awaitable],
                         after: Callable[[AdminClient, Producer], Awaitable]) -> tuple:
    """Start a name server, broker-a's master and slave and broker-b's master (``settings`` in
    each broker.conf); run ``before(admin, producer)`` once the slave is in sync, SIGKILL the
    master (nothing persisted at shutdown), run ``during(admin)``, start the master again and,
    once the slave stood down and reconnected, run ``after(admin, producer)``. Returns the
    three results."""
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        namesrv = ns.address
        mconf, sconf, bconf = group_confs(tmp_path, namesrv, settings)
        master = running("cluster.broker", "-c", mconf, env=env)
        master_node = master.__enter__()
        try:
            with running("cluster.broker", "-c", sconf, env=env), \
                    running("cluster.broker", "-c", bconf, env=env):
                async def until_the_return():
                    async with AdminClient(namesrv) as admin, \
                            Producer(producer_group, namesrv, send_msg_timeout=5) as producer:
                        await wait_for(lambda: slave_in_sync(namesrv), what="the slave to connect")
                        first = await before(admin, producer)
                        master_node.process.kill()
                        await asyncio.to_thread(master_node.process.wait, 10)
                        return first, await during(admin)

                first, second = run(until_the_return())
                master.__exit__(None, None, None)
                with running("cluster.broker", "-c", mconf, env=env):
                    async def after_the_return():
                        async with AdminClient(namesrv) as admin, \
                                Producer(producer_group, namesrv, send_msg_timeout=5) as producer:
                            await wait_for(lambda: acting(admin, False), timeout=15,
                                           what="the slave to stand down")
                            await wait_for(lambda: slave_in_sync(namesrv),
                                           what="the slave to reconnect")
                            return await after(admin, producer)

                    return first, second, run(after_the_return())
        finally:
            master.__exit__(None, None, None)
