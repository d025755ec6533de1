"""MessagingService: the RPCs of apache.rocketmq.v2, each turned into remoting requests to the
name servers and brokers, as RocketMQ's proxy does in cluster mode.

A 5.x client sees the proxy as every broker: routes name the brokers but give the proxy's own
endpoint, and every call comes here. Sends become SEND_MESSAGE_V2 to a master (a FIFO message
to the queue its message group hashes to); receives become POP_MESSAGE over all queues of one
broker, acks ACK_MESSAGE, invisible-time changes CHANGE_MESSAGE_INVISIBLETIME. A receipt handle
is the broker's POP handle (cluster/pop_handle.py): it names the broker, queue and offset, so
any proxy can ack what another one handed out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib

import grpc

from cluster.client.instance import MQClientInstance
from cluster.client.route import PERM_READ, PERM_WRITE, TopicRouteData
from cluster.pop_handle import ExtraInfo, ExtraInfoError, parse_order_counts, parse_start_offsets
from cluster.proxy.clients import ClientRegistry
from cluster.proxy.convert import (
    MAX_BODY_SIZE,
    MessageRefused,
    status,
    status_of_response,
    to_message,
    to_properties,
)
from cluster.proxy.registration import ClientRegistration
from cluster.proxy.schema import Code, pb, services
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from cluster.topic_validator import validate_group_name, validate_topic_name
from storage.message_id import decode_message_id
from storage.record import iter_records

log = logging.getLogger(__name__)

PRODUCER_GROUP = "PROXY_GRPC_PRODUCER"  # the remoting producer group 5.x sends go under
DEFAULT_INVISIBLE_MS = 30_000
DEFAULT_POLL_MS = 20_000
# A POP is held this much shorter than the client's wait (its deadline adds the request timeout).
POLL_MARGIN_MS = 200
ROUTE_TTL = 10.0
GROUP_TTL = 10.0
REQUEST_TIMEOUT = 3.0
MAX_ATTEMPTS_DEFAULT = 17  # a group's retryMaxTimes (16) + 1
RETRY_DELAYS_SECONDS = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                        3600, 7200)


def transaction_id(uniq: str, broker_name: str, commit_log_offset: int, queue_offset: int) -> str:
    """What a 5.x client gets for a half message and hands back to end it: everything
    END_TRANSACTION needs, so any proxy can end any transaction."""
    return f"{uniq}_{broker_name}_{commit_log_offset}_{queue_offset}"


def parse_transaction_id(text: str) -> tuple[str, str, int, int] | None:
    uniq, _, rest = text.partition("_")
    parts = rest.rsplit("_", 2)
    if not uniq or len(parts) != 3 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        return None
    return uniq, parts[0], int(parts[1]), int(parts[2])


class TransactionRelay:
    """The proxy's producer group on the brokers: their transaction checks (CHECK_TRANSACTION_
    STATE, for half messages nobody ended) go to a 5.x producer of the topic over its Telemetry
    stream, as a RecoverOrphanedTransactionCommand; its EndTransaction comes back as an RPC."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    async def answer_transaction_check(self, connection, command, record) -> None:
        service = self.service
        props = record.properties
        topic = props.get("REAL_TOPIC", record.topic)
        producers = service.clients.producers_of(topic)
        if not producers:
            return  # the broker asks again later
        broker_name = service.broker_name_of(connection.remote_address)
        if broker_name is None:
            return
        tid = transaction_id(props.get("UNIQ_KEY", ""), broker_name,
                             int(command.field("commitLogOffset") or 0),
                             int(command.field("tranStateTableOffset") or 0))
        recover = pb.RecoverOrphanedTransactionCommand(message=to_message(record),
                                                       transaction_id=tid)
        client = producers[service.next_index() % len(producers)]
        await client.outbox.put(pb.TelemetryCommand(recover_orphaned_transaction_command=recover))


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


def _metadata(context) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ())
            if isinstance(v, str)}


class MessagingService(services.MessagingServiceServicer):
    def __init__(self, instance: MQClientInstance, advertised: tuple[str, int]) -> None:
        self.instance = instance
        self.routes = RouteCache(instance)
        self.clients = ClientRegistry()
        self.advertised = advertised
        self._round_robin = 0
        self._groups: dict[str, tuple[float, dict]] = {}
        self._background: set[asyncio.Task] = set()
        instance.producers[PRODUCER_GROUP] = TransactionRelay(self)
        self.registration = ClientRegistration(self)
        instance.server_request_hook = self.registration.on_broker_request

    # -- helpers ------------------------------------------------------------------------------------
    def _client(self, context):
        meta = _metadata(context)
        client_id = meta.get("x-mq-client-id", "")
        return self.clients.touch(client_id, meta.get("x-mq-language", ""),
                                  meta.get("x-mq-client-version", "")) if client_id else None

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
        if cached is not None and time.monotonic() - cached[0] < GROUP_TTL:
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
        if config:  # a group not found yet may be created a moment later
            self._groups[group] = (time.monotonic(), config)
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
        problem = validate_topic_name(topic)
        if problem:
            return pb.QueryRouteResponse(status=status(Code.ILLEGAL_TOPIC, problem))
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

    async def QueryAssignment(self, request_, context):
        self._client(context)
        topic, group = request_.topic.name, request_.group.name
        problem = validate_topic_name(topic) or None
        if problem:
            return pb.QueryAssignmentResponse(status=status(Code.ILLEGAL_TOPIC, problem))
        if validate_group_name(group):
            return pb.QueryAssignmentResponse(
                status=status(Code.ILLEGAL_CONSUMER_GROUP, validate_group_name(group)))
        route = await self.routes.get(topic)
        if route is None:
            return pb.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND,
                                                            f"topic {topic} does not exist"))
        endpoints = self._endpoints(request_.endpoints)
        # POP needs no rebalance: every consumer of the group reads every broker (queue -1).
        assignments = [
            pb.Assignment(message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic), id=-1, permission=pb.READ_WRITE,
                broker=pb.Broker(name=data["brokerName"], id=0, endpoints=endpoints)))
            for data in sorted(route.queue_datas, key=lambda q: q["brokerName"])
            if int(data.get("perm", 6)) & PERM_READ and int(data.get("readQueueNums", 0)) > 0]
        return pb.QueryAssignmentResponse(status=status(), assignments=assignments)

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
        return pb.NotifyClientTerminationResponse(status=status())

    async def maintain(self) -> None:
        """Every 10 s: heartbeat the 5.x consumers to the brokers, forget the silent ones."""
        while True:
            await asyncio.sleep(10)
            try:
                for client_id in self.clients.expire():
                    log.info("5.x client %s went silent; forgotten", client_id)
                await self.registration.heartbeat_all()
            except Exception:
                log.exception("maintaining 5.x clients failed; trying again")

    async def Telemetry(self, request_iterator, context):
        client = self._client(context)
        if client is None:
            yield pb.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED,
                                                    "x-mq-client-id is missing"))
            return
        outbox: asyncio.Queue = asyncio.Queue()
        client.outbox = outbox

        async def read() -> None:
            async for command in request_iterator:
                kind = command.WhichOneof("command")
                if kind == "settings":
                    await outbox.put(await self._answer_settings(client, command.settings))
                elif kind == "thread_stack_trace":
                    self.registration.answered(command.thread_stack_trace.nonce, command)
                elif kind == "verify_message_result":
                    self.registration.answered(command.verify_message_result.nonce, command)
            await outbox.put(None)

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
            for entry in sub.subscriptions:  # learns the brokers that hold the group's config
                try:
                    await self.routes.get(entry.topic.name)
                except RemotingError:
                    pass
            client.subscriptions = {e.topic.name: (e.expression.type, e.expression.expression)
                                    for e in sub.subscriptions}
            self._spawn(self.registration.register(client))
            answer.subscription.CopyFrom(sub)
            answer.subscription.fifo = await self._is_fifo(client.group)
            answer.subscription.receive_batch_size = 32
            answer.subscription.long_polling_timeout.FromSeconds(DEFAULT_POLL_MS // 1000)
            # RocketMQ's retry delays (the delay levels from 1 s to 2 h), one a redelivery,
            # for as many deliveries as the group allows.
            policy = answer.backoff_policy
            policy.max_attempts = await self._max_attempts(client.group)
            for seconds in RETRY_DELAYS_SECONDS:
                policy.customized_backoff.next.add().FromSeconds(seconds)
        return pb.TelemetryCommand(status=status(), settings=answer)

    # -- sending ------------------------------------------------------------------------------------
    async def SendMessage(self, request_, context):
        self._client(context)
        if not request_.messages:
            return pb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        entries = [await self._send_one(message) for message in request_.messages]
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS,
                                                                    "the messages fared differently")
        return pb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, message):
        message_id = message.system_properties.message_id
        try:
            props, _ = to_properties(message)
        except MessageRefused as exc:
            return pb.SendResultEntry(status=status(exc.code, str(exc)), message_id=message_id)
        topic = message.topic.name
        try:
            route = await self.routes.get(topic)
        except RemotingError as exc:
            return pb.SendResultEntry(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)),
                                      message_id=message_id)
        if route is None:
            return pb.SendResultEntry(status=status(Code.TOPIC_NOT_FOUND,
                                                    f"topic {topic} does not exist"),
                                      message_id=message_id)
        queues = self._write_queues(route)
        if not queues:
            return pb.SendResultEntry(status=status(Code.FORBIDDEN,
                                                    f"topic {topic} has no writable queue"),
                                      message_id=message_id)
        system = message.system_properties
        group = system.message_group if system.HasField("message_group") else ""
        if group:
            # One message group, one queue: its messages stay in the order they were sent.
            candidates = [queues[(zlib.crc32(group.encode()) & 0x7FFFFFFF) % len(queues)]]
        else:
            self._round_robin += 1
            start = self._round_robin % len(queues)
            candidates = queues[start:] + queues[:start]
        sys_flag = 0
        if props.get("TRAN_MSG") == "true":
            sys_flag = 0x4  # TRANSACTION_PREPARED_TYPE
            props["PGROUP"] = PRODUCER_GROUP
        from storage.message import properties_to_string
        fields = {"a": PRODUCER_GROUP, "b": topic, "c": "TBW102", "d": 4, "f": sys_flag,
                  "g": system.born_timestamp.ToMilliseconds() or int(time.time() * 1000),
                  "h": 0, "i": properties_to_string(props), "j": 0, "k": False, "m": False}
        last = status(Code.INTERNAL_SERVER_ERROR, "no broker took the message")
        tried: set[str] = set()
        for broker_name, queue_id in candidates:
            if broker_name in tried:
                continue
            tried.add(broker_name)
            command = request(RequestCode.SEND_MESSAGE_V2, dict(fields, e=queue_id),
                              body=message.body)
            try:
                response = await self._invoke(broker_name, command)
            except RemotingError as exc:
                last = status(Code.INTERNAL_SERVER_ERROR, str(exc))
                continue
            result = status_of_response(response.code, response.remark)
            if response.code == ResponseCode.SUCCESS:
                fields_out = response.ext_fields
                queue_offset = int(fields_out.get("queueOffset", "0") or 0)
                tid = ""
                if sys_flag:
                    tid = transaction_id(message_id, broker_name,
                                         decode_message_id(fields_out["msgId"]).offset, queue_offset)
                return pb.SendResultEntry(status=result, message_id=message_id,
                                          transaction_id=tid, offset=queue_offset)
            last = result
            if response.code not in (ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_ERROR,
                                     ResponseCode.SERVICE_NOT_AVAILABLE):
                break
        return pb.SendResultEntry(status=last, message_id=message_id)

    @staticmethod
    def _write_queues(route: TopicRouteData) -> list[tuple[str, int]]:
        masters = route.master_addrs()
        queues = []
        for data in sorted(route.queue_datas, key=lambda q: q["brokerName"]):
            if not int(data.get("perm", 6)) & PERM_WRITE or data["brokerName"] not in masters:
                continue
            queues += [(data["brokerName"], q) for q in range(int(data.get("writeQueueNums", 0)))]
        return queues

    # -- receiving ------------------------------------------------------------------------------------
    async def ReceiveMessage(self, request_, context):
        self._client(context)
        group, topic = request_.group.name, request_.message_queue.topic.name
        problem = validate_group_name(group)
        if problem:
            yield pb.ReceiveMessageResponse(status=status(Code.ILLEGAL_CONSUMER_GROUP, problem))
            return
        problem = validate_topic_name(topic)
        if problem:
            yield pb.ReceiveMessageResponse(status=status(Code.ILLEGAL_TOPIC, problem))
            return
        invisible_ms = (request_.invisible_duration.ToMilliseconds()
                        if request_.HasField("invisible_duration") else DEFAULT_INVISIBLE_MS)
        if not 1_000 <= invisible_ms <= 12 * 3600 * 1000:
            yield pb.ReceiveMessageResponse(status=status(
                Code.ILLEGAL_INVISIBLE_TIME, "the invisible duration must be 1 s to 12 h"))
            return
        poll_ms = (request_.long_polling_timeout.ToMilliseconds()
                   if request_.HasField("long_polling_timeout") else DEFAULT_POLL_MS)
        if poll_ms < 0 or poll_ms > 60_000:
            yield pb.ReceiveMessageResponse(status=status(
                Code.ILLEGAL_POLLING_TIME, "the long-polling timeout must be 0 to 60 s"))
            return
        batch = max(1, min(request_.batch_size or 32, 32))
        expression = request_.filter_expression
        exp_type = "SQL92" if expression.type == pb.SQL else "TAG"
        broker_name = request_.message_queue.broker.name
        if not broker_name:
            route = await self.routes.get(topic)
            if route is None:
                yield pb.ReceiveMessageResponse(status=status(Code.TOPIC_NOT_FOUND,
                                                              f"topic {topic} does not exist"))
                return
            broker_name = sorted(route.master_addrs())[0]
        else:
            await self.routes.get(topic)  # learns the broker's address
        fields = {"consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": batch,
                  "invisibleTime": invisible_ms,
                  "pollTime": max(0, poll_ms - POLL_MARGIN_MS), "bornTime": int(time.time() * 1000),
                  "initMode": 1, "expType": exp_type, "exp": expression.expression or "*",
                  "order": await self._is_fifo(group)}
        popping = asyncio.ensure_future(self._invoke(
            broker_name, request(RequestCode.POP_MESSAGE, fields),
            timeout=poll_ms / 1000 + REQUEST_TIMEOUT))
        try:
            response = await asyncio.shield(popping)
        except asyncio.CancelledError:
            # The client went away while the broker held its POP: what the broker hands out
            # now would stay invisible for nothing, so it goes back at once.
            popping.add_done_callback(lambda f: self._release_later(f, group, topic, broker_name))
            raise
        except RemotingError as exc:
            yield pb.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
            return
        if response.code != ResponseCode.SUCCESS:
            yield pb.ReceiveMessageResponse(status=status_of_response(response.code,
                                                                      response.remark))
            return
        header = response.ext_fields
        pop_time, invisible = int(header["popTime"]), int(header["invisibleTime"])
        revive_qid = int(header.get("reviveQid", "0"))
        starts = parse_start_offsets(header.get("startOffsetInfo", ""))
        counts = parse_order_counts(header.get("orderCountInfo", ""))
        handed = []
        for record in iter_records(response.body):
            retry = record.topic != topic
            extra = ExtraInfo(starts.get((retry, record.queue_id), record.queue_offset), pop_time,
                              invisible, revive_qid, retry, broker_name, record.queue_id,
                              record.queue_offset)
            handed.append((record, extra))
        delivered = 0
        try:
            yield pb.ReceiveMessageResponse(status=status())
            for record, extra in handed:
                earlier = counts.get((record.queue_id, record.queue_offset), 0)
                yield pb.ReceiveMessageResponse(
                    message=to_message(record, extra.encode(), invisible, earlier))
                delivered += 1
            stamp = pb.ReceiveMessageResponse()
            stamp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
            yield stamp
        finally:
            if delivered < len(handed) and "orderCountInfo" not in header:
                self._spawn(self._release(group, topic, [e for _, e in handed[delivered:]]))

    def _release_later(self, future, group: str, topic: str, broker_name: str) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        response = future.result()
        if response.code != ResponseCode.SUCCESS:
            return
        header = response.ext_fields
        starts = parse_start_offsets(header.get("startOffsetInfo", ""))
        handles = [ExtraInfo(starts.get((r.topic != topic, r.queue_id), r.queue_offset),
                             int(header["popTime"]), int(header["invisibleTime"]),
                             int(header.get("reviveQid", "0")), r.topic != topic, broker_name,
                             r.queue_id, r.queue_offset)
                   for r in iter_records(response.body)]
        if handles and "orderCountInfo" not in header:
            self._spawn(self._release(group, topic, handles))

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self, group: str, topic: str, handles: list[ExtraInfo]) -> None:
        """Make messages nobody received visible again in a second (the shortest invisible time)."""
        for extra in handles:
            try:
                await self._invoke(extra.broker_name, request(
                    RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
                        "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
                        "extraInfo": extra.encode(), "offset": extra.offset,
                        "invisibleTime": 1000}))
            except RemotingError as exc:
                log.info("could not hand back %s:%d: %s", topic, extra.offset, exc)

    def _handle(self, receipt_handle: str, expired_ok: bool = False) -> ExtraInfo | tuple:
        try:
            extra = ExtraInfo.parse(receipt_handle)
        except ExtraInfoError as exc:
            return (Code.INVALID_RECEIPT_HANDLE, str(exc))
        if not expired_ok and extra.deadline < int(time.time() * 1000):
            return (Code.INVALID_RECEIPT_HANDLE, "the receipt handle has expired")
        return extra

    async def AckMessage(self, request_, context):
        self._client(context)
        group, topic = request_.group.name, request_.topic.name
        problem = validate_group_name(group) or None
        if problem:
            return pb.AckMessageResponse(status=status(Code.ILLEGAL_CONSUMER_GROUP, problem))
        if validate_topic_name(topic):
            return pb.AckMessageResponse(status=status(Code.ILLEGAL_TOPIC,
                                                       validate_topic_name(topic)))
        entries = []
        for entry in request_.entries:
            extra = self._handle(entry.receipt_handle)
            if isinstance(extra, tuple):
                result = status(*extra)
            else:
                command = request(RequestCode.ACK_MESSAGE, {
                    "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
                    "extraInfo": entry.receipt_handle, "offset": extra.offset})
                try:
                    await self.routes.get(topic)
                    response = await self._invoke(extra.broker_name, command)
                    result = status_of_response(response.code, response.remark)
                except RemotingError as exc:
                    result = status(Code.INTERNAL_SERVER_ERROR, str(exc))
            entries.append(pb.AckMessageResultEntry(message_id=entry.message_id,
                                                    receipt_handle=entry.receipt_handle,
                                                    status=result))
        codes = {e.status.code for e in entries}
        if not entries:
            overall = status(Code.BAD_REQUEST, "nothing to ack")
        elif len(codes) == 1:
            overall = entries[0].status
        else:
            overall = status(Code.MULTIPLE_RESULTS, "the acks fared differently")
        return pb.AckMessageResponse(status=overall, entries=entries)

    async def ChangeInvisibleDuration(self, request_, context):
        self._client(context)
        group, topic = request_.group.name, request_.topic.name
        if validate_group_name(group) or validate_topic_name(topic):
            return pb.ChangeInvisibleDurationResponse(status=status(
                Code.BAD_REQUEST, validate_group_name(group) or validate_topic_name(topic)))
        extra = self._handle(request_.receipt_handle)
        if isinstance(extra, tuple):
            return pb.ChangeInvisibleDurationResponse(status=status(*extra))
        invisible_ms = request_.invisible_duration.ToMilliseconds()
        if not 1_000 <= invisible_ms <= 12 * 3600 * 1000:
            return pb.ChangeInvisibleDurationResponse(status=status(
                Code.ILLEGAL_INVISIBLE_TIME, "the invisible duration must be 1 s to 12 h"))
        command = request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
            "extraInfo": request_.receipt_handle, "offset": extra.offset,
            "invisibleTime": invisible_ms})
        try:
            await self.routes.get(topic)
            response = await self._invoke(extra.broker_name, command)
        except RemotingError as exc:
            return pb.ChangeInvisibleDurationResponse(status=status(Code.INTERNAL_SERVER_ERROR,
                                                                    str(exc)))
        if response.code != ResponseCode.SUCCESS:
            return pb.ChangeInvisibleDurationResponse(
                status=status_of_response(response.code, response.remark))
        header = response.ext_fields
        moved = ExtraInfo(extra.offset, int(header["popTime"]), int(header["invisibleTime"]),
                          int(header.get("reviveQid", "0")), extra.retry, extra.broker_name,
                          extra.queue_id, extra.offset)
        return pb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=moved.encode())

    async def ForwardMessageToDeadLetterQueue(self, request_, context):
        """The push consumer gave up on a message: into the group's DLQ, and acked."""
        self._client(context)
        group, topic = request_.group.name, request_.topic.name
        if validate_group_name(group) or validate_topic_name(topic):
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                Code.BAD_REQUEST, validate_group_name(group) or validate_topic_name(topic)))
        # A FIFO consumer retries in place, often past the handle's invisible time; what it
        # gives up on must still reach the DLQ, or it would ask forever.
        extra = self._handle(request_.receipt_handle, expired_ok=True)
        if isinstance(extra, tuple):
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(*extra))
        from cluster.pop_handle import popped_topic
        stored_topic = popped_topic(group, topic, extra.retry)
        try:
            await self.routes.get(topic)
            pulled = await self._invoke(extra.broker_name, request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": group, "topic": stored_topic, "queueId": extra.queue_id,
                "queueOffset": extra.offset, "maxMsgNums": 1, "sysFlag": 0, "commitOffset": 0,
                "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}))
            records = list(iter_records(pulled.body)) if pulled.code == ResponseCode.SUCCESS else []
            if not records or records[0].queue_offset != extra.offset:
                return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                    Code.MESSAGE_NOT_FOUND, "the message is no longer in its queue"))
            record = records[0]
            back = await self._invoke(extra.broker_name, request(
                RequestCode.CONSUMER_SEND_MSG_BACK, {
                    "offset": record.commit_log_offset, "group": group, "delayLevel": -1,
                    "originMsgId": record.client_msg_id, "originTopic": topic,
                    "unitMode": False, "maxReconsumeTimes": request_.max_delivery_attempts}))
            if back.code != ResponseCode.SUCCESS:
                return pb.ForwardMessageToDeadLetterQueueResponse(
                    status=status_of_response(back.code, back.remark))
            await self._invoke(extra.broker_name, request(RequestCode.ACK_MESSAGE, {
                "consumerGroup": group, "topic": topic, "queueId": extra.queue_id,
                "extraInfo": request_.receipt_handle, "offset": extra.offset}))
            log.info("%s gave up on %s after %d deliveries: in %%DLQ%%%s", group,
                     request_.message_id, request_.delivery_attempt, group)
        except RemotingError as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(
                Code.INTERNAL_SERVER_ERROR, str(exc)))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status())

    # -- lite pull: offsets in the client's hands ------------------------------------------------------
    def _queue_of(self, request_) -> tuple[str, str, int] | tuple:
        """(topic, broker name, queue id) of a request's message_queue, or a refusal status."""
        queue = request_.message_queue
        topic = queue.topic.name
        problem = validate_topic_name(topic)
        if problem:
            return (Code.ILLEGAL_TOPIC, problem)
        if not queue.broker.name or queue.id < 0:
            return (Code.BAD_REQUEST, "a message queue needs its broker and a queue id")
        return topic, queue.broker.name, queue.id

    async def _offset_call(self, broker_name: str, topic: str, code: int, fields: dict):
        await self.routes.get(topic)
        return await self._invoke(broker_name, request(code, fields))

    async def PullMessage(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        group = request_.group.name
        if len(where) == 2:
            yield pb.PullMessageResponse(status=status(*where))
            return
        if validate_group_name(group):
            yield pb.PullMessageResponse(status=status(Code.ILLEGAL_CONSUMER_GROUP,
                                                       validate_group_name(group)))
            return
        topic, broker_name, queue_id = where
        if request_.offset < 0:
            yield pb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, "a negative offset"))
            return
        poll_ms = min(max(request_.long_polling_timeout.ToMilliseconds(), 0), 60_000)
        expression = request_.filter_expression
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                  "queueOffset": request_.offset, "maxMsgNums": max(1, min(request_.batch_size or 32, 32)),
                  "sysFlag": 0x4 | (0x2 if poll_ms else 0), "commitOffset": 0,
                  "suspendTimeoutMillis": poll_ms, "subscription": expression.expression or "*",
                  "subVersion": 0, "expressionType": "SQL92" if expression.type == pb.SQL else "TAG"}
        try:
            await self.routes.get(topic)
            response = await self._invoke(broker_name, request(RequestCode.PULL_MESSAGE, fields),
                                          timeout=poll_ms / 1000 + REQUEST_TIMEOUT)
        except RemotingError as exc:
            yield pb.PullMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
            return
        next_offset = int(response.ext_fields.get("nextBeginOffset", request_.offset) or 0)
        if response.code == ResponseCode.SUCCESS:
            yield pb.PullMessageResponse(status=status())
            for record in iter_records(response.body):
                yield pb.PullMessageResponse(message=to_message(record))
        elif response.code == ResponseCode.PULL_OFFSET_MOVED:
            yield pb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET,
                                                       "the offset is outside the queue"))
        elif response.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            yield pb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield pb.PullMessageResponse(status=status_of_response(response.code, response.remark))
            return
        yield pb.PullMessageResponse(next_offset=next_offset)

    async def UpdateOffset(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        if len(where) == 2:
            return pb.UpdateOffsetResponse(status=status(*where))
        topic, broker_name, queue_id = where
        if validate_group_name(request_.group.name) or request_.offset < 0:
            return pb.UpdateOffsetResponse(status=status(Code.BAD_REQUEST,
                                                         "a valid group and offset are needed"))
        try:
            response = await self._offset_call(broker_name, topic, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": request_.group.name, "topic": topic, "queueId": queue_id,
                "commitOffset": request_.offset})
        except RemotingError as exc:
            return pb.UpdateOffsetResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        return pb.UpdateOffsetResponse(status=status_of_response(response.code, response.remark))

    async def GetOffset(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        if len(where) == 2:
            return pb.GetOffsetResponse(status=status(*where))
        topic, broker_name, queue_id = where
        if validate_group_name(request_.group.name):
            return pb.GetOffsetResponse(status=status(Code.ILLEGAL_CONSUMER_GROUP,
                                                      validate_group_name(request_.group.name)))
        try:
            response = await self._offset_call(broker_name, topic, RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": request_.group.name, "topic": topic, "queueId": queue_id})
        except RemotingError as exc:
            return pb.GetOffsetResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return pb.GetOffsetResponse(status=status(Code.OFFSET_NOT_FOUND,
                                                      "the group has no offset in this queue"))
        if response.code != ResponseCode.SUCCESS:
            return pb.GetOffsetResponse(status=status_of_response(response.code, response.remark))
        return pb.GetOffsetResponse(status=status(),
                                    offset=int(response.ext_fields.get("offset", "0") or 0))

    async def QueryOffset(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        if len(where) == 2:
            return pb.QueryOffsetResponse(status=status(*where))
        topic, broker_name, queue_id = where
        policy = request_.query_offset_policy
        fields: dict = {"topic": topic, "queueId": queue_id}
        if policy == pb.BEGINNING:
            code = RequestCode.GET_MIN_OFFSET
        elif policy == pb.END:
            code = RequestCode.GET_MAX_OFFSET
        else:
            if not request_.HasField("timestamp"):
                return pb.QueryOffsetResponse(status=status(Code.BAD_REQUEST,
                                                            "a TIMESTAMP query needs a timestamp"))
            code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
            fields["timestamp"] = request_.timestamp.ToMilliseconds()
        try:
            response = await self._offset_call(broker_name, topic, code, fields)
        except RemotingError as exc:
            return pb.QueryOffsetResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if response.code != ResponseCode.SUCCESS:
            return pb.QueryOffsetResponse(status=status_of_response(response.code, response.remark))
        return pb.QueryOffsetResponse(status=status(),
                                      offset=int(response.ext_fields.get("offset", "0") or 0))

    # -- transactions ----------------------------------------------------------------------------------
    async def EndTransaction(self, request_, context):
        self._client(context)
        parsed = parse_transaction_id(request_.transaction_id)
        if parsed is None:
            return pb.EndTransactionResponse(status=status(Code.INVALID_TRANSACTION_ID,
                                                           "this transaction id was not given out"))
        if request_.resolution not in (pb.COMMIT, pb.ROLLBACK):
            return pb.EndTransactionResponse(status=status(Code.BAD_REQUEST,
                                                           "the resolution must be COMMIT or ROLLBACK"))
        uniq, broker_name, commit_log_offset, queue_offset = parsed
        command = request(RequestCode.END_TRANSACTION, {
            "producerGroup": PRODUCER_GROUP, "tranStateTableOffset": queue_offset,
            "commitLogOffset": commit_log_offset,
            "commitOrRollback": 8 if request_.resolution == pb.COMMIT else 12,
            "fromTransactionCheck": request_.source == pb.SOURCE_SERVER_CHECK,
            "msgId": request_.message_id or uniq, "transactionId": uniq})
        try:
            await self.routes.get(request_.topic.name)
            response = await self._invoke(broker_name, command)
        except RemotingError as exc:
            return pb.EndTransactionResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        return pb.EndTransactionResponse(status=status_of_response(response.code, response.remark))


def add_to_server(service: MessagingService, server: grpc.aio.Server) -> None:
    services.add_MessagingServiceServicer_to_server(service, server)
