"""``rocketdesk bench proxy``: 5.x (gRPC, through the proxy) beside 4.x (remoting), one run.

Starts a scratch `single` cluster (name server, broker, proxy), then with ``-w`` concurrent
senders of ``--size``-byte messages for ``--duration`` seconds each:

* 4.x send: RocketDesk's remoting producer, synchronous sends;
* 5.x send: SendMessage over gRPC to the proxy (the wire calls a 5.x client makes);
* 4.x receive: a push consumer draining what the 4.x senders wrote;
* 5.x receive: ReceiveMessage batches of 32 with their AckMessage, ``-w`` receivers, draining
  what the 5.x senders wrote.

The 5.x side uses the protocol's own calls (our messaging.proto), not a particular client's
threads, so the figures are the proxy's and the broker's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import grpc

from cluster.client.admin import AdminClient
from cluster.client.consumer import PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.proxy.schema import Code, pb, services
from cluster.supervisor.spec import load_profile
from cluster.supervisor.supervisor import Supervisor
from rocketdesk.cli_numbers import positive

TOPIC_4X, TOPIC_5X = "BenchRemoting", "BenchGrpc"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-w", "--workers", type=positive, default=32,
                        help="concurrent senders, and 5.x receivers (default 32)")
    parser.add_argument("-s", "--size", type=positive, default=1024, help="body size (default 1024)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a send run lasts")
    parser.set_defaults(func=run_proxy_bench)


def _summary(name: str, count: int, seconds: float, latencies: list[float]) -> str:
    text = f"  {name:<12}{count / seconds:>10,.0f} msg/s  ({count:,} in {seconds:.1f} s)"
    if latencies:
        latencies.sort()
        text += (f"  mean {statistics.fmean(latencies) * 1000:.2f} ms, "
                 f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.2f} ms")
    return text


async def send_4x(namesrv: str, args) -> tuple[int, float, list[float]]:
    body = os.urandom(args.size)
    latencies: list[float] = []
    async with Producer("bench-4x", namesrv) as producer:
        await producer.send(Message(TOPIC_4X, body))  # the route, before the clock starts
        deadline = time.monotonic() + args.duration

        async def sender() -> int:
            sent = 0
            while time.monotonic() < deadline:
                began = time.perf_counter()
                await producer.send(Message(TOPIC_4X, body, tags="bench"))
                latencies.append(time.perf_counter() - began)
                sent += 1
            return sent

        began = time.monotonic()
        counts = await asyncio.gather(*(sender() for _ in range(args.workers)))
    return sum(counts) + 1, time.monotonic() - began, latencies


def _message(body: bytes):
    return pb.Message(topic=pb.Resource(name=TOPIC_5X), body=body,
                      system_properties=pb.SystemProperties(
                          message_id=uuid.uuid4().hex.upper(), tag="bench",
                          body_encoding=pb.IDENTITY, message_type=pb.NORMAL))


async def send_5x(proxy: str, args) -> tuple[int, float, list[float]]:
    body = os.urandom(args.size)
    latencies: list[float] = []
    meta = (("x-mq-client-id", f"bench-5x@{os.getpid()}"), ("x-mq-language", "PYTHON"))
    async with grpc.aio.insecure_channel(proxy) as channel:
        stub = services.MessagingServiceStub(channel)
        await stub.SendMessage(pb.SendMessageRequest(messages=[_message(body)]), metadata=meta)
        deadline = time.monotonic() + args.duration

        async def sender() -> int:
            sent = 0
            while time.monotonic() < deadline:
                began = time.perf_counter()
                answer = await stub.SendMessage(pb.SendMessageRequest(messages=[_message(body)]),
                                                metadata=meta)
                if answer.status.code != Code.OK:
                    raise RuntimeError(f"a 5.x send failed: {answer.status.message}")
                latencies.append(time.perf_counter() - began)
                sent += 1
            return sent

        began = time.monotonic()
        counts = await asyncio.gather(*(sender() for _ in range(args.workers)))
    return sum(counts) + 1, time.monotonic() - began, latencies


async def receive_4x(namesrv: str, total: int) -> tuple[int, float]:
    got = 0
    done = asyncio.Event()

    async def listener(messages):
        nonlocal got
        got += len(messages)
        if got >= total:
            done.set()
        return True

    consumer = PushConsumer("bench-4x-consumer", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            consume_message_batch_max_size=32)
    consumer.subscribe(TOPIC_4X, "*")
    consumer.register_listener(listener)
    began = time.monotonic()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 600)
    finally:
        await consumer.shutdown()
    return got, time.monotonic() - began


async def receive_5x(proxy: str, broker_name: str, total: int, workers: int) -> tuple[int, float]:
    meta = (("x-mq-client-id", f"bench-5x-consumer@{os.getpid()}"), ("x-mq-language", "PYTHON"))
    group = pb.Resource(name="bench-5x-consumer")
    queue = pb.MessageQueue(topic=pb.Resource(name=TOPIC_5X), id=-1,
                            broker=pb.Broker(name=broker_name))
    got = 0
    async with grpc.aio.insecure_channel(proxy) as channel:
        stub = services.MessagingServiceStub(channel)

        async def receiver() -> None:
            nonlocal got
            while got < total:
                request = pb.ReceiveMessageRequest(
                    group=group, message_queue=queue, batch_size=32,
                    filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
                request.invisible_duration.FromSeconds(30)
                request.long_polling_timeout.FromSeconds(1)
                entries = []
                async for answer in stub.ReceiveMessage(request, metadata=meta):
                    if answer.WhichOneof("content") == "message":
                        entries.append(pb.AckMessageEntry(
                            message_id=answer.message.system_properties.message_id,
                            receipt_handle=answer.message.system_properties.receipt_handle))
                if entries:
                    await stub.AckMessage(pb.AckMessageRequest(
                        group=group, topic=pb.Resource(name=TOPIC_5X), entries=entries),
                        metadata=meta)
                    got += len(entries)

        began = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(workers))), 600)
    return got, time.monotonic() - began


async def _run(args, supervisor: Supervisor) -> None:
    namesrv, proxy = supervisor.state.namesrv_addr, supervisor.state.proxy_addr
    async with AdminClient(namesrv) as admin:
        for topic in (TOPIC_4X, TOPIC_5X):
            await admin.create_topic(topic, 8, 8)
        broker_name = next(iter(await admin.master_addrs()))
    print(f"proxy benchmark: {args.workers} workers, {args.size}-byte bodies, {os.cpu_count()} "
          f"cores; name server {namesrv}, proxy {proxy}")
    sent4, seconds, latencies = await send_4x(namesrv, args)
    print(_summary("4.x send", sent4, seconds, latencies), flush=True)
    sent5, seconds, latencies = await send_5x(proxy, args)
    print(_summary("5.x send", sent5, seconds, latencies), flush=True)
    got, seconds = await receive_4x(namesrv, sent4)
    print(_summary("4.x receive", got, seconds, []), flush=True)
    got, seconds = await receive_5x(proxy, broker_name, sent5, args.workers)
    print(_summary("5.x receive", got, seconds, []), flush=True)


def run_proxy_bench(args: argparse.Namespace) -> int:
    scratch = tempfile.mkdtemp(prefix="rocketdesk-proxy-bench-")
    spec = load_profile("single")
    spec.prefer_default_ports = False
    supervisor = Supervisor.create(spec, "bench-proxy", root=Path(scratch))
    try:
        asyncio.run(supervisor.start())
        asyncio.run(_run(args, supervisor))
    finally:
        asyncio.run(supervisor.stop(grace=5))
        shutil.rmtree(scratch, ignore_errors=True)
    return 0
