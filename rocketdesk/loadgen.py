"""``python -m rocketdesk.loadgen producer|consumer``: load the console starts and charts.

Each second one JSON line on stdout: TPS, failures, a response-time histogram and, for
producers, the latency-fault table (broker, current latency, not available until). Consumers
can be made slow or made to fail, to watch lag and retries grow.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from cluster.client.consumer import ConsumeStatus, PushConsumer
from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from cluster.remoting import event_loop
from common.platform import processes
from rocketdesk.cli_numbers import positive

# Upper bounds (ms) of the response-time buckets; the last one is open.
RT_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000]


def bucket(ms: float) -> int:
    for index, bound in enumerate(RT_BUCKETS):
        if ms <= bound:
            return index
    return len(RT_BUCKETS)


class Window:
    def __init__(self) -> None:
        self.count = self.failures = 0
        self.histogram = [0] * (len(RT_BUCKETS) + 1)
        self.max_rt = 0.0
        self.last_error: str | None = None  # the second's last failure, in its own words

    def record(self, ok: bool, rt_ms: float, count: int = 1) -> None:
        if ok:
            self.count += count
            self.histogram[bucket(rt_ms)] += 1
            self.max_rt = max(self.max_rt, rt_ms)
        else:
            self.failures += count


def emit(**values) -> None:
    sys.stdout.write(json.dumps({"time": time.time(), **values}) + "\n")
    sys.stdout.flush()


async def produce(args) -> None:
    body = os.urandom(args.size)
    window = Window()
    stop = asyncio.Event()
    per_sender = args.rate / args.threads if args.rate else 0
    async with Producer(args.group, args.namesrv) as producer:
        async def sender(number: int) -> None:
            sequence = 0
            while not stop.is_set():
                began = time.perf_counter()
                key = f"lg-{number}-{sequence}"
                messages = [Message(args.topic, body, tags=args.tags,
                                    keys=f"{key}-{i}" if args.keys else None)
                            for i in range(max(args.batch, 1))]
                sequence += 1
                try:
                    if args.mode == "oneway":
                        await producer.send_oneway(messages[0])
                        ok = True
                    elif args.batch:
                        ok = (await producer.send_batch(messages)).status is SendStatus.SEND_OK
                    elif args.orderly:
                        # One queue per sender, as a message selector keyed by order id would.
                        def pick(queues, n=number):
                            return sorted(queues, key=lambda q: (q.broker_name, q.queue_id))[n % len(queues)]

                        result = await producer.send(messages[0], selector=pick)
                        ok = result.status is SendStatus.SEND_OK
                    else:
                        ok = (await producer.send(messages[0])).status is SendStatus.SEND_OK
                except Exception as exc:
                    ok = False
                    window.last_error = str(exc).strip().splitlines()[0] if str(exc).strip() \
                        else type(exc).__name__
                window.record(ok, (time.perf_counter() - began) * 1000, len(messages))
                if per_sender:
                    await asyncio.sleep(max(0.0, len(messages) / per_sender - (time.perf_counter() - began)))

        tasks = [asyncio.create_task(sender(i)) for i in range(args.threads)]
        await _report(lambda: window, producer.fault_items, args.duration, stop)
        await asyncio.gather(*tasks, return_exceptions=True)
    emit(event="stopped")


async def consume(args) -> None:
    window = Window()
    stop = asyncio.Event()
    consumer = PushConsumer(args.group, args.namesrv, consume_from_where="CONSUME_FROM_LAST_OFFSET")
    consumer.subscribe(args.topic, args.tags or "*")
    seen = [0]

    async def listener(messages):
        seen[0] += 1
        if args.fail_every and seen[0] % args.fail_every == 0:
            window.record(False, 0, len(messages))
            return ConsumeStatus.RECONSUME_LATER
        if args.slow_ms:
            await asyncio.sleep(args.slow_ms / 1000 * len(messages))
        now = time.time() * 1000
        for message in messages:
            window.record(True, now - message.record.store_timestamp)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_listener(listener)
    await consumer.start()
    try:
        await _report(lambda: window, list, args.duration, stop)
    finally:
        await consumer.shutdown()
    emit(event="stopped")


async def _report(current, faults, duration: float, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    processes.on_stop_request(loop, stop.set)  # SIGTERM, Ctrl-C, a request file (Windows)
    began = time.monotonic()
    while not stop.is_set():
        try:
            async with asyncio.timeout(1.0):
                await stop.wait()
        except TimeoutError:
            pass
        window = current()
        emit(event="second", tps=window.count, failures=window.failures, maxRt=round(window.max_rt, 2),
             histogram=window.histogram, buckets=RT_BUCKETS, faults=faults(),
             error=window.last_error)
        window.__init__()
        if duration and time.monotonic() - began >= duration:
            stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocketdesk.loadgen")
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("producer")
    p.add_argument("-n", "--namesrv", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="rocketdesk-loadgen")
    p.add_argument("--rate", type=float, default=0, help="messages/s in all (0: as fast as possible)")
    p.add_argument("-w", "--threads", type=positive, default=4)
    p.add_argument("-s", "--size", type=positive, default=1024)
    p.add_argument("-k", "--keys", action="store_true")
    p.add_argument("--tags")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--mode", choices=["sync", "async", "oneway"], default="sync")
    p.add_argument("--orderly", action="store_true", help="each sender keeps to one queue")
    p.add_argument("--duration", type=float, default=0, help="seconds (0: until stopped)")
    c = sub.add_parser("consumer")
    c.add_argument("-n", "--namesrv", required=True)
    c.add_argument("-t", "--topic", required=True)
    c.add_argument("-g", "--group", default="rocketdesk-loadgen-consumer")
    c.add_argument("--tags")
    c.add_argument("--slow-ms", type=float, default=0, help="extra milliseconds per message")
    c.add_argument("--fail-every", type=int, default=0, help="every Nth delivery asks to reconsume")
    c.add_argument("--duration", type=float, default=0)
    args = parser.parse_args(argv)
    event_loop.run(produce(args) if args.role == "producer" else consume(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
