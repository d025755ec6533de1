"""The push consumer (pulling itself is in pull.py, the group's allocation and queue locks in
rebalance.py, where offsets are kept in offset_store.py).

Push consumer (``DefaultMQPushConsumer``): every 20 s, and whenever a broker says the group
changed, each topic's queues are split among the group's clients by average allocation
(clustering) or taken whole (broadcasting). Each owned queue is long-polled (15 s holds);
messages are handed to the listener in batches; the committed offset of a queue is the
smallest offset still being consumed (or the next offset when none is), stored on the broker
every 5 s for clustering and in a local file for broadcasting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from enum import Enum

from cluster.client.errors import ClientArgumentError
from cluster.client.instance import MQClientInstance
from cluster.client.message import MessageExt
from cluster.client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from cluster.client.producer import Producer
from cluster.client.pull import (
    PullStatus,
    parse_tags,
    pull_message,
    queue_offset_request,
)
from cluster.client.rebalance import allocate_average, consumer_ids, lock_queues
from cluster.client.route import MessageQueue, subscribe_queues
from cluster.client.trace import (
    TraceDispatcher,
    encode_sub_after,
    encode_sub_before,
    inner_producer_group,
    new_request_id,
    trace_keys,
)
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError, RemotingError
from storage.message import java_hash
from storage.record import iter_records

log = logging.getLogger(__name__)
RETRY_PREFIX = "%RETRY%"
ORDERLY_LOCK_RENEW = 20.0  # seconds; the broker keeps a lock 60 s
PULL_SUSPEND_MS = 15_000
REBALANCE_INTERVAL = 20.0
# A subscribed topic the name server has no route for yet (created a moment ago, its broker's
# registration still on the way) is looked for again after 1 s, then 2, 4… up to the interval,
# rather than leaving the consumer idle for 20 s.
ROUTE_RETRY_FIRST = 1.0
PERSIST_INTERVAL = 5.0


class ConsumeStatus(Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[list[MessageExt]], Awaitable[ConsumeStatus | bool | None]]


class _ProcessQueue:
    """Offsets of one queue being consumed: what was pulled and is not yet done."""

    def __init__(self, offset: int) -> None:
        self.next_offset = offset
        self.in_flight: set[int] = set()
        self.dropped = False
        self.consumed = 0
        self.suggest_broker_id = 0  # where the broker said to pull next (pullFromWhichNodeTable)
        self.locked = True  # orderly: whether the broker still grants this client the queue

    def committed_offset(self) -> int:
        return min(self.in_flight) if self.in_flight else self.next_offset


class PushConsumer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        message_model: str = "CLUSTERING",
        consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp_ms: int | None = None,
        pull_batch_size: int = 32,
        consume_message_batch_max_size: int = 1,
        offset_store_dir: str | None = None,
        max_reconsume_times: int = 16,
        orderly: bool = False,
        trace: bool = False,
        instance: MQClientInstance | None = None,
    ) -> None:
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        # Orderly: each queue is locked on its broker (renewed every 20 s, the lock lives 60 s)
        # and consumed one message batch at a time; failures are retried in place, not sent back.
        self.orderly = orderly
        self.trace = trace  # record deliveries in RMQ_SYS_TRACE_TOPIC (message trace)
        self.tracer: TraceDispatcher | None = None
        self.instance = instance or MQClientInstance(namesrv_addr)
        self._own_instance = instance is None
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.pull_batch_size = pull_batch_size
        self.batch_max = consume_message_batch_max_size
        self.subscriptions: dict[str, str] = {}
        self.expression_types: dict[str, str] = {}
        self.listener: Listener | None = None
        self.process_queues: dict[MessageQueue, _ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self._rebalance_wake = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()  # the timer, a broker's notice and callers may race
        # Loops also check this: in 3.11 a cancel that races a wait_for's own result can be lost.
        self._closing = False
        self._routeless: list[str] = []  # subscribed topics the last rebalance found no route for
        self._tasks: list[asyncio.Task] = []
        if message_model == "BROADCASTING":
            self.offset_store: LocalFileOffsetStore | RemoteBrokerOffsetStore = LocalFileOffsetStore(
                os.path.join(offset_store_dir or os.path.join(os.path.expanduser("~"), ".rocketmq_offsets"),
                             self.instance.client_id.replace(":", "_"), group, "offsets.json"))
        else:
            self.offset_store = RemoteBrokerOffsetStore(self.instance, group)
        self.started_at = 0.0

    # -- setup ---------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        """``expression``: tags (``TagA || TagB``, ``*``) or, with ``expression_type="SQL92"``, a
        SQL92 condition on properties (the broker needs enablePropertyFilter=true)."""
        self.subscriptions[topic] = expression or "*"
        self.expression_types[topic] = expression_type.upper()

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener

    def consumer_data(self) -> dict:
        subs = []
        for topic, expression in self.subscriptions.items():
            kind = self.expression_types.get(topic, "TAG")
            tags = sorted(parse_tags(expression) or []) if kind == "TAG" else []
            subs.append({"classFilterMode": False, "codeSet": [java_hash(t) for t in tags],
                         "expressionType": kind, "subString": expression, "subVersion": 0,
                         "tagsSet": tags, "topic": topic})
        return {"groupName": self.group, "consumeType": "CONSUME_PASSIVELY",
                "messageModel": self.message_model, "consumeFromWhere": self.consume_from_where,
                "subscriptionDataSet": subs, "unitMode": False}

    async def start(self) -> None:
        if self.listener is None:
            raise ClientArgumentError("register a listener before starting the consumer")
        self.started_at = time.time()
        self.offset_store.load()
        if self.message_model != "BROADCASTING":
            # Messages sent back come again through the group's retry topic.
            self.subscriptions.setdefault(RETRY_PREFIX + self.group, "*")
        self.instance.consumers[self.group] = self
        await self.instance.start()
        if self.trace and self.tracer is None:
            self.tracer = TraceDispatcher(Producer(inner_producer_group(self.group),
                                                   ";".join(self.instance.namesrv_addrs)))
            await self.tracer.start()
        for topic in self.subscriptions:
            await self.instance.fetch_route(topic)
        await self.instance.send_heartbeat()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._rebalance_loop()),
                       loop.create_task(self._persist_loop())]
        if self.orderly:
            self._tasks.append(loop.create_task(self._renew_locks_loop()))

    async def shutdown(self) -> None:
        self._closing = True
        tasks = [*self._tasks, *self._pull_tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pull_tasks.clear()
        # The last commit waits for its answer: a oneway request could still be in a buffer
        # when the connection closes, and the group would consume again what it had.
        await self.persist_offsets(oneway=False)
        if self.orderly and self.process_queues:
            await self._lock(list(self.process_queues), unlock=True)  # the next owner need not wait
        if self.tracer is not None:
            await self.tracer.stop()
            self.tracer = None
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister(consumer_group=self.group)
        if self._own_instance:
            await self.instance.shutdown()

    # -- rebalance ---------------------------------------------------------------------------------
    def rebalance_soon(self) -> None:
        self._rebalance_wake.set()

    async def _rebalance_loop(self) -> None:
        retry = ROUTE_RETRY_FIRST
        while not self._closing:
            self._rebalance_wake.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance of %s failed", self.group)
            if self._routeless:
                wait, retry = retry, min(retry * 2, REBALANCE_INTERVAL)
            else:
                wait, retry = REBALANCE_INTERVAL, ROUTE_RETRY_FIRST
            try:
                async with asyncio.timeout(wait):
                    await self._rebalance_wake.wait()
            except TimeoutError:
                pass

    async def rebalance(self) -> None:
        """Take the queues this client should own now; drop the others (committing offsets)."""
        async with self._rebalance_lock:
            await self._rebalance()

    async def _rebalance(self) -> None:
        wanted: set[MessageQueue] = set()
        routeless = []
        for topic in self.subscriptions:
            route = await self.instance.fetch_route(topic)
            if route is None:
                if not topic.startswith(RETRY_PREFIX):  # (exists only once something failed)
                    routeless.append(topic)
                continue
            queues = subscribe_queues(topic, route)
            if self.message_model == "BROADCASTING":
                wanted.update(queues)
                continue
            ids = await consumer_ids(self.instance, self.group, route)
            wanted.update(allocate_average(self.instance.client_id, ids, queues))
        self._routeless = routeless
        if self._closing:
            return
        for mq in list(self._pull_tasks):
            if mq not in wanted:
                await self._drop(mq)
        for mq in wanted:
            if mq not in self._pull_tasks and not self._closing:
                self._pull_tasks[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq))

    async def _drop(self, mq: MessageQueue) -> None:
        task = self._pull_tasks.pop(mq, None)
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        pq = self.process_queues.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            await self._commit(mq, pq.committed_offset(), oneway=False)
            if self.orderly:
                await self._lock([mq], unlock=True)

    # -- pulling and consuming ---------------------------------------------------------------------
    async def _initial_offset(self, mq: MessageQueue) -> int:
        stored = await self.offset_store.read(mq)
        if stored >= 0:
            return stored
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET" or mq.topic.startswith(RETRY_PREFIX):
            return 0  # a retry queue is read from its start, whatever the group's policy
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            when = self.consume_timestamp_ms or int((self.started_at - 1800) * 1000)
            return await queue_offset_request(self.instance, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                              mq, timestamp=when)
        return await queue_offset_request(self.instance, RequestCode.GET_MAX_OFFSET, mq)

    # -- orderly: queue locks on the brokers -------------------------------------------------------
    async def _lock(self, mqs: list[MessageQueue], unlock: bool = False) -> set[MessageQueue]:
        return await lock_queues(self.instance, self.group, mqs, unlock)

    async def _renew_locks_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(ORDERLY_LOCK_RENEW)
            owned = list(self.process_queues)
            if owned:
                held = await self._lock(owned)
                for mq in owned:
                    pq = self.process_queues.get(mq)
                    if pq is not None:
                        pq.locked = mq in held

    async def _pull_loop(self, mq: MessageQueue, start_offset: int | None = None) -> None:
        if self.orderly:
            # Another client may still hold the queue (it was ours a moment ago): wait for it.
            while not self._closing and mq not in await self._lock([mq]):
                await asyncio.sleep(1.0)
        pq = None if start_offset is None else _ProcessQueue(start_offset)
        while pq is None:
            try:
                pq = _ProcessQueue(await self._initial_offset(mq))
            except (RemotingError, BrokerResponseError) as exc:
                log.warning("cannot find where to start %s: %s", mq, exc)
                await asyncio.sleep(3)
        self.process_queues[mq] = pq
        expression = self.subscriptions.get(mq.topic, "*")
        while not pq.dropped and not self._closing:
            try:
                commit = pq.committed_offset() if self.message_model == "CLUSTERING" else None
                result = await pull_message(self.instance, self.group, mq, expression, pq.next_offset,
                                            self.pull_batch_size, PULL_SUSPEND_MS, commit,
                                            pq.suggest_broker_id,
                                            self.expression_types.get(mq.topic, "TAG"))
            except asyncio.CancelledError:
                raise
            except (RemotingError, BrokerResponseError) as exc:
                log.warning("pull from %s failed: %s; retrying in 3 s", mq, exc)
                await asyncio.sleep(3)
                # The broker may be gone (a master down): read the route again so the next
                # pull goes to whoever serves this queue now, a slave included.
                try:
                    await self.instance.fetch_route(mq.topic)
                except RemotingError:
                    pass
                continue
            pq.suggest_broker_id = result.suggest_broker_id
            if result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning("offset %d of %s is illegal; moving to %d", pq.next_offset, mq,
                            result.next_begin_offset)
                pq.next_offset = result.next_begin_offset
                continue
            if result.status is PullStatus.FOUND and result.messages:
                await self._consume(mq, pq, result.messages)
            pq.next_offset = result.next_begin_offset

    async def _consume(self, mq: MessageQueue, pq: _ProcessQueue, messages: list[MessageExt]) -> None:
        offsets = [m.queue_offset for m in messages]
        pq.in_flight.update(offsets)
        try:
            for start in range(0, len(messages), self.batch_max):
                chunk = messages[start : start + self.batch_max]
                while True:
                    request_id = self._trace_before(chunk)
                    began = time.monotonic()
                    assert self.listener is not None  # start() insists on one
                    try:
                        status = await self.listener(chunk)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("the listener of %s raised; consuming again in 1 s", self.group)
                        status = ConsumeStatus.RECONSUME_LATER
                    ok = status in (None, True, ConsumeStatus.CONSUME_SUCCESS)
                    self._trace_after(chunk, request_id, began, ok)
                    if ok:
                        break
                    # RECONSUME_LATER: the broker keeps a copy for later (%RETRY%group, then
                    # %DLQ%group); what it cannot take is tried again here after a second.
                    # Orderly consumption never skips ahead: it retries in place.
                    if not self.orderly:
                        chunk = await self._send_back(chunk)
                        if not chunk:
                            break
                    await asyncio.sleep(1.0)
                for message in chunk:
                    pq.in_flight.discard(message.queue_offset)
                pq.consumed += len(chunk)
        finally:
            pq.in_flight.difference_update(offsets)

    def _trace_before(self, chunk: list[MessageExt]) -> str | None:
        if self.tracer is None:
            return None
        request_id = new_request_id()
        for m in chunk:
            self.tracer.submit(encode_sub_before(self.group, request_id, m.msg_id, m.reconsume_times,
                                                 m.keys), trace_keys(m.msg_id, m.keys))
        return request_id

    def _trace_after(self, chunk: list[MessageExt], request_id: str | None, began: float, ok: bool) -> None:
        if self.tracer is None or request_id is None:
            return
        cost = int((time.monotonic() - began) * 1000)
        for m in chunk:
            self.tracer.submit(encode_sub_after(self.group, request_id, m.msg_id, cost, ok, m.keys),
                               trace_keys(m.msg_id, m.keys))

    async def _send_back(self, messages: list[MessageExt]) -> list[MessageExt]:
        """CONSUMER_SEND_MSG_BACK for each message; returns those the broker did not take."""
        if self.message_model == "BROADCASTING":
            log.warning("broadcast consumers do not retry; %d message(s) dropped", len(messages))
            return []
        left = []
        for message in messages:
            store_ip, store_port = message.record.store_host
            address = f"{store_ip}:{store_port}"
            try:
                response = await self.instance.remoting.invoke(address, request(
                    RequestCode.CONSUMER_SEND_MSG_BACK, {
                        "offset": message.record.commit_log_offset, "group": self.group,
                        "delayLevel": 0, "originMsgId": message.msg_id,
                        "originTopic": message.topic, "unitMode": False,
                        "maxReconsumeTimes": self.max_reconsume_times}), 5)
                if response.code != ResponseCode.SUCCESS:
                    raise BrokerResponseError(response.code, response.remark,
                                              RequestCode.CONSUMER_SEND_MSG_BACK)
            except RemotingError as exc:
                log.warning("sending %s back failed (%s); consuming it again here", message.msg_id, exc)
                left.append(message)
        if len(left) < len(messages):
            retry = RETRY_PREFIX + self.group
            with contextlib.suppress(RemotingError):
                await self.instance.fetch_route(retry)  # the retry topic may be new
            self.rebalance_soon()
        return left

    # -- offsets -----------------------------------------------------------------------------------
    async def _persist_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(PERSIST_INTERVAL)
            await self.persist_offsets()

    async def persist_offsets(self, oneway: bool = True) -> None:
        for mq, pq in list(self.process_queues.items()):
            await self._commit(mq, pq.committed_offset(), oneway)
        self.offset_store.persist()

    async def _commit(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        await self.offset_store.commit(mq, offset, oneway)

    # -- broker requests -----------------------------------------------------------------------------
    def running_info(self) -> dict:
        return {
            "properties": {"consumeType": "CONSUME_PASSIVELY", "messageModel": self.message_model,
                           "consumeFromWhere": self.consume_from_where,
                           "PROP_CONSUMER_START_TIMESTAMP": str(int(self.started_at * 1000))},
            "subscriptionSet": [{"topic": t, "subString": e} for t, e in self.subscriptions.items()],
            "mqTable": {str(mq): {"commitOffset": pq.committed_offset(), "nextOffset": pq.next_offset,
                                  "inFlight": len(pq.in_flight), "consumed": pq.consumed}
                        for mq, pq in self.process_queues.items()},
        }

    def reset_offsets(self, topic: str, table: dict) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: an admin moved the group's offsets (the broker holds the
        new ones already). As RocketMQ does, drop each affected queue, a long-polling pull
        included, and start it again from the new offset."""
        for mq, offset in table.items():
            if mq.topic != topic or mq not in self._pull_tasks or self._closing:
                continue
            log.info("offset of %s reset to %s by an admin", mq, offset)
            task = self._pull_tasks.pop(mq)
            task.cancel()
            pq = self.process_queues.pop(mq, None)
            if pq is not None:
                pq.dropped = True
            self._pull_tasks[mq] = asyncio.get_running_loop().create_task(
                self._restart_queue(mq, task, int(offset)))

    async def _restart_queue(self, mq: MessageQueue, old: asyncio.Task, offset: int) -> None:
        await asyncio.gather(old, return_exceptions=True)
        await self._pull_loop(mq, offset)

    async def consume_directly(self, body: bytes, broker_name: str | None) -> dict:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on one message, report how it went."""
        begin = time.monotonic()
        records = list(iter_records(body))
        if not records:
            return {"consumeResult": "CR_THROW_EXCEPTION", "remark": "no message in the request",
                    "order": False, "autoCommit": True, "spentTimeMills": 0}
        record = records[0]
        mq = MessageQueue(record.topic, broker_name or "", record.queue_id)
        assert self.listener is not None
        try:
            status = await self.listener([MessageExt.of(record, mq)])
            ok = status in (None, True, ConsumeStatus.CONSUME_SUCCESS)
            result, remark = ("CR_SUCCESS", None) if ok else ("CR_LATER", "the listener asked to retry")
        except Exception as exc:
            result, remark = "CR_THROW_EXCEPTION", f"{type(exc).__name__}: {exc}"
        return {"consumeResult": result, "remark": remark, "order": False, "autoCommit": True,
                "spentTimeMills": int((time.monotonic() - begin) * 1000)}
