"""MessagingService: the RPCs of apache.rocketmq.v2, each turned into remoting requests to the
name servers and brokers, as RocketMQ's proxy does in cluster mode.

A 5.x client sees the proxy as every broker: routes name the brokers but give the proxy's own
endpoint, and every call comes here. This module holds routes, the clients and their Telemetry
streams (settings both ways), and the proxy's view of groups; sends and transactions are in
sending.py, receives and acks in receiving.py, lite pull in lite_pull.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import grpc

from cluster.client.instance import MQClientInstance
from cluster.client.route import PERM_READ, PERM_WRITE, TopicRouteData
from cluster.proxy.clients import OUTBOX_LIMIT, ClientRegistry
from cluster.proxy.convert import (
    MAX_BODY_SIZE,
    name_refusal,
    status,
)
from cluster.proxy.guard import failure_status
from cluster.proxy.lite_pull import LitePullMixin
from cluster.proxy.receiving import DEFAULT_POLL_MS, ReceivingMixin
from cluster.proxy.registration import ClientRegistration
from cluster.proxy.renewal import RETRY_DELAYS_SECONDS, HandleRenewals
from cluster.proxy.schema import Code, pb, services
from cluster.proxy.sending import (
    PRODUCER_GROUP,
    REQUEST_TIMEOUT,
    SendingMixin,
    TransactionRelay,
)
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from cluster.remoting.header import INT32_MAX
from storage.running_flags import LogThrottle

log = logging.getLogger(__name__)

ROUTE_TTL = 10.0
GROUP_TTL = 10.0
UNKNOWN_GROUP_TTL = 5.0  # s
MAX_GROUPS_REMEMBERED = 10_000
MAX_ATTEMPTS_DEFAULT = 17  # a group's retryMaxTimes (16) + 1


class RouteCache:
    """Topic routes from the name servers, kept ``ROUTE_TTL`` seconds."""

    def __init__(self, instance: MQClientInstance) -> None:
        self.instance = instance
        self._routes: dict[str, tuple[float, TopicRouteData | None]] = {}

    async def get(self, topic: str) -> TopicRouteData | None:
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL:
            return cached[1]
        route = await self.instance.fetch_route(topic)
        if route is not None:  # a topic created a moment later is found at once
            self._routes[topic] = (time.monotonic(), route)
        return route


# Topics one client's settings may name. Each subscribed one is looked up, and every consumer
# is heartbeated to the brokers with all of its subscriptions every 10 s: a settings message
# naming 200,000 made the proxy's loop stall for everyone.
MAX_SETTINGS_TOPICS = 1024


def settings_refusal(settings):
    """The status refusing a client's settings (too many topics, a name no broker takes), or
    None."""
    if settings.WhichOneof("pub_sub") == "publishing":
        topics = [t.name for t in settings.publishing.topics]
        group = None
    elif settings.WhichOneof("pub_sub") == "subscription":
        topics = [e.topic.name for e in settings.subscription.subscriptions]
        group = settings.subscription.group.name
        for entry in settings.subscription.subscriptions:
            if len(entry.expression.expression) > 65_536:
                return status(Code.ILLEGAL_FILTER_EXPRESSION, "the filter expression is too long")
    else:
        return None
    if len(topics) > MAX_SETTINGS_TOPICS:
        return status(Code.BAD_REQUEST, f"{len(topics)} topics in one client's settings; at "
                                        f"most {MAX_SETTINGS_TOPICS}")
    for topic in topics:
        refusal = name_refusal(group, topic)
        if refusal is not None:
            return refusal
    return name_refusal(group) if group is not None else None


def _metadata(context) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ())
            if isinstance(v, str)}


class MessagingService(SendingMixin, ReceivingMixin, LitePullMixin,
                       services.MessagingServiceServicer):
    """Routes, clients and Telemetry here; sends (sending.py), receives (receiving.py) and lite
    pull (lite_pull.py) in their mixins."""

    def __init__(self, instance: MQClientInstance, advertised: tuple[str, int]) -> None:
        self.instance = instance
        self.routes = RouteCache(instance)
        self.clients = ClientRegistry()
        self.advertised = advertised
        self._round_robin = 0
        self._groups: dict[str, tuple[float, dict]] = {}
        self._background: set[asyncio.Task] = set()
        self._failures = LogThrottle()  # (Telemetry readers' failures: logged once a minute)
        instance.producers[PRODUCER_GROUP] = TransactionRelay(self)
        self.registration = ClientRegistration(self)
        # push consumers' handles kept alive (renewal.py)
        self.renewals = HandleRenewals(self.change_invisible)
        instance.server_request_hook = self.registration.on_broker_request

    # -- helpers ------------------------------------------------------------------------------------
    def _client(self, context, join: bool = False):
        """The calling client, kept alive by the call; None for a client the proxy does not
        know. Only a Telemetry stream (``join``) makes a client known: any call may name a
        new client id, and one-off calls with invented ids filled the registry, so that real
        clients' Telemetry was refused."""
        meta = _metadata(context)
        client_id = meta.get("x-mq-client-id", "")
        if not client_id or (not join and client_id not in self.clients.clients):
            return None
        return self.clients.touch(client_id, meta.get("x-mq-language", ""),
                                  meta.get("x-mq-client-version", ""))

    def _endpoints(self, requested=None):
        if requested is not None and requested.addresses:
            return requested
        host, port = self.advertised
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=port)])

    def next_index(self) -> int:
        self._round_robin += 1
        return self._round_robin

    def broker_name_of(self, address: str) -> str | None:
        for name, addrs in self.instance.broker_addrs.items():
            if address in addrs.values():
                return name
        return None

    async def _invoke(self, broker_name: str, command, timeout: float = REQUEST_TIMEOUT):
        address = self.instance.master_addr(broker_name)
        if address is None:
            raise RemotingError(f"broker {broker_name} has no master in the routes")
        return await self.instance.remoting.invoke(address, command, timeout)

    async def _group_config(self, group: str) -> dict:
        """The group's config from a master that has it (cached ``GROUP_TTL`` seconds); {}
        for a group no broker knows yet (brokers create it with defaults on first use)."""
        cached = self._groups.get(group)
        if cached is not None and time.monotonic() < cached[0]:
            return cached[1]
        config: dict = {}
        for addrs in list(self.instance.broker_addrs.values()):
            address = addrs.get(0)
            if address is None:
                continue
            try:
                response = await self.instance.remoting.invoke(
                    address, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), REQUEST_TIMEOUT)
            except RemotingError:
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            table = json.loads(response.body or b"{}").get("subscriptionGroupTable") or {}
            if group in table:
                config = table[group]
                break
        # A group not found yet may be created a moment later: remembered as unknown for a
        # few seconds only. (Not at all, every receive naming a made-up group fetched every
        # master's whole subscription table.)
        self._groups.pop(group, None)  # (re-inserted last: the oldest go first past the bound)
        self._groups[group] = (time.monotonic() + (GROUP_TTL if config else UNKNOWN_GROUP_TTL),
                               config)
        if len(self._groups) > MAX_GROUPS_REMEMBERED:
            self._groups.pop(next(iter(self._groups)))
        return config

    async def _max_attempts(self, group: str) -> int:
        """Deliveries before the DLQ: the group's ``retryMaxTimes`` + 1."""
        retry = int((await self._group_config(group)).get("retryMaxTimes", 16))
        return retry + 1 if retry >= 0 else MAX_ATTEMPTS_DEFAULT

    async def _is_fifo(self, group: str) -> bool:
        return bool((await self._group_config(group)).get("consumeMessageOrderly", False))

    # -- routes -------------------------------------------------------------------------------------
    async def QueryRoute(self, request_, context):
        self._client(context)
        topic = request_.topic.name
        refusal = name_refusal(topic=topic)
        if refusal is not None:
            return pb.QueryRouteResponse(status=refusal)
        try:
            route = await self.routes.get(topic)
        except RemotingError as exc:
            return pb.QueryRouteResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if route is None:
            return pb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND,
                                                       f"topic {topic} does not exist"))
        endpoints = self._endpoints(request_.endpoints)
        queues = []
        accepted = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
        for data in sorted(route.queue_datas, key=lambda q: q["brokerName"]):
            name = data["brokerName"]
            read, write = int(data.get("readQueueNums", 0)), int(data.get("writeQueueNums", 0))
            perm = int(data.get("perm", 6))
            broker = pb.Broker(name=name, id=0, endpoints=endpoints)
            for queue_id in range(max(read, write)):
                readable = queue_id < read and perm & PERM_READ
                writable = queue_id < write and perm & PERM_WRITE
                permission = (pb.READ_WRITE if readable and writable else pb.READ if readable
                              else pb.WRITE if writable else pb.NONE)
                queues.append(pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id,
                                              permission=permission, broker=broker,
                                              accept_message_types=accepted))
        return pb.QueryRouteResponse(status=status(), message_queues=queues)


    # -- clients -------------------------------------------------------------------------------------
    async def Heartbeat(self, request_, context):
        client = self._client(context)
        if client is not None:
            client.client_type = request_.client_type or client.client_type
            if request_.HasField("group"):
                client.group = request_.group.name
        return pb.HeartbeatResponse(status=status())

    async def NotifyClientTermination(self, request_, context):
        meta = _metadata(context)
        client = self.clients.clients.get(meta.get("x-mq-client-id", ""))
        if client is not None:
            self.clients.forget(client.client_id)
            await self.registration.unregister(client)
            # (a FIFO queue it held is free in a second, not when the handles run out)
            await self.renewals.release_client(client.client_id)
        return pb.NotifyClientTerminationResponse(status=status())

    async def maintain(self) -> None:
        """Every 10 s: heartbeat the 5.x consumers to the brokers, forget the silent ones."""
        while True:
            await asyncio.sleep(10)
            try:
                for client_id in self.clients.expire():
                    log.info("5.x client %s went silent; forgotten", client_id)
                    self._spawn(self.renewals.release_client(client_id))
                await self.registration.heartbeat_all()
            except Exception:
                log.exception("maintaining 5.x clients failed; trying again")

    async def Telemetry(self, request_iterator, context):
        client = self._client(context, join=True)
        if client is None:
            if _metadata(context).get("x-mq-client-id"):
                yield pb.TelemetryCommand(status=status(
                    Code.TOO_MANY_REQUESTS, f"the proxy already serves {self.clients.limit} "
                                            "clients; try again later"))
            else:
                yield pb.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED,
                                                        "x-mq-client-id is missing"))
            return
        outbox: asyncio.Queue = asyncio.Queue(OUTBOX_LIMIT)
        client.outbox = outbox

        async def read() -> None:
            try:
                async for command in request_iterator:
                    kind = command.WhichOneof("command")
                    if kind == "settings":
                        await outbox.put(await self._answer_settings(client, command.settings))
                    elif kind == "thread_stack_trace":
                        self.registration.answered(command.thread_stack_trace.nonce, command)
                    elif kind == "verify_message_result":
                        self.registration.answered(command.verify_message_result.nonce, command)
            except Exception as exc:  # (this task is outside the call: the guard never sees it)
                await outbox.put(pb.TelemetryCommand(
                    status=failure_status("Telemetry", exc, self._failures)))
            finally:
                await outbox.put(None)  # the stream ends, never left waiting on a dead reader

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if client.outbox is outbox:
                client.outbox = None

    async def _answer_settings(self, client, settings):
        """Adopt what the client says it is, and answer with the server's side of it: the
        publishing limits, or the subscription's settings and the group's retry policy."""
        refusal = settings_refusal(settings)
        if refusal is not None:
            return pb.TelemetryCommand(status=refusal)
        client.client_type = settings.client_type
        answer = pb.Settings(client_type=settings.client_type,
                             access_point=self._endpoints(settings.access_point),
                             request_timeout=settings.request_timeout
                             if settings.HasField("request_timeout") else None)
        if not settings.HasField("request_timeout"):
            answer.request_timeout.FromSeconds(3)
        answer.user_agent.CopyFrom(settings.user_agent)
        answer.metric.on = False
        if settings.WhichOneof("pub_sub") == "publishing":
            client.topics = [t.name for t in settings.publishing.topics]
            answer.publishing.CopyFrom(pb.Publishing(topics=settings.publishing.topics,
                                                     max_body_size=MAX_BODY_SIZE,
                                                     validate_message_type=False))
            policy = answer.backoff_policy
            policy.max_attempts = 3
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromSeconds(1)
            policy.exponential_backoff.multiplier = 2.0
        elif settings.WhichOneof("pub_sub") == "subscription":
            sub = settings.subscription
            client.group = sub.group.name
            client.subscriptions = {e.topic.name: (e.expression.type, e.expression.expression)
                                    for e in sub.subscriptions}
            await self.registration.routed(client)  # learns the brokers of the group's config
            self._spawn(self.registration.register(client, retry=True))
            answer.subscription.CopyFrom(sub)
            answer.subscription.fifo = await self._is_fifo(client.group)
            answer.subscription.receive_batch_size = 32
            answer.subscription.long_polling_timeout.FromSeconds(DEFAULT_POLL_MS // 1000)
            # RocketMQ's retry delays (the delay levels from 1 s to 2 h), one a redelivery,
            # for as many deliveries as the group allows.
            policy = answer.backoff_policy
            # (a group's retryMaxTimes is any int32 an admin set: the attempts must fit one)
            policy.max_attempts = min(await self._max_attempts(client.group), INT32_MAX)
            for seconds in RETRY_DELAYS_SECONDS:
                policy.customized_backoff.next.add().FromSeconds(seconds)
        return pb.TelemetryCommand(status=status(), settings=answer)


def add_to_server(service: MessagingService, server: grpc.aio.Server) -> None:
    services.add_MessagingServiceServicer_to_server(service, server)
