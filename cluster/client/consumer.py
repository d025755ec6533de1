"""The push consumer (pulling itself is in pull.py, the group's allocation and queue locks in
rebalance.py, where offsets are kept in offset_store.py).

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
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from enum import Enum

from cluster.client.errors import ClientArgumentError, MQClientError
from cluster.client.instance import MQClientInstance
from cluster.client.message import Message, MessageExt
from cluster.client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from cluster.client.producer import Producer
from cluster.client.pull import (
    PullStatus,
    parse_tags,
    pull_message,
    queue_offset_request,
)
from cluster.client.rebalance import allocate_average, consumer_ids, lock_queues
from cluster.client.route import MessageQueue, TopicRouteData, subscribe_queues
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
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    java_hash,
)
from storage.record import iter_records

log = logging.getLogger(__name__)
RETRY_PREFIX = "%RETRY%"
ORDERLY_LOCK_RENEW = 20.0  # seconds; the broker keeps a lock 60 s
# RebalanceImpl's REBALANCE_LOCK_MAX_LIVE_TIME: a lock not renewed for 30 s is not trusted to be
# held any more (the renewals failed: the broker may have given the queue to another client).
ORDERLY_LOCK_MAX_LIVE = 30.0
ORDERLY_RELOCK_WAIT = 3.0  # tryLockLaterAndReconsume: the lock asked for again 3 s after a refusal
SUSPEND_CURRENT_QUEUE = 1.0  # orderly RECONSUME_LATER: the same messages again a second later
CONSUME_LATER = 5.0  # submitConsumeRequestLater: messages nobody took back, consumed again here
# Flow control of a queue (pullThresholdForQueue, consumeConcurrentlyMaxSpan): messages waiting
# to be consumed again hold the committed offset back; past these the queue pulls no more.
PULL_THRESHOLD_FOR_QUEUE = 1000
CONSUME_MAX_SPAN = 2000
FLOW_CONTROL_WAIT = 0.05
DEFAULT_MAX_RECONSUME_TIMES = 16  # a concurrent consumer's when max_reconsume_times is -1
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # RocketMQ's, for messages sent back by producer
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
        # Orderly: whether the broker granted this client the queue at the last ask, and when.
        self.locked = False
        self.last_lock_time = 0.0  # time.monotonic()
        # The pull task is inside the listener: a drop lets it finish (see the module's rules).
        self.consuming = False
        self.unlock_when_done = False  # orderly, dropped mid-listener: unlock once it returns

    def committed_offset(self) -> int:
        return min(self.in_flight) if self.in_flight else self.next_offset

    def lock_fresh(self, now: float) -> bool:
        return self.locked and now - self.last_lock_time < ORDERLY_LOCK_MAX_LIVE

    def flow_controlled(self) -> bool:
        in_flight = self.in_flight
        return len(in_flight) >= PULL_THRESHOLD_FOR_QUEUE or (
            bool(in_flight) and max(in_flight) - min(in_flight) > CONSUME_MAX_SPAN)


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
        self.process_queues: dict[MessageQueue, _ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        # Pull tasks of dropped queues not ended yet (a listener finishing): a new turn of the
        # queue here waits for its last one, so no queue ever has two listeners at once.
        self._draining: dict[MessageQueue, asyncio.Task] = {}
        self._later: set[asyncio.Task] = set()  # messages consumed again after CONSUME_LATER
        # The last route of each subscribed topic (RocketMQ's topicSubscribeInfoTable): kept when
        # a name server says the topic does not exist (restarted a moment ago, before the
        # brokers' next registration), so the queues being consumed are not all dropped.
        self._routes: dict[str, TopicRouteData] = {}
        self._retry_producer: Producer | None = None  # sends back what the broker would not take
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
        tasks = [*self._tasks, *self._pull_tasks.values(), *self._draining.values(), *self._later]
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
        if self._retry_producer is not None:
            await self._retry_producer.shutdown()
            self._retry_producer = None
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
                 unlock_when_done: bool) -> tuple[_ProcessQueue | None, bool]:
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

    async def _hold_lock(self, mq: MessageQueue, pq: _ProcessQueue) -> bool:
        """Orderly clustering (``ConsumeMessageOrderlyService``): wait until this client holds
        the queue's lock, renewed within ORDERLY_LOCK_MAX_LIVE, asking again every
        ORDERLY_RELOCK_WAIT while another client holds it. False once the queue is dropped."""
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
        pq = None if start_offset is None else _ProcessQueue(start_offset)
        while pq is None:
            try:
                pq = _ProcessQueue(await self._initial_offset(mq))
            except (RemotingError, BrokerResponseError) as exc:
                log.warning("cannot find where to start %s: %s", mq, exc)
                await asyncio.sleep(3)
        if locked_at is not None:
            pq.locked, pq.last_lock_time = True, locked_at
        self.process_queues[mq] = pq
        await self._pull_queue(mq, pq)
        if pq.unlock_when_done:
            await self._lock([mq], unlock=True)  # (dropped while its listener ran)

    async def _pull_queue(self, mq: MessageQueue, pq: _ProcessQueue) -> None:
        expression = self.subscriptions.get(mq.topic, "*")
        orderly_locks = self.orderly and self.message_model == "CLUSTERING"
        while not pq.dropped and not self._closing:
            if orderly_locks and not await self._hold_lock(mq, pq):
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
                await self._consume(mq, pq, result.messages)
                if pq.dropped:
                    break
            pq.next_offset = result.next_begin_offset

    async def _consume(self, mq: MessageQueue, pq: _ProcessQueue, messages: list[MessageExt]) -> None:
        """Hand ``messages`` to the listener a batch at a time. An offset leaves ``in_flight``
        once its message is consumed or taken back by the broker; a queue dropped meanwhile
        keeps the rest there, for the commit that tells its next owner where to start."""
        pq.in_flight.update(m.queue_offset for m in messages)
        for start in range(0, len(messages), self.batch_max):
            chunk = messages[start : start + self.batch_max]
            if self.orderly:
                consumed = await self._consume_orderly(mq, pq, chunk)
            else:
                consumed = await self._consume_concurrently(mq, pq, chunk)
            if not consumed:
                return

    async def _listen(self, chunk: list[MessageExt]) -> bool:
        """The listener's verdict on ``chunk`` (traced); an exception is RECONSUME_LATER."""
        request_id = self._trace_before(chunk)
        began = time.monotonic()
        assert self.listener is not None  # start() insists on one
        try:
            status = await self.listener(chunk)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the listener of %s raised; the messages are consumed again", self.group)
            status = ConsumeStatus.RECONSUME_LATER
        ok = status in (None, True, ConsumeStatus.CONSUME_SUCCESS)
        self._trace_after(chunk, request_id, began, ok)
        return ok

    async def _listen_in_turn(self, pq: _ProcessQueue, chunk: list[MessageExt]) -> bool:
        """The pull task's own call of the listener, marked so a drop lets it finish."""
        pq.consuming = True
        try:
            return await self._listen(chunk)
        finally:
            pq.consuming = False

    async def _consume_concurrently(self, mq: MessageQueue, pq: _ProcessQueue,
                                    chunk: list[MessageExt]) -> bool:
        """One batch (``ConsumeMessageConcurrentlyService``); False when the queue was dropped
        while the listener ran (its result is discarded)."""
        ok = await self._listen_in_turn(pq, chunk)
        if pq.dropped:
            return False
        await self._settle(mq, pq, chunk, ok)
        return True

    async def _settle(self, mq: MessageQueue, pq: _ProcessQueue, chunk: list[MessageExt],
                      ok: bool) -> None:
        """After the listener: RECONSUME_LATER sends the messages back (the broker keeps them
        in %RETRY%group, then %DLQ%group). What nobody took back is consumed again here
        CONSUME_LATER later, while the queue's other messages move on; its offset holds the
        commit back until then."""
        left = [] if ok else await self._send_back(chunk)
        if left:
            task = asyncio.get_running_loop().create_task(self._consume_later(mq, pq, left))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        done = {m.queue_offset for m in chunk}.difference(m.queue_offset for m in left)
        pq.in_flight.difference_update(done)
        pq.consumed += len(done)

    async def _consume_later(self, mq: MessageQueue, pq: _ProcessQueue,
                             messages: list[MessageExt]) -> None:
        await asyncio.sleep(CONSUME_LATER)
        if pq.dropped or self._closing:
            return
        ok = await self._listen(messages)
        if not pq.dropped:
            await self._settle(mq, pq, messages, ok)

    async def _consume_orderly(self, mq: MessageQueue, pq: _ProcessQueue,
                               chunk: list[MessageExt]) -> bool:
        """One batch in queue order (``ConsumeMessageOrderlyService``): consumed only while the
        queue's lock is held (clustering); RECONSUME_LATER consumes the same messages again a
        second later, never skipping ahead, until a limit the user set. False when the queue
        was dropped first (whatever is left is its next owner's)."""
        offsets = [m.queue_offset for m in chunk]
        locks = self.message_model == "CLUSTERING"
        while True:
            if locks and not await self._hold_lock(mq, pq):
                return False
            ok = await self._listen_in_turn(pq, chunk)
            if pq.dropped:
                return False
            if ok:
                break
            chunk = await self._orderly_retry(chunk)
            if not chunk:
                break
            await asyncio.sleep(SUSPEND_CURRENT_QUEUE)
        pq.in_flight.difference_update(offsets)
        pq.consumed += len(offsets)
        return True

    async def _orderly_retry(self, chunk: list[MessageExt]) -> list[MessageExt]:
        """The messages of a failed orderly batch to consume again, each counted once more
        (``checkReconsumeTimes``): one that reached max_reconsume_times goes to the retry topic
        at that count instead, which the broker turns into its DLQ; if it cannot be sent it
        stays."""
        limited = self.message_model == "CLUSTERING" and self.max_reconsume_times >= 0
        again = []
        for message in chunk:
            if limited and message.reconsume_times >= self.max_reconsume_times \
                    and await self._send_to_retry_topic(message, message.reconsume_times):
                continue
            message.record.reconsume_times += 1
            again.append(message)
        return again

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

    def _effective_max_reconsume_times(self) -> int:
        return DEFAULT_MAX_RECONSUME_TIMES if self.max_reconsume_times < 0 else self.max_reconsume_times

    async def _send_back(self, messages: list[MessageExt]) -> list[MessageExt]:
        """CONSUMER_SEND_MSG_BACK for each message, else the message itself sent to the retry
        topic; returns those neither took."""
        if self.message_model == "BROADCASTING":
            log.warning("broadcast consumers do not retry; %d message(s) dropped", len(messages))
            return []
        left = []
        taken = False
        for message in messages:
            store_ip, store_port = message.record.store_host
            address = f"{store_ip}:{store_port}"
            try:
                response = await self.instance.remoting.invoke(address, request(
                    RequestCode.CONSUMER_SEND_MSG_BACK, {
                        "offset": message.record.commit_log_offset, "group": self.group,
                        "delayLevel": 0, "originMsgId": message.msg_id,
                        "originTopic": message.topic, "unitMode": False,
                        "maxReconsumeTimes": self._effective_max_reconsume_times()}), 5)
                if response.code != ResponseCode.SUCCESS:
                    raise BrokerResponseError(response.code, response.remark,
                                              RequestCode.CONSUMER_SEND_MSG_BACK)
                taken = True
            except RemotingError as exc:
                log.warning("sending %s back to %s failed (%s); sending it to the retry topic",
                            message.msg_id, address, exc)
                if await self._send_to_retry_topic(message, message.reconsume_times + 1):
                    taken = True
                else:
                    left.append(message)
        if taken:
            retry = RETRY_PREFIX + self.group
            with contextlib.suppress(RemotingError):
                await self.instance.fetch_route(retry)  # the retry topic may be new
            self.rebalance_soon()
        return left

    async def _send_to_retry_topic(self, message: MessageExt, reconsume_times: int) -> bool:
        """``message`` sent to %RETRY%group by a producer, as the broker would have stored it
        (``sendMessageBack``'s fallback): original topic and id, the reconsume count and
        limit (the broker sends it to %DLQ%group at the limit), the delay of that retry.
        False when that failed too."""
        props = dict(message.properties)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, message.msg_id)
        props[PROPERTY_RETRY_TOPIC] = message.topic
        props[PROPERTY_RECONSUME_TIME] = str(reconsume_times)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(self._effective_max_reconsume_times())
        props[PROPERTY_DELAY_TIME_LEVEL] = str(3 + message.reconsume_times)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        retry = Message(RETRY_PREFIX + self.group, message.body, properties=props,
                        flag=message.record.flag)
        try:
            if self._retry_producer is None:
                producer = Producer(INNER_PRODUCER_GROUP, ";".join(self.instance.namesrv_addrs),
                                    instance=self.instance)
                await producer.start()
                self._retry_producer = producer
            await self._retry_producer.send(retry)
        except (MQClientError, RemotingError) as exc:
            log.warning("%s could not be sent to %s either (%s); consuming it again here later",
                        message.msg_id, retry.topic, exc)
            return False
        return True

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
