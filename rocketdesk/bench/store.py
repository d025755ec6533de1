"""``rocketdesk bench store``: figures for the message store on this machine.

* async: ASYNC_FLUSH puts of ``--size`` byte messages (tags, two keys, a UNIQ_KEY), timed until
  every message is dispatched to its ConsumeQueue and the index by the store's dispatch thread;
  the same dispatched on the putting thread after each put (what a broker does after a read's
  burst of sends); then the same messages in batches of ``--batch`` (what a
  SEND_BATCH_MESSAGE puts), dispatch included too;
* sync: SYNC_FLUSH with ``--writers`` concurrent writers on an event loop, each waiting for its
  group commit before the next put;
* recovery: time to load and recover the CommitLog just written, after a clean shutdown
  (normal recovery) and after a simulated crash (abort file left behind);
* query: query by key among all messages written (average and 99th percentile).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from cluster.broker.bridge import LoopBridge
from cluster.remoting import event_loop
from rocketdesk.cli_numbers import positive
from storage.config import FlushDiskType, MessageStoreConfig
from storage.message import MessageExtBatch, MessageExtBrokerInner
from storage.message_id import UniqIdGenerator, host_to_bytes
from storage.message_store import DefaultMessageStore
from storage.record import BatchEntry, encode_batch_body

TOPIC = "BenchmarkTest"
BORN_HOST = ("127.0.0.1", 50000)
# The one-by-one puts' properties are made this many messages at a time, off the clock.
PROPERTIES_CHUNK = 65_536


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive, default=1_000_000,
                        help="messages for the async, recovery and query runs (default 1,000,000)")
    parser.add_argument("--size", type=positive, default=1024, help="body size in bytes (default 1024)")
    parser.add_argument("--writers", type=positive, default=64,
                        help="concurrent writers for the SYNC_FLUSH run (default 64)")
    parser.add_argument("--sync-seconds", type=float, default=5.0,
                        help="how long the SYNC_FLUSH run lasts (default 5)")
    parser.add_argument("--queues", type=positive, default=8, help="queues of the topic (default 8)")
    parser.add_argument("--batch", type=int, default=32,
                        help="messages a batch for the batched ASYNC_FLUSH run (default 32; 0: none)")
    parser.add_argument("--file-size", type=int, default=1024**3,
                        help="CommitLog file size (default 1 GiB, RocketMQ's)")
    parser.add_argument("--dir", help="scratch directory (default: a temporary folder, removed)")
    parser.add_argument("--only", choices=["async", "sync", "recovery", "query"], action="append",
                        help="run only these parts (repeatable)")
    parser.set_defaults(func=run_store_bench)


def _config(root: str, args: argparse.Namespace, flush: FlushDiskType) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=args.file_size,
        flush_disk_type=flush,
        delete_when="99",  # never an hour: the benchmark must not delete what it measures
    )


def _properties(key: str, uniq: str) -> str:
    return f"TAGS\x01TagA\x02KEYS\x01{key} order-{key}\x02UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02"


def _message(body: bytes, queue_id: int, key: str, uniq: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic=TOPIC, body=body, queue_id=queue_id, properties_string=_properties(key, uniq),
        born_timestamp=int(time.time() * 1000), born_host=BORN_HOST,
    )


def _running_store(root: str, args: argparse.Namespace, flush: FlushDiskType) -> DefaultMessageStore:
    store = DefaultMessageStore(_config(root, args, flush))
    store.load()
    store.start()
    return store


def bench_async(root: str, args: argparse.Namespace, inline: bool = False) -> dict:
    """ASYNC_FLUSH puts one by one until all is dispatched: by the store's dispatch thread
    (a put wakes it), or with ``inline`` on the putting thread right after each put, as a
    broker dispatches after every read's burst of sends (cluster/broker/append_notifier.py)."""
    store = _running_store(root, args, FlushDiskType.ASYNC_FLUSH)
    dispatch = store.reput.reput_inline if inline else None
    if inline:
        store.commit_log.on_append = None  # the broker's hook replaces the thread's wakeup
    body = os.urandom(args.size)
    ids = UniqIdGenerator()
    queues = args.queues
    n = args.messages
    host = host_to_bytes(*BORN_HOST)
    put_plain, put_message = store.put_plain, store.put_message_nowait
    putting = 0.0
    for start in range(0, n, PROPERTIES_CHUNK):
        # Each message's properties (its own keys and UNIQ_KEY), made before the clock runs
        # for them, as a broker is handed them decoded from the send's header: the figure is
        # the store's. Made in the timed loop they cost ~15 % of it (docs/benchmarks.md).
        stop = min(n, start + PROPERTIES_CHUNK)
        properties = [_properties(f"k{i}", ids.next_id()) for i in range(start, stop)]
        born = int(time.time() * 1000)
        began = time.perf_counter()
        for i in range(start, stop):
            # As the broker puts a sender's message: in one step, or the general way where
            # that one declines (a new file, claiming blocks).
            text = properties[i - start]
            if put_plain(TOPIC, i % queues, 0, body, text, 0, born, host, 0) is None:
                put_message(MessageExtBrokerInner(
                    topic=TOPIC, body=body, queue_id=i % queues, properties_string=text,
                    born_timestamp=born, born_host=BORN_HOST))
            if dispatch is not None:
                dispatch()
        putting += time.perf_counter() - began
    began = time.perf_counter()
    store.wait_dispatched(timeout=600)
    seconds = putting + time.perf_counter() - began
    store.shutdown()
    return {
        "messages": n,
        "put_seconds": putting,
        "seconds": seconds,
        "msg_per_s": n / seconds,
        "commitlog_bytes": store.commit_log.get_max_offset(),
    }


def bench_async_batches(root: str, args: argparse.Namespace) -> dict:
    """ASYNC_FLUSH puts of batches, as SEND_BATCH_MESSAGE makes them, until all is dispatched."""
    store = _running_store(root, args, FlushDiskType.ASYNC_FLUSH)
    body = os.urandom(args.size)
    ids = UniqIdGenerator()
    size = args.batch
    batches = args.messages // size
    # Requests as a broker receives them, built beforehand (256 of them, sent in turn: the
    # figure is the store's, not the encoder's); keys repeat every 256 batches.
    bodies = [
        encode_batch_body([
            BatchEntry(0, body, f"TAGS\x01TagA\x02KEYS\x01b{b}-{i}\x02UNIQ_KEY\x01{ids.next_id()}\x02")
            for i in range(size)
        ])
        for b in range(min(batches, 256))
    ]
    born = int(time.time() * 1000)
    started = time.perf_counter()
    for b in range(batches):
        store.put_messages_nowait(MessageExtBatch(
            topic=TOPIC, body=bodies[b % len(bodies)], queue_id=b % args.queues,
            properties={"WAIT": "true"}, born_timestamp=born, born_host=BORN_HOST))
    store.wait_dispatched(timeout=600)
    elapsed = time.perf_counter() - started
    store.shutdown()
    return {"messages": batches * size, "seconds": elapsed,
            "msg_per_s": batches * size / elapsed}


def bench_sync(root: str, args: argparse.Namespace) -> dict:
    store = _running_store(root, args, FlushDiskType.SYNC_FLUSH)
    body = os.urandom(args.size)
    ids = UniqIdGenerator()
    latencies: list[float] = []
    failures = 0

    async def writer(number: int, deadline: float) -> int:
        nonlocal failures
        loop = asyncio.get_running_loop()
        count = 0
        while time.perf_counter() < deadline:
            begin = time.perf_counter()
            _, request = store.put_message_nowait(
                _message(body, number % args.queues, f"s{number}-{count}", ids.next_id()))
            future = loop.create_future()
            request.add_done_callback(lambda ok, f=future: bridge.call(f.set_result, ok))
            if not await future:
                failures += 1
            latencies.append(time.perf_counter() - begin)
            count += 1
        return count

    bridge: LoopBridge

    async def main() -> int:
        nonlocal bridge
        bridge = LoopBridge(asyncio.get_running_loop())
        deadline = time.perf_counter() + args.sync_seconds
        counts = await asyncio.gather(*(writer(i, deadline) for i in range(args.writers)))
        return sum(counts)

    started = time.perf_counter()
    total = event_loop.run(main())  # the loop the broker runs its sends on
    elapsed = time.perf_counter() - started
    flushes = store.commit_log.mapped_file_queue.flush_count
    store.shutdown()
    return {
        "messages": total,
        "writers": args.writers,
        "seconds": elapsed,
        "msg_per_s": total / elapsed,
        "avg_rt_ms": statistics.fmean(latencies) * 1000 if latencies else 0.0,
        "max_rt_ms": max(latencies) * 1000 if latencies else 0.0,
        "fdatasyncs": flushes,
        "failures": failures,
    }


def bench_recovery(root: str, args: argparse.Namespace) -> dict:
    config = _config(root, args, FlushDiskType.ASYNC_FLUSH)
    started = time.perf_counter()
    store = DefaultMessageStore(config)
    store.load()
    normal = time.perf_counter() - started
    size = store.commit_log.get_max_offset()
    store.start()
    store.shutdown()
    # A crash: the abort file stays behind, so the next start takes the abnormal path.
    with open(os.path.join(root, "abort"), "w"):
        pass
    started = time.perf_counter()
    store = DefaultMessageStore(config)
    store.load()
    abnormal = time.perf_counter() - started
    store.start()
    store.shutdown()
    return {"commitlog_bytes": size, "normal_seconds": normal, "abnormal_seconds": abnormal}


def bench_query(root: str, args: argparse.Namespace) -> dict:
    store = DefaultMessageStore(_config(root, args, FlushDiskType.ASYNC_FLUSH))
    store.load()
    rng = random.Random(7)
    timings = []
    misses = 0
    for _ in range(1000):
        i = rng.randrange(args.messages)
        begin = time.perf_counter()
        found = store.query_message(TOPIC, f"k{i}", 32)
        timings.append(time.perf_counter() - begin)
        misses += not found.messages
    store.shutdown()
    timings.sort()
    return {
        "queries": len(timings),
        "avg_ms": statistics.fmean(timings) * 1000,
        "p99_ms": timings[int(len(timings) * 0.99) - 1] * 1000,
        "misses": misses,
    }


def tune_process() -> None:
    """What a long-running store process does: fewer GC passes over a large, stable heap, and
    shorter GIL switch intervals so service threads (group commit, dispatch) run promptly."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sys.setswitchinterval(0.001)


def run_store_bench(args: argparse.Namespace) -> int:
    tune_process()
    parts = args.only or ["async", "sync", "recovery", "query"]
    scratch = args.dir or tempfile.mkdtemp(prefix="rocketdesk-bench-")
    os.makedirs(scratch, exist_ok=True)
    main_root = os.path.join(scratch, "async")
    sync_root = os.path.join(scratch, "sync")
    print(f"store benchmark: {args.size}-byte bodies, {os.cpu_count()} cores, scratch {scratch}")
    try:
        needs_data = any(p in parts for p in ("async", "recovery", "query"))
        if needs_data and ("async" in parts or not os.path.isdir(main_root)):
            shutil.rmtree(main_root, ignore_errors=True)
            r = bench_async(main_root, args)
            print(f"ASYNC_FLUSH put, dispatch included: {r['messages']:,} messages in "
                  f"{r['seconds']:.2f} s = {r['msg_per_s']:,.0f} msg/s "
                  f"(appends alone {r['messages'] / r['put_seconds']:,.0f} msg/s; "
                  f"{r['commitlog_bytes'] / 2**20:,.0f} MiB)", flush=True)
            if "async" in parts:
                inline_root = os.path.join(scratch, "inline")
                r = bench_async(inline_root, args, inline=True)
                shutil.rmtree(inline_root, ignore_errors=True)
                print(f"ASYNC_FLUSH put, dispatched after each put as a broker does: "
                      f"{r['messages']:,} messages in {r['seconds']:.2f} s = "
                      f"{r['msg_per_s']:,.0f} msg/s", flush=True)
            if "async" in parts and args.batch > 0:
                batch_root = os.path.join(scratch, "batches")
                r = bench_async_batches(batch_root, args)
                shutil.rmtree(batch_root, ignore_errors=True)
                print(f"ASYNC_FLUSH put in batches of {args.batch}, dispatch included: "
                      f"{r['messages']:,} messages in {r['seconds']:.2f} s = "
                      f"{r['msg_per_s']:,.0f} msg/s", flush=True)
        if "sync" in parts:
            shutil.rmtree(sync_root, ignore_errors=True)
            r = bench_sync(sync_root, args)
            print(f"SYNC_FLUSH group commit, {r['writers']} writers: {r['messages']:,} messages in "
                  f"{r['seconds']:.2f} s = {r['msg_per_s']:,.0f} msg/s, average RT "
                  f"{r['avg_rt_ms']:.2f} ms, max RT {r['max_rt_ms']:.1f} ms, "
                  f"{r['fdatasyncs']:,} fdatasyncs, {r['failures']} timeouts", flush=True)
            shutil.rmtree(sync_root, ignore_errors=True)
        if "recovery" in parts:
            r = bench_recovery(main_root, args)
            print(f"recovery of a {r['commitlog_bytes'] / 2**30:.2f} GiB CommitLog: normal "
                  f"{r['normal_seconds']:.2f} s, after a crash {r['abnormal_seconds']:.2f} s",
                  flush=True)
        if "query" in parts:
            r = bench_query(main_root, args)
            print(f"query by key among {args.messages:,} messages: average {r['avg_ms']:.3f} ms, "
                  f"p99 {r['p99_ms']:.3f} ms over {r['queries']} queries ({r['misses']} misses)",
                  flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0
