"""CPU a broker spends on one SEND_MESSAGE_V2, measured in-process with no client and no socket.

A real BrokerController (store, dispatch, index) on a temporary folder; pre-encoded frames are
fed to one of its RemotingConnections through a transport that only counts the bytes written,
``--burst`` frames per read as a pipelining client sends them. What is left is the broker's own
work a message: frame split, header decode and checks, the put, dispatch and the encoded answer.
With ``--batch N`` the frames are SEND_BATCH_MESSAGE requests of N messages each (one a read).
With ``--pull N`` the messages are sent first, unmeasured, and what is measured is reading them
back with PULL_MESSAGE requests of N messages each, one a read, as a consumer pulls (the
subscription in the request, its offset committed, long polling allowed): the CPU a pulled
message.

    python scripts/bench_broker_path.py [--messages 50000] [--burst 32] [--queues 4] [--batch 0] [--pull 0]
        [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.client.pull import pull_request

try:
    from cluster.remoting import event_loop
except ImportError:  # a checkout from before the loop choice (to measure "before")
    event_loop = None
from cluster.remoting.codec import encode, request
from cluster.remoting.codes import RequestCode
from storage.message import properties_to_string
from storage.message_id import UniqIdGenerator
from storage.record import encode_batch_parts


class CountingTransport:
    """What RemotingConnection needs of a transport; the answers are counted, not sent."""

    def __init__(self) -> None:
        self.written = 0
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        self.writes += 1

    def writelines(self, frames) -> None:
        self.written += sum(map(len, frames))
        self.writes += 1

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 54321) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def send_frames(count: int, size: int, batch: int = 0, queues: int = 4) -> list[bytes]:
    """``count`` SEND_MESSAGE_V2 frames, or SEND_BATCH_MESSAGE frames of ``batch`` messages,
    to ``queues`` queues in turn."""
    ids = UniqIdGenerator()
    body = os.urandom(size)
    frames = []
    if batch:
        for i in range(count):
            inner = encode_batch_parts((0, body, properties_to_string({"UNIQ_KEY": ids.next_id()}))
                                       for _ in range(batch))
            fields = {"a": "benchmark_producer", "b": "BenchmarkTest", "c": "TBW102", "d": 4,
                      "e": i % 4, "f": 0, "g": int(time.time() * 1000), "h": 0,
                      "i": "WAIT\x01true\x02", "j": 0, "k": False, "m": True}
            frames.append(encode(request(RequestCode.SEND_BATCH_MESSAGE, fields, inner,
                                         opaque=i + 1)))
        return frames
    for i in range(count):
        props = {"UNIQ_KEY": ids.next_id(), "WAIT": "true"}
        fields = {"a": "benchmark_producer", "b": "BenchmarkTest", "c": "TBW102", "d": 4,
                  "e": i % queues, "f": 0, "g": int(time.time() * 1000), "h": 0,
                  "i": properties_to_string(props), "j": 0, "k": False, "m": False}
        frames.append(encode(request(RequestCode.SEND_MESSAGE_V2, fields, body, opaque=i + 1)))
    return frames


def pull_frames(broker: BrokerController, count: int) -> list[bytes]:
    """PULL_MESSAGE frames reading every queue of BenchmarkTest from its start, ``count``
    messages each, as a push consumer asks (subscription, commit offset, suspend flags)."""
    frames = []
    for queue_id in range(4):
        end = broker.store.get_max_offset_in_queue("BenchmarkTest", queue_id)
        for offset in range(0, end, count):
            command = pull_request("benchmark_consumer", "BenchmarkTest", queue_id, offset, count,
                                   suspend_ms=15000, commit_offset=offset)
            frames.append(encode(replace(command, opaque=len(frames) + 1)))
    return frames


async def measure(args: argparse.Namespace, folder: str) -> None:
    config, store_config, _ = load_broker_config({
        "brokerName": "bench", "listenPort": "0", "storePathRootDir": folder,
        "autoCreateTopicEnable": "true", "brokerIP1": "127.0.0.1",
        # Pulls as big as asked, as `rocketdesk bench export` configures its brokers.
        **({key: str(max(args.pull, 32)) for key in (
            "maxTransferCountOnMessageInMemory", "maxTransferCountOnMessageInDisk")}),
        **({key: str(max(args.pull * (args.size + 256), 262144)) for key in (
            "maxTransferBytesOnMessageInMemory", "maxTransferBytesOnMessageInDisk")}),
    })
    broker = BrokerController(config, store_config)
    await broker.start()
    try:
        connection = broker.server._new_connection()
        transport = CountingTransport()
        connection.connection_made(transport)
        warm = send_frames(max(2000, 2 * args.queues), args.size, 0, args.queues)  # (files made)
        for frame in warm:
            connection.data_received(frame)
        await asyncio.sleep(0.2)
        try:
            from common.speedups import describe
            core = describe()
        except ImportError:
            core = "pure Python"
        per_frame = args.batch or 1
        frames = send_frames(args.messages // per_frame, args.size, args.batch, args.queues)
        burst = max(1, args.burst // per_frame)
        reads = [b"".join(frames[i:i + burst]) for i in range(0, len(frames), burst)]
        if args.pull:
            for data in reads:
                connection.data_received(data)
                await asyncio.sleep(0)
            broker.store.wait_dispatched()
            reads = pull_frames(broker, args.pull)
            answers = transport.writes + len(reads)
        profiler = cProfile.Profile() if args.profile else None
        before = transport.written
        start = time.process_time()
        start_loop = time.thread_time()
        if profiler:
            profiler.enable()
        for data in reads:
            connection.data_received(data)
            await asyncio.sleep(0)  # the iteration's end: answers written, dispatch run
        await asyncio.sleep(0)
        deadline = time.monotonic() + 60
        while args.pull and transport.writes < answers:
            if time.monotonic() > deadline:  # (a pull held, or answers merged into one write)
                raise SystemExit(f"{answers - transport.writes} pulls unanswered after 60 s")
            await asyncio.sleep(0)
        if profiler:
            profiler.disable()
        cpu = time.process_time() - start
        loop_cpu = time.thread_time() - start_loop
        broker.store.wait_dispatched()
        loop = event_loop.loop_name() if event_loop else "asyncio"
        shape = f"in batches of {args.batch}" if args.batch else f"in bursts of {args.burst}"
        if args.pull:
            shape = f"pulled {args.pull} a request"
        print(f"{args.messages} messages {shape}, {args.size}-byte bodies, "
              f"loop {loop}, {core}: {cpu / args.messages * 1e6:.2f} µs CPU a message "
              f"({args.messages / cpu:,.0f} messages/s of one core); {transport.written - before:,} "
              f"answer bytes in {transport.writes} writes; {loop_cpu / args.messages * 1e6:.1f} µs "
              f"of it on the event loop's thread")
        if profiler:
            pstats.Stats(profiler).sort_stats(os.environ.get("PSORT", "tottime")).print_stats(args.top)
    finally:
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50000)
    parser.add_argument("--burst", type=int, default=32)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--queues", type=int, default=4,
                        help="queues the sends go to in turn (BenchmarkTest has 1,024: 32 "
                             "senders of `bench producer` send to 32 of them at once)")
    parser.add_argument("--batch", type=int, default=0,
                        help="messages a SEND_BATCH_MESSAGE request (0: single sends)")
    parser.add_argument("--pull", type=int, default=0,
                        help="measure pulls of N messages instead of the sends")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the run")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as folder:
        if event_loop is None:
            asyncio.run(measure(args, folder))
        else:
            event_loop.run(measure(args, folder))


if __name__ == "__main__":
    main()
