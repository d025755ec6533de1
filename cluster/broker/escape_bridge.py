"""EscapeBridge: a slave acting as master hands the messages it would write to another group's master.

A slave's CommitLog is a byte copy of its master's: writing to it would fork the two. So when a
slave acts for a master that is down (``enableSlaveActingMaster``) and has a message to put,
such as a delayed message whose time has come, it sends it, as a producer would, to the master
of another broker group that serves the topic (RocketMQ 5's remote escape,
``enableRemoteEscape``). The message keeps its properties, UNIQ_KEY included, so consumers see
the msgId the producer was given.
"""

from __future__ import annotations

import itertools
import logging
import time

from cluster.broker.topic_config import PERM_WRITE
from cluster.client.route import MASTER_ID, TopicRouteData
from cluster.remoting import fastjson
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from cluster.topic_validator import RETRY_GROUP_TOPIC_PREFIX
from storage.message import MessageExtBrokerInner, properties_to_string

log = logging.getLogger(__name__)

ESCAPE_PRODUCER_GROUP = "RMQ_SYS_ESCAPE_PRODUCER"
ROUTE_TTL = 3.0  # seconds a route is trusted: a failover changes them
# Answers that mean the message is stored (durability short of what was asked is still stored).
_STORED = {ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE}


class NamesrvLookup:
    """Routes and cluster membership from the broker's name servers, asked in turn."""

    def __init__(self, namesrv_list: list[str], client: RemotingClient) -> None:
        self.namesrv_list = namesrv_list
        self.client = client
        self._index = 0

    async def _ask(self, code: int, fields: dict | None = None):
        last: Exception | None = None
        for _ in range(max(1, len(self.namesrv_list))):
            if not self.namesrv_list:
                break
            address = self.namesrv_list[self._index % len(self.namesrv_list)]
            try:
                return await self.client.invoke(address, request(code, fields), 3)
            except RemotingError as exc:
                last = exc
                self._index += 1
        raise RemotingError(f"no name server answered: {last}")

    async def broker_addr_table(self) -> dict[str, dict[int, str]] | None:
        """Broker name -> {brokerId: address}, as the name servers see the cluster now."""
        response = await self._ask(RequestCode.GET_BROKER_CLUSTER_INFO)
        if response.code != ResponseCode.SUCCESS or not response.body:
            return None
        table = fastjson.loads(response.body).get("brokerAddrTable") or {}
        return {name: {int(k): v for k, v in (data.get("brokerAddrs") or {}).items()}
                for name, data in table.items()}

    async def all_masters(self) -> dict[str, str]:
        table = await self.broker_addr_table() or {}
        return {name: addrs[MASTER_ID] for name, addrs in table.items() if MASTER_ID in addrs}

    async def topic_route(self, topic: str) -> TopicRouteData | None:
        response = await self._ask(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if response.code != ResponseCode.SUCCESS:
            return None
        return TopicRouteData.parse(response.body)


class EscapeBridge:
    def __init__(self, broker_name: str, lookup: NamesrvLookup, client: RemotingClient) -> None:
        self.broker_name = broker_name
        self.lookup = lookup
        self.client = client
        self.escaped = 0
        self._routes: dict[str, tuple[float, list[tuple[str, str, int]]]] = {}
        self._turn = itertools.count()

    async def _targets(self, topic: str) -> list[tuple[str, str, int]]:
        """(broker name, master address, write queues) of the other groups that take ``topic``."""
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL:
            return cached[1]
        targets = []
        route = await self.lookup.topic_route(topic)
        if route is not None:
            masters = route.master_addrs()
            for queue_data in route.queue_datas:
                name = queue_data["brokerName"]
                if (name != self.broker_name and name in masters
                        and int(queue_data.get("perm", 6)) & PERM_WRITE
                        and int(queue_data.get("writeQueueNums", 0)) > 0):
                    targets.append((name, masters[name], int(queue_data["writeQueueNums"])))
        if not targets and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # A group's retry topic exists where its consumers sent messages back; any master
            # creates it on a send, as RocketMQ does for retry topics.
            masters = await self.lookup.all_masters()
            targets = [(name, addr, 1) for name, addr in sorted(masters.items())
                       if name != self.broker_name]
        targets.sort()
        self._routes[topic] = (time.monotonic(), targets)
        return targets

    async def put(self, msg: MessageExtBrokerInner) -> bool:
        """Store ``msg`` on another group's master; False when none would take it now."""
        try:
            targets = await self._targets(msg.topic)
        except RemotingError as exc:
            log.warning("no route to escape a %s message to: %s", msg.topic, exc)
            return False
        if not targets:
            return False
        turn = next(self._turn)
        for attempt in range(len(targets)):
            name, address, queues = targets[(turn + attempt) % len(targets)]
            fields = {"a": ESCAPE_PRODUCER_GROUP, "b": msg.topic, "c": "TBW102", "d": 4,
                      "e": turn % queues, "f": msg.sys_flag, "g": msg.born_timestamp,
                      "h": msg.flag, "i": properties_to_string(msg.properties),
                      "j": msg.reconsume_times, "k": False, "m": False}
            try:
                response = await self.client.invoke(
                    address, request(RequestCode.SEND_MESSAGE_V2, fields, msg.body), 5)
            except RemotingError as exc:
                log.warning("escaping a %s message to %s failed: %s", msg.topic, name, exc)
                self._routes.pop(msg.topic, None)
                continue
            if response.code in _STORED:
                self.escaped += 1
                return True
            log.warning("%s refused an escaped %s message: %s %s", name, msg.topic, response.code,
                        response.remark)
            self._routes.pop(msg.topic, None)
        return False
