"""The push consumer (pulling itself is in pull.py, the group's allocation and queue locks in
rebalance.py, where offsets are kept in offset_store.py, a queue's state in process_queue.py,
handing messages to the listener and sending them back in consume_service.py).

Push consumer (``DefaultMQPushConsumer``): every 20 s, and whenever a broker says the group
changed, each topic's queues are split among the group's clients by average allocation
(clustering) or taken whole (broadcasting). Each owned queue is long-polled (15 s holds);
messages are handed to the listener in batches; the committed offset of a queue is the
smallest offset still being consumed (or the next offset when none is), stored on the broker
every 5 s for clustering and in a local file for broadcasting.

House rules (RocketMQ's ``ProcessQueue``): a rebalance that takes a queue away marks its
process queue dropped and never interrupts a listener running on its messages; the result of
that run is discarded and the offset committed is the smallest still in flight, so the next
owner consumes those messages again. An orderly queue is consumed only while this client holds
its broker lock and has renewed it within 30 s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time

from cluster.client.consume_service import RETRY_PREFIX, ConsumeMessageService, ConsumeStatus, Listener
from cluster.client.errors import ClientArgumentError
from cluster.client.instance import MQClientInstance
from cluster.client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from cluster.client.process_queue import ProcessQueue
from cluster.client.producer import Producer
from cluster.client.pull import (
    PullStatus,
    parse_tags,
    pull_message,
    queue_offset_request,
)
from cluster.client.rebalance import allocate_average, consumer_ids, lock_queues
from cluster.client.route import MessageQueue, TopicRouteData, subscribe_queues
from cluster.client.trace import TraceDispatcher, inner_producer_group
from cluster.remoting.codes import RequestCode
from cluster.remoting.errors import BrokerResponseError, RemotingError
from storage.message import java_hash

log = logging.getLogger(__name__)
ORDERLY_LOCK_RENEW = 20.0  # seconds; the broker keeps a lock 60 s
ORDERLY_RELOCK_WAIT = 3.0  # tryLockLaterAndReconsume: the lock asked for again 3 s after a refusal
FLOW_CONTROL_WAIT = 0.05  # a queue past its flow-control limits looks again this much later
PULL_SUSPEND_MS = 15_000
REBALANCE_INTERVAL = 20.0
# A subscribed topic the name server has no route for yet (created a moment ago, its broker's
# registration still on the way) is looked for again after 1 s, then 2, 4… up to the interval,
# rather than leaving the consumer idle for 20 s.
ROUTE_RETRY_FIRST = 1.0
PERSIST_INTERVAL = 5.0


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
        max_reconsume_times: int = -1,
        orderly: bool = False,
        trace: bool = False,
        instance: MQClientInstance | None = None,
        instance_name: str = "DEFAULT",
    ) -> None:
        self.group = group
        # -1, RocketMQ's default: 16 for a concurrent consumer, no limit for an orderly one
        # (which then retries a failing message in place for good).
        self.max_reconsume_times = max_reconsume_times
        # Orderly: each queue is locked on its broker (renewed every 20 s, the lock lives 60 s)
        # and consumed one message batch at a time, only while locked; failures are retried in
        # place, not sent back, unless max_reconsume_times is set (then to the DLQ past it).
        self.orderly = orderly
        self.trace = trace  # record deliveries in RMQ_SYS_TRACE_TOPIC (message trace)
        self.tracer: TraceDispatcher | None = None
        self.instance = instance or MQClientInstance(namesrv_addr, instance_name)
        self._own_instance = instance is None
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.pull_batch_size = pull_batch_size
        self.batch_max = consume_message_batch_max_size
        self.subscriptions: dict[str, str] = {}
        self.expression_types: dict[str, str] = {}
        self.listener: Listener | None = None
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        # Pull tasks of dropped queues not ended yet (a listener finishing): a new turn of the
        # queue here waits for its last one, so no queue ever has two listeners at once.
        self._draining: dict[MessageQueue, asyncio.Task] = {}
        # The last route of each subscribed topic (RocketMQ's topicSubscribeInfoTable): kept when
        # a name server says the topic does not exist (restarted a moment ago, before the
        # brokers' next registration), so the queues being consumed are not all dropped.
        self._routes: dict[str, TopicRouteData] = {}
        self._rebalance_wake = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()  # the timer, a broker's notice and callers may race
        # Loops also check this: in 3.11 a cancel that races a wait_for's own result can be lost.
        self._closing = False
        self._routeless: list[str] = []  # subscribed topics the last rebalance found no route for
        self._tasks: list[asyncio.Task] = []
        if message_model == "BROADCASTING":
            # The file is named after ip@instanceName, without the pid the client id carries:
            # RocketMQ changes the instance name to the pid for clustering only, so that a
            # restarted broadcasting consumer finds its offsets again. Under a new name it would
            # find none and, from the last offset, skip all that was sent while it was down.
            # (Two broadcasting processes of one group on one host: give each an instance name.)
            name = f"{self.instance.client_ip}@{self.instance.instance_name}".replace(":", "_")
            self.offset_store: LocalFileOffsetStore | RemoteBrokerOffsetStore = LocalFileOffsetStore(
                os.path.join(offset_store_dir or os.path.join(os.path.expanduser("~"), ".rocketmq_offsets"),
                             name, group, "offsets.json"))
        else:
            self.offset_store = RemoteBrokerOffsetStore(self.instance, group)
        self.started_at = 0.0
        # Hands pulled messages to the listener and sends back what it failed on.
        self.consume_service = ConsumeMessageService(self)

    @property
    def closing(self) -> bool:
        return self._closing

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
        held = [*self.process_queues, *self._draining]
        tasks = [*self._tasks, *self._pull_tasks.values(), *self._draining.values(),
                 *self.consume_service.later_tasks()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pull_tasks.clear()
        # The last commit waits for its answer: a oneway request could still be in a buffer
        # when the connection closes, and the group would consume again what it had.
        await self.persist_offsets(oneway=False)
        if self.orderly and held:
            await self._lock(held, unlock=True)  # the next owner need not wait
        if self.tracer is not None:
            await self.tracer.stop()
            self.tracer = None
        await self.consume_service.shutdown()
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
            if route is not None:
                self._routes[topic] = route
            elif topic in self._routes:
                log.warning("no route for %s now; its last known queues are kept", topic)
                route = self._routes[topic]
            else:
                if not topic.startswith(RETRY_PREFIX):  # (exists only once something failed)
                    routeless.append(topic)
                continue
            queues = subscribe_queues(topic, route)
            if self.message_model == "BROADCASTING":
                wanted.update(queues)
                continue
            ids = await consumer_ids(self.instance, self.group, route)
            if ids is None:
                # Who else is in the group is unknown: taking every queue would have two
                # clients consume the same ones; the topic keeps its assignment until the
                # next rebalance.
                log.warning("no broker told the members of %s; %s keeps its queues", self.group, topic)
                wanted.update(mq for mq in self._pull_tasks if mq.topic == topic)
                continue
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
        pq, draining = self._release(mq, task, unlock_when_done=self.orderly)
        if not draining:
            await asyncio.wait([task])
        if pq is not None:
            # (the smallest offset in flight: what a listener still runs on is consumed again
            # by the queue's next owner)
            await self._commit(mq, pq.committed_offset(), oneway=False)
            if self.orderly and not draining:
                await self._lock([mq], unlock=True)

    def _release(self, mq: MessageQueue, task: asyncio.Task,
                 unlock_when_done: bool) -> tuple[ProcessQueue | None, bool]:
        """Mark ``mq``'s process queue dropped and end its pull task: at once, unless the listener
        is running on its messages; then the task ends when the listener returns, its result
        discarded. The process queue, and whether the task is left to finish."""
        pq = self.process_queues.pop(mq, None)
        draining = pq is not None and pq.consuming
        if pq is not None:
            pq.dropped = True
            pq.unlock_when_done = draining and unlock_when_done
        if not draining:
            task.cancel()
        self._draining[mq] = task
        task.add_done_callback(functools.partial(self._drained, mq))
        return pq, draining

    def _drained(self, mq: MessageQueue, task: asyncio.Task) -> None:
        if self._draining.get(mq) is task:
            del self._draining[mq]

    # -- pulling -----------------------------------------------------------------------------------
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
    async def _lock(self, mqs: list[MessageQueue],
                    unlock: bool = False) -> tuple[set[MessageQueue], set[MessageQueue]]:
        return await lock_queues(self.instance, self.group, mqs, unlock)

    async def _renew_locks_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(ORDERLY_LOCK_RENEW)
            owned = list(self.process_queues)
            if owned:
                held, unasked = await self._lock(owned)
                now = time.monotonic()
                for mq in owned:
                    pq = self.process_queues.get(mq)
                    if pq is None or mq in unasked:
                        continue  # (not renewed: trusted until ORDERLY_LOCK_MAX_LIVE)
                    if mq in held:
                        pq.locked, pq.last_lock_time = True, now
                    elif pq.locked:
                        log.warning("the broker no longer grants %s the lock of %s; "
                                    "consuming it stops until it is locked again", self.group, mq)
                        pq.locked = False

    async def hold_lock(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Orderly clustering (``ConsumeMessageOrderlyService``): wait until this client holds
        the queue's lock, renewed within ORDERLY_LOCK_MAX_LIVE (process_queue.py), asking again
        every ORDERLY_RELOCK_WAIT while another client holds it. False once the queue is
        dropped. Asked before each pull and, by the consume service, before each batch."""
        while not pq.lock_fresh(time.monotonic()):
            if pq.dropped or self._closing:
                return False
            held, _ = await self._lock([mq])
            if mq in held:
                pq.locked, pq.last_lock_time = True, time.monotonic()
            else:
                pq.locked = False
                await asyncio.sleep(ORDERLY_RELOCK_WAIT)
        return not (pq.dropped or self._closing)

    async def _pull_loop(self, mq: MessageQueue, start_offset: int | None = None) -> None:
        previous = self._draining.get(mq)
        if previous is not None:
            # The queue's last turn here has not ended (its listener is finishing): wait, so
            # that its messages never have two listeners at once. (asyncio.wait: a cancel of
            # this task must not reach that listener.)
            await asyncio.wait([previous])
        locked_at = None
        if self.orderly:
            # Another client may still hold the queue (it was ours a moment ago): wait for it.
            while not self._closing and mq not in (await self._lock([mq]))[0]:
                await asyncio.sleep(1.0)
            locked_at = time.monotonic()
        pq = None if start_offset is None else ProcessQueue(start_offset)
        while pq is None:
            try:
                pq = ProcessQueue(await self._initial_offset(mq))
            except (RemotingError, BrokerResponseError) as exc:
                log.warning("cannot find where to start %s: %s", mq, exc)
                await asyncio.sleep(3)
        if locked_at is not None:
            pq.locked, pq.last_lock_time = True, locked_at
        self.process_queues[mq] = pq
        await self._pull_queue(mq, pq)
        if pq.unlock_when_done:
            await self._lock([mq], unlock=True)  # (dropped while its listener ran)

    async def _pull_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        expression = self.subscriptions.get(mq.topic, "*")
        orderly_locks = self.orderly and self.message_model == "CLUSTERING"
        while not pq.dropped and not self._closing:
            if orderly_locks and not await self.hold_lock(mq, pq):
                break
            if not self.orderly and pq.flow_controlled():
                await asyncio.sleep(FLOW_CONTROL_WAIT)
                continue
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
                await self.consume_service.consume(mq, pq, result.messages)
                if pq.dropped:
                    break
            pq.next_offset = result.next_begin_offset

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
            self._release(mq, self._pull_tasks.pop(mq), unlock_when_done=False)
            # (the new turn waits for the old one to end)
            self._pull_tasks[mq] = asyncio.get_running_loop().create_task(
                self._pull_loop(mq, int(offset)))

    async def consume_directly(self, body: bytes, broker_name: str | None) -> dict:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on one message, report how it went."""
        return await self.consume_service.consume_directly(body, broker_name)


# ConsumeStatus and Listener are defined with the consume service; they are imported from here.
__all__ = ["ConsumeStatus", "Listener", "PushConsumer"]
