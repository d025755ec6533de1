"""``rocketdesk bench producer`` and ``rocketdesk bench consumer``, after RocketMQ's benchmark tools.

Every second a line: send (or consume) TPS, max and average RT, failures; then a summary.
Senders are coroutines on one event loop (``-w``), each sending synchronously, one message at a
time, or a batch of ``--batch`` messages per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from cluster.client.consumer import ConsumeStatus, PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from cluster.remoting import event_loop
from rocketdesk.cli_numbers import positive


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namesrv", help="name server address(es), ';'-separated "
                        "(default: $NAMESRV_ADDR, else the cluster RocketDesk runs)")
    parser.add_argument("--cluster", help="a cluster RocketDesk runs, by name")


def _resolve(args: argparse.Namespace) -> None:
    if not args.namesrv:
        from rocketdesk.cli_cluster import namesrv_of

        args.namesrv = namesrv_of(args.cluster)


def add_producer_arguments(parser: argparse.ArgumentParser) -> None:
    _target(parser)
    parser.add_argument("-t", "--topic", default="BenchmarkTest")
    parser.add_argument("-w", "--threads", type=positive, default=64, help="concurrent senders")
    parser.add_argument("-s", "--size", type=positive, default=1024, help="body size in bytes")
    parser.add_argument("-k", "--keys", action="store_true", help="give every message a key")
    parser.add_argument("--tags", default=None, help="tag for every message")
    parser.add_argument("--batch", type=int, default=0, help="messages per batch request (0: single)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds to run")
    parser.set_defaults(func=run_producer_bench)


def add_consumer_arguments(parser: argparse.ArgumentParser) -> None:
    _target(parser)
    parser.add_argument("-t", "--topic", default="BenchmarkTest")
    parser.add_argument("-g", "--group", default="benchmark_consumer")
    parser.add_argument("--expression", default="*")
    parser.add_argument("--from-first", action="store_true", help="start at the first offset")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds to run")
    parser.set_defaults(func=run_consumer_bench)


class _Window:
    def __init__(self) -> None:
        self.count = 0
        self.failures = 0
        self.rts: list[float] = []

    def reset(self) -> _Window:
        old = _Window()
        old.count, old.failures, old.rts = self.count, self.failures, self.rts
        self.count, self.failures, self.rts = 0, 0, []
        return old


async def producer_bench(args: argparse.Namespace, out=print) -> dict:
    body = os.urandom(args.size)
    window = _Window()
    totals = {"count": 0, "failures": 0, "rts": []}
    stop = asyncio.Event()
    async with Producer("benchmark_producer", args.namesrv, send_msg_timeout=5) as producer:
        # Resolve the route once before the clock starts (auto-creation on first send).
        await producer.send(Message(args.topic, body, tags=args.tags))

        async def sender(number: int) -> None:
            sequence = 0
            while not stop.is_set():
                count = max(args.batch, 1)
                messages = [Message(args.topic, body, tags=args.tags,
                                    keys=f"k-{number}-{sequence + i}" if args.keys else None)
                            for i in range(count)]
                sequence += count
                begin = time.perf_counter()
                try:
                    if args.batch:
                        result = await producer.send_batch(messages)
                    else:
                        result = await producer.send(messages[0])
                    ok = result.status is SendStatus.SEND_OK
                except Exception:
                    ok = False
                rt = (time.perf_counter() - begin) * 1000
                if ok:
                    window.count += count
                    window.rts.append(rt)
                else:
                    window.failures += count

        tasks = [asyncio.create_task(sender(i)) for i in range(args.threads)]
        started = time.perf_counter()
        while time.perf_counter() - started < args.duration:
            await asyncio.sleep(1.0)
            snap = window.reset()
            totals["count"] += snap.count
            totals["failures"] += snap.failures
            totals["rts"].extend(snap.rts)
            out(f"Send TPS: {snap.count:,} Max RT(ms): {max(snap.rts, default=0):.2f} "
                f"Average RT(ms): {statistics.fmean(snap.rts) if snap.rts else 0:.3f} "
                f"Send Failed: {snap.failures}")
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = time.perf_counter() - started
    rts = totals["rts"]
    summary = {"tps": totals["count"] / elapsed, "messages": totals["count"],
               "failures": totals["failures"], "avg_rt_ms": statistics.fmean(rts) if rts else 0.0,
               "max_rt_ms": max(rts, default=0.0)}
    out(f"[Complete] Send Total: {summary['messages']:,} Send TPS: {summary['tps']:,.0f} "
        f"Max RT(ms): {summary['max_rt_ms']:.2f} Average RT(ms): {summary['avg_rt_ms']:.3f} "
        f"Send Failed: {summary['failures']}")
    return summary


async def consumer_bench(args: argparse.Namespace, out=print) -> dict:
    window = _Window()
    total = 0
    consumer = PushConsumer(args.group, args.namesrv, consume_message_batch_max_size=32,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET" if args.from_first
                            else "CONSUME_FROM_LAST_OFFSET")
    consumer.subscribe(args.topic, args.expression)

    async def listener(messages):
        now = time.time() * 1000
        window.count += len(messages)
        window.rts.extend(now - m.record.store_timestamp for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_listener(listener)
    await consumer.start()
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < args.duration:
            await asyncio.sleep(1.0)
            snap = window.reset()
            total += snap.count
            out(f"Consume TPS: {snap.count:,} Average(B2C) RT(ms): "
                f"{statistics.fmean(snap.rts) if snap.rts else 0:.1f} "
                f"Max(B2C) RT(ms): {max(snap.rts, default=0):.1f}")
    finally:
        await consumer.shutdown()
    elapsed = time.perf_counter() - started
    out(f"[Complete] Consume Total: {total:,} Consume TPS: {total / elapsed:,.0f}")
    return {"tps": total / elapsed, "messages": total}


def run_producer_bench(args: argparse.Namespace) -> int:
    _resolve(args)
    summary = event_loop.run(producer_bench(args))
    return 0 if summary["messages"] else 1


def run_consumer_bench(args: argparse.Namespace) -> int:
    _resolve(args)
    event_loop.run(consumer_bench(args))
    return 0
