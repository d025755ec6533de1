"""MQClientInstance: what producers and consumers of one process share.

Name-server lookups (routes, refreshed every 30 s), broker addresses, heartbeats to every
master every 30 s, and the requests brokers send to clients (NOTIFY_CONSUMER_IDS_CHANGED,
GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from cluster.client.errors import ClientArgumentError
from cluster.client.route import TopicRouteData, parse_mq_table
from cluster.remoting.busy_poll import DEFAULT_LIMIT_MICROS
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError, RemotingError

log = logging.getLogger(__name__)
POLL_NAME_SERVER_INTERVAL = 30.0
HEARTBEAT_INTERVAL = 30.0


class RouteListener(Protocol):
    """Told of every route the name servers give (a producer: its publish info)."""

    def route_topics(self) -> Iterable[str]:
        """Topics to refresh every 30 s, known to the name servers or not."""

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        """A route of ``topic`` was just read from a name server."""


def local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class MQClientInstance:
    def __init__(self, namesrv_addr: str, instance_name: str = "DEFAULT", *,
                 busy_poll_micros: int = DEFAULT_LIMIT_MICROS) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise ClientArgumentError("a name server address (host:port) is needed")
        self.client_ip = local_ip()
        self.instance_name = instance_name
        # RocketMQ's clientId with the pid in it (changeInstanceNameToPID): two processes of a
        # group on one host are two members of it.
        self.client_id = f"{self.client_ip}@{os.getpid()}#{instance_name}"
        # (cluster/remoting/busy_poll.py: a broker answering sooner than this is polled for,
        # not slept on; 0: never)
        self.remoting = RemotingClient(self._on_server_request, busy_poll_micros)
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        # Producers and consumers register themselves (they import this module, not the reverse).
        self.producers: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        self.route_listeners: list[RouteListener] = []
        self._namesrv_index = 0
        # Asked first about every request a broker sends (a proxy answers for its 5.x clients);
        # None from it: this instance's own handling.
        self.server_request_hook: Callable[[Any, RemotingCommand],
                                           Awaitable[RemotingCommand | None]] | None = None
        self._tasks: list[asyncio.Task] = []
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(POLL_NAME_SERVER_INTERVAL, self.refresh_routes)),
                       loop.create_task(self._every(HEARTBEAT_INTERVAL, self.send_heartbeat))]

    async def shutdown(self) -> None:
        self._started = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.remoting.close()

    async def _every(self, seconds: float, action) -> None:
        while self._started:
            await asyncio.sleep(seconds)
            try:
                await action()
            except Exception:
                log.exception("client task %s failed", action.__name__)

    # -- name servers -----------------------------------------------------------------------------
    async def invoke_namesrv(self, command: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Ask a name server, moving to the next one when one does not answer."""
        last_error: Exception | None = None
        for _ in range(len(self.namesrv_addrs)):
            address = self.namesrv_addrs[self._namesrv_index % len(self.namesrv_addrs)]
            try:
                return await self.remoting.invoke(address, command, timeout)
            except RemotingError as exc:
                last_error = exc
                self._namesrv_index += 1
        raise last_error  # type: ignore[misc]

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """The route from a name server (None when the topic has none); updates the caches."""
        response = await self.invoke_namesrv(request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                     {"topic": topic}))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(response.code, response.remark, response.code)
        route = TopicRouteData.parse(response.body)
        self.routes[topic] = route
        for listener in list(self.route_listeners):
            listener.on_route(topic, route)
        known = {a for addrs in self.broker_addrs.values() for a in addrs.values()}
        for name, addrs in route.broker_addrs().items():
            self.broker_addrs[name] = addrs
        if self._started and any(a not in known for addrs in route.broker_addrs().values()
                                 for a in addrs.values()):
            # A broker we did not know: tell it who we are now, not at the next 30 s heartbeat
            # (it may need to call us back: transaction checks, consumer-id changes).
            task = asyncio.get_running_loop().create_task(self.send_heartbeat())
            self._tasks.append(task)
        return route

    async def refresh_routes(self) -> None:
        """Every route read again (``updateTopicRouteInfoFromNameServer``): the producers'
        publish info follows it, so new brokers and queues get traffic and a broker whose
        write permission was wiped gets none."""
        # A listener's topic is asked about even while a name server does not know it (one
        # restarted a moment ago, before the brokers' next registration): forgotten, its
        # cached publish info would never be refreshed again.
        listened = {topic for listener in self.route_listeners for topic in listener.route_topics()}
        for topic in dict.fromkeys([*self.routes, *listened]):
            try:
                if await self.fetch_route(topic) is None and topic not in listened:
                    self.routes.pop(topic, None)
            except RemotingError as exc:
                log.warning("route refresh for %s failed: %s", topic, exc)

    def master_addr(self, broker_name: str) -> str | None:
        addrs = self.broker_addrs.get(broker_name)  # (every send: no default dict made)
        return None if addrs is None else addrs.get(0)

    def admin_addr(self, broker_name: str) -> str | None:
        """Where offsets go (findBrokerAddressInAdmin): the master, else a slave while the
        master is down."""
        addrs = self.broker_addrs.get(broker_name, {})
        return addrs.get(0) or next((addrs[i] for i in sorted(addrs)), None)

    def broker_addr(self, broker_name: str, broker_id: int = 0) -> str | None:
        """An address for reads: the asked-for broker id, else the master, else any."""
        addrs = self.broker_addrs.get(broker_name, {})
        return addrs.get(broker_id) or addrs.get(0) or next(iter(addrs.values()), None)

    # -- heartbeats ----------------------------------------------------------------------------
    def heartbeat_data(self) -> dict:
        consumer_set = [c.consumer_data() for c in self.consumers.values()]
        producer_set = [{"groupName": group} for group in self.producers]
        return {"clientID": self.client_id, "consumerDataSet": consumer_set,
                "producerDataSet": producer_set}

    async def send_heartbeat(self) -> None:
        data = self.heartbeat_data()
        body = json.dumps(data).encode()
        if data["consumerDataSet"]:
            # Consumers read from slaves too (master down, or told to), so slaves must know them.
            targets = {a for addrs in self.broker_addrs.values() for a in addrs.values()}
        else:
            targets = {addrs[0] for addrs in self.broker_addrs.values() if 0 in addrs}
        for address in targets:
            try:
                await self.remoting.invoke(address, request(RequestCode.HEART_BEAT, body=body), 3)
            except RemotingError as exc:
                log.debug("heartbeat to %s failed: %s", address, exc)

    async def unregister(self, producer_group: str | None = None,
                         consumer_group: str | None = None) -> None:
        fields = {"clientID": self.client_id, "producerGroup": producer_group,
                  "consumerGroup": consumer_group}
        masters = {addrs[0] for addrs in self.broker_addrs.values() if 0 in addrs}
        for address in masters:
            try:
                await self.remoting.invoke(address, request(RequestCode.UNREGISTER_CLIENT, fields), 3)
            except RemotingError:
                pass

    # -- requests from brokers -----------------------------------------------------------------------
    async def _on_server_request(self, connection, command: RemotingCommand) -> RemotingCommand | None:
        if self.server_request_hook is not None:
            answer = await self.server_request_hook(connection, command)
            if answer is not None:
                return answer
        if command.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            consumer = self.consumers.get(command.field("consumerGroup") or "")
            if consumer is not None:
                consumer.rebalance_soon()
            return None
        if command.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            consumer = self.consumers.get(command.field("group") or "")
            if consumer is not None:
                table = parse_mq_table(command.body.decode()) if command.body else {}
                consumer.reset_offsets(command.field("topic") or "", table)
            return None
        if command.code == RequestCode.CHECK_TRANSACTION_STATE:
            from storage.record import iter_records

            record = next(iter_records(command.body or b""), None)
            producer = self.producers.get(record.properties.get("PGROUP", "")) if record else None
            if producer is not None:
                asyncio.get_running_loop().create_task(
                    producer.answer_transaction_check(connection, command, record))
            return None
        if command.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            consumer = self.consumers.get(command.field("consumerGroup") or "")
            if consumer is None:
                return command.make_response(ResponseCode.SYSTEM_ERROR, "no such consumer group here")
            return command.make_response(ResponseCode.SUCCESS,
                                         body=json.dumps(consumer.running_info()).encode())
        if command.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            consumer = self.consumers.get(command.field("consumerGroup") or "")
            if consumer is None:
                return command.make_response(ResponseCode.SYSTEM_ERROR, "no such consumer group here")
            result = await consumer.consume_directly(command.body, command.field("brokerName"))
            return command.make_response(ResponseCode.SUCCESS, body=json.dumps(result).encode())
        return command.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                     f"request code {command.code} is not supported by this client")
