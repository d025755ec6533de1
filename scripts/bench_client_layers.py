"""Where one sender's client CPU goes, layer by layer, against a running cluster.

One producer sends 1 KiB messages one at a time, each awaited, four ways in turn, the rounds
alternating so that drift hits them alike: the connection's ``invoke`` of a request framed
once, the same with the request made afresh each time (``Producer._request``), the
producer's ``send``, and a minimal client (the same frame written again, only the answer's
length read) that shows what the broker allows. It prints, per way, the median of the rounds:
sends a second and this process's CPU a send (docs/benchmarks.md, session 35).

    python scripts/bench_client_layers.py [-n 127.0.0.1:9876] [--sends 8000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.client.route import MessageQueue
from cluster.remoting import event_loop

TOPIC = "BenchClientLayers"


class _Minimal(asyncio.Protocol):
    """Reads answers as whole frames by their length prefix, nothing more."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.buffer = b""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= 4 and len(self.buffer) >= 4 + int.from_bytes(self.buffer[:4], "big"):
            self.buffer = b""
            waiter, self.waiter = self.waiter, None
            if waiter is not None:
                waiter.set_result(None)


async def main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    async with Producer("bench_client_layers", args.namesrv) as producer:
        msg = Message(TOPIC, os.urandom(1024))
        first = await producer.send(msg)  # (the topic and the route)
        queue = MessageQueue(TOPIC, first.message_queue.broker_name, 0)
        address = producer.instance.master_addr(queue.broker_name)
        connection = await producer.instance.remoting.connection(address)
        prepared = producer._request(msg, queue, "0" * 32)
        host, port = address.rsplit(":", 1)
        transport, minimal = await loop.create_connection(_Minimal, host, int(port))
        frame = prepared.frame(1)

        async def minimal_send() -> None:
            minimal.waiter = loop.create_future()
            transport.write(frame)
            await minimal.waiter

        ways = {
            "minimal client (the broker's share)": minimal_send,
            "connection.invoke, framed once": lambda: connection.invoke(prepared, 5.0),
            "the request made afresh": lambda: connection.invoke(
                producer._request(msg, queue, producer.ids.next_id()), 5.0),
            "Producer.send": lambda: producer.send(msg),
        }
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, way in ways.items():
                started, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.sends):
                    await way()
                elapsed = time.perf_counter() - started
                figures[name].append((args.sends / elapsed,
                                      (time.process_time() - cpu) / args.sends * 1e6))
        transport.close()
    print(f"{args.sends} sends a way and round, {args.rounds} rounds, 1 KiB bodies (medians):")
    for name, rounds in figures.items():
        rate = statistics.median(r[0] for r in rounds)
        cpu = statistics.median(r[1] for r in rounds)
        print(f"  {name:38s} {rate:8,.0f} sends/s   client CPU {cpu:5.1f} µs a send")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    parser.add_argument("--sends", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=5)
    event_loop.run(main(parser.parse_args()))
