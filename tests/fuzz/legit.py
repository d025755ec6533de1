"""The legitimate traffic that must keep working whatever the hostile traffic does.

A producer (the project's own ``Producer``: routes from the name server, SEND_MESSAGE_V2 to the
master) sends messages with distinct keys, tags, user properties and bodies (some over 4 KiB,
so compressed) to its own topic; a consumer (``pull_message``, its own group) reads every queue
and checks that each acknowledged message comes back intact: body byte for byte (and its CRC),
properties, UNIQ_KEY, offset msgId, queue and queue offset. Nothing hostile ever names this
topic or these groups (see test_hostile_cluster.py's docstring).

Both run on an event loop in a thread of their own, so synchronous callers (hypothesis's state
machine, the campaign's loop) just call :meth:`Legit.send` and :meth:`Legit.verify`.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from dataclasses import dataclass

from cluster.client.message import Message, MessageExt, SendStatus
from cluster.client.producer import Producer
from cluster.client.pull import PullStatus, pull_message
from cluster.client.route import MessageQueue
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.record import body_crc
from tests.fuzz.harness import Cluster, Violation

TOPIC = "FuzzLegitTopic"
PRODUCER_GROUP = "FuzzLegitProducer"
CONSUMER_GROUP = "FuzzLegitConsumer"
BROKER_NAME = "broker-a"
QUEUES = 4
PROTECTED_NAMES = frozenset({TOPIC, PRODUCER_GROUP, CONSUMER_GROUP, BROKER_NAME})


@dataclass(slots=True)
class Ack:
    seq: int
    body: bytes
    props: dict[str, str]  # what the producer set: TAGS, KEYS, user properties
    uniq: str
    offset_msg_id: str


class Legit:
    def __init__(self, cluster: Cluster, seed: int = 0, timeout: float = 15.0) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.timeout = timeout
        self.acked: dict[tuple[int, int], Ack] = {}
        self.next_offset = dict.fromkeys(range(QUEUES), 0)
        self.verified_keys: set[tuple[int, int]] = set()
        self.sent = 0
        self.failed_sends = 0
        self._seq = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="legit-loop")
        self._thread.start()
        self.producer: Producer | None = None

    def call(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout or self.timeout)

    # -- life ----------------------------------------------------------------------------------------
    def start(self) -> Legit:
        self.call(self._start(), 60)
        return self

    async def _start(self) -> None:
        self.producer = Producer(PRODUCER_GROUP, self.cluster.namesrv, retry_times_when_send_failed=0,
                                 send_latency_fault_enable=False, send_msg_timeout=self.timeout)
        await self.producer.start()
        instance = self.producer.instance
        created = await instance.remoting.invoke(self.cluster.master, request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6,
                "topicFilterType": "SINGLE_TAG"}))
        assert created.code == ResponseCode.SUCCESS, created.remark
        deadline = time.monotonic() + 20
        while await instance.fetch_route(TOPIC) is None:
            assert time.monotonic() < deadline, f"no route for {TOPIC}"
            await asyncio.sleep(0.1)

    def close(self) -> None:
        async def stop():
            if self.producer is not None:
                await self.producer.shutdown()

        try:
            self.call(stop(), 10)
        except Exception:  # the cluster may be gone already; the loop goes anyway
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- sending -------------------------------------------------------------------------------------
    def _message(self) -> tuple[Message, int]:
        self._seq += 1
        seq, rng = self._seq, self.rng
        size = rng.choice((1, 17, 300, 2000, 5000))  # 5000: over 4 KiB, compressed by the producer
        body = f"legit-{seq}:".encode() + rng.randbytes(size)
        props = {"fzSeq": str(seq), "fzNote": rng.choice(("plain", "é ü", "a b c", "x" * 200))}
        return Message(TOPIC, body, tags=f"Tag{seq % 3}", keys=f"legit-key-{seq}", properties=props), seq

    def send(self, count: int = 1) -> list[Violation]:
        problems = []
        for _ in range(count):
            msg, seq = self._message()
            self.sent += 1
            try:
                result = self.call(self.producer.send(msg))
            except Exception as exc:
                self.failed_sends += 1
                problems.append(Violation("send-failed", "producer",
                                          f"message {seq}: {type(exc).__name__}: {exc}"))
                continue
            if result.status is not SendStatus.SEND_OK:
                self.failed_sends += 1
                problems.append(Violation("send-failed", "producer", f"message {seq}: {result.status}"))
                continue
            props = dict(msg.properties, TAGS=msg.tags, KEYS=msg.keys)
            self.acked[(result.message_queue.queue_id, result.queue_offset)] = Ack(
                seq, msg.body, props, result.msg_id, result.offset_msg_id)
        return problems

    def master_max_offset(self) -> int:
        """The master's CommitLog end (GET_BROKER_RUNTIME_INFO), for HA reports that look real."""
        async def ask() -> int:
            answer = await self.producer.instance.remoting.invoke(
                self.cluster.master, request(RequestCode.GET_BROKER_RUNTIME_INFO))
            return int(json.loads(answer.body)["table"]["commitLogMaxOffset"])

        return self.call(ask(), 10)

    # -- the route -----------------------------------------------------------------------------------
    def check_route(self) -> list[Violation]:
        """The name server still routes the legitimate topic to the real master, writable."""
        try:
            route = self.call(self.producer.instance.fetch_route(TOPIC))
        except Exception as exc:
            return [Violation("route-broken", "namesrv", f"{type(exc).__name__}: {exc}")]
        if route is None:
            return [Violation("route-broken", "namesrv", f"{TOPIC} has no route")]
        problems = []
        if route.master_addrs().get(BROKER_NAME) != self.cluster.master:
            problems.append(Violation("route-broken", "namesrv", f"masters {route.master_addrs()}"))
        queues = [q for q in route.queue_datas if q.get("brokerName") == BROKER_NAME]
        writable = queues and int(queues[0].get("perm", 0)) & 2
        if not writable or int(queues[0].get("writeQueueNums", 0)) != QUEUES:
            problems.append(Violation("route-broken", "namesrv", f"queue data {route.queue_datas}"))
        return problems

    # -- consuming -----------------------------------------------------------------------------------
    def verify(self, full: bool = False, settle: float = 5.0) -> list[Violation]:
        """Read every queue from where the last call stopped (from 0 when ``full``) and check
        each record against its acknowledgement; every acknowledged message must show up
        within ``settle`` seconds (dispatch runs behind the put)."""
        try:
            return self.call(self._verify(full, settle), settle + self.timeout * 2)
        except Exception as exc:
            return [Violation("consume-failed", "consumer", f"{type(exc).__name__}: {exc}")]

    async def _verify(self, full: bool, settle: float) -> list[Violation]:
        problems: list[Violation] = []
        positions = dict.fromkeys(range(QUEUES), 0) if full else dict(self.next_offset)
        deadline = time.monotonic() + settle
        instance = self.producer.instance
        while True:
            for queue_id in range(QUEUES):
                mq = MessageQueue(TOPIC, BROKER_NAME, queue_id)
                while True:
                    result = await pull_message(instance, CONSUMER_GROUP, mq, "*", positions[queue_id], 32)
                    if result.status is not PullStatus.FOUND:
                        if result.status is PullStatus.OFFSET_ILLEGAL:
                            problems.append(Violation(
                                "consume-failed", "consumer",
                                f"queue {queue_id} offset {positions[queue_id]} is illegal "
                                f"(min {result.min_offset}, max {result.max_offset})"))
                        break
                    for message in result.messages:
                        problems.extend(self._check(queue_id, message))
                    if result.next_begin_offset <= positions[queue_id]:
                        break
                    positions[queue_id] = result.next_begin_offset
            missing = [key for key in self.acked if key[1] >= positions[key[0]]]
            if not missing or problems or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        for queue_id, offset in sorted(missing)[:20]:
            ack = self.acked[(queue_id, offset)]
            problems.append(Violation("message-missing", "consumer",
                                      f"message {ack.seq} acknowledged at queue {queue_id} offset {offset} "
                                      f"({ack.offset_msg_id}) cannot be read"))
        if not full:
            self.next_offset = positions
        return problems

    def _check(self, queue_id: int, message: MessageExt) -> list[Violation]:
        record = message.record
        ack = self.acked.get((queue_id, record.queue_offset))
        where = f"queue {queue_id} offset {record.queue_offset}"
        if ack is None:
            if self.failed_sends:  # a send that failed on our side may have been stored
                return []
            return [Violation("foreign-message", "consumer", f"{where}: {record.topic} "
                              f"{record.properties_string[:200]!r} {record.body[:60]!r}")]
        wrong = []
        if record.topic != TOPIC or record.queue_id != queue_id:
            wrong.append(f"topic/queue {record.topic}/{record.queue_id}")
        if message.body != ack.body:
            wrong.append(f"body {message.body[:60]!r} != {ack.body[:60]!r}")
        if body_crc(record.body) != record.body_crc:
            wrong.append("body CRC")
        got = record.properties
        for name, value in ack.props.items():
            if got.get(name) != value:
                wrong.append(f"property {name}={got.get(name)!r}, sent {value!r}")
        if record.uniq_key != ack.uniq:
            wrong.append(f"UNIQ_KEY {record.uniq_key} != {ack.uniq}")
        if record.msg_id != ack.offset_msg_id:
            wrong.append(f"offset msgId {record.msg_id} != {ack.offset_msg_id}")
        if wrong:
            return [Violation("message-corrupt", "consumer",
                              f"message {ack.seq} at {where}: " + "; ".join(wrong))]
        self.verified_keys.add((queue_id, record.queue_offset))
        return []
