"""The broker's REGISTER_BROKER as the name server takes it: a broker whose brokerPermission is
not read and write (4 while it is drained) registers every topic under it, as RocketMQ's
registerBrokerAll does, so clients stop routing sends to it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from cluster.broker.config import BrokerConfig
from cluster.broker.registration import BrokerRegistration
from cluster.namesrv.kv_config import KVConfigManager
from cluster.namesrv.processor import NamesrvProcessor
from cluster.namesrv.route_info import RouteInfoManager


class Peer:
    remote_address = "127.0.0.1:40000"
    peer = ("127.0.0.1", 40000)


class NameServerLink:
    """Stands for the RemotingClient: each request goes straight to a processor."""

    def __init__(self, processor: NamesrvProcessor) -> None:
        self.processor = processor

    async def invoke(self, address, command, timeout):
        return self.processor.register_broker(Peer(), command)

    async def close(self) -> None:
        pass


def _topic(name: str, perm: int) -> dict:
    return {"order": False, "perm": perm, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
            "topicName": name, "topicSysFlag": 0, "writeQueueNums": 4}


def _routes_after_registering(broker_permission: int) -> RouteInfoManager:
    config = BrokerConfig(broker_name="broker-a", namesrv_addr="127.0.0.1:9876",
                          broker_permission=broker_permission)
    topics = SimpleNamespace(wrapper_json=lambda names=None: {
        "dataVersion": {"counter": 1, "timestamp": 1},
        "topicConfigTable": {"Orders": _topic("Orders", 6), "Hidden": _topic("Hidden", 2),
                             "Inherit": _topic("Inherit", 7)}})
    registration = BrokerRegistration(SimpleNamespace(config=config, topics=topics))
    routes = RouteInfoManager()
    registration.client = NameServerLink(NamesrvProcessor(routes, KVConfigManager(None)))
    asyncio.run(registration.register_all())
    assert registration.registered_once.is_set()
    return routes


def _perms(routes: RouteInfoManager) -> dict[str, int]:
    return {topic: routes.pickup_topic_route_data(topic)["queueDatas"][0].perm
            for topic in routes.get_all_topic_list()}


def test_a_drained_broker_registers_every_topic_read_only():
    assert _perms(_routes_after_registering(4)) == {"Orders": 4, "Inherit": 4,
                                                    "Hidden": 0}  # never a bit it lacked


def test_a_read_write_broker_registers_each_topic_as_it_is():
    assert _perms(_routes_after_registering(6)) == {"Orders": 6, "Hidden": 2, "Inherit": 7}
