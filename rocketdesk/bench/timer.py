"""``rocketdesk bench timer``: a million pending timer messages on this machine.

Timer messages are written to ``rmq_sys_wheel_timer`` as a broker parks them (in batches, to get
a million in quickly), spread over ``--spread`` seconds from now, ``--due`` of them due at once.
Then, with the broker's own TimerMessageService over the store:

* filing: every unit read and filed under its second (what a broker does behind the writer);
* memory: what the pending timers hold (RSS before and after filing);
* progress: saving timercheck.json, the oldest pending offset included;
* restart: a new service recovering the pending timers from the saved progress;
* delivery: the due ones read back and stored in their real topic.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from types import SimpleNamespace

import psutil

from cluster.broker.timer import TimerMessageService
from rocketdesk.cli_numbers import positive
from storage.config import FlushDiskType, MessageStoreConfig
from storage.message import TIMER_TOPIC, MessageExtBatch
from storage.message_id import UniqIdGenerator
from storage.message_store import DefaultMessageStore
from storage.record import BatchEntry, encode_batch_body

REAL_TOPIC = "TimerBenchTopic"
BATCH = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive, default=1_000_000,
                        help="pending timer messages (default 1,000,000)")
    parser.add_argument("--size", type=positive, default=128, help="body size in bytes (default 128)")
    parser.add_argument("--spread", type=int, default=3 * 24 * 3600,
                        help="seconds the delivery times spread over (default 3 days, the most)")
    parser.add_argument("--due", type=int, default=100_000,
                        help="how many of them are due at once, for the delivery figure")
    parser.add_argument("--dir", help="scratch directory (default: a temporary folder, removed)")
    parser.set_defaults(func=run_timer_bench)


class _Topics:
    def create_in_send_message_back_method(self, *args, **kwargs) -> None:
        return None


def _broker(store: DefaultMessageStore, config: MessageStoreConfig):
    """What TimerMessageService asks of a broker, and nothing else."""
    return SimpleNamespace(store=store, store_config=config, topics=_Topics())


def _write(store: DefaultMessageStore, args: argparse.Namespace, now_ms: int) -> float:
    ids = UniqIdGenerator()
    body = os.urandom(args.size)
    began = time.perf_counter()
    written = 0
    while written < args.messages:
        entries = []
        for i in range(written, min(written + BATCH, args.messages)):
            if i < args.due:
                deliver = now_ms - 1000
            else:
                deliver = now_ms + 60_000 + (i * 7919) % (args.spread * 1000)
            entries.append(BatchEntry(0, body, f"TIMER_DELIVER_MS\x01{deliver}\x02REAL_TOPIC\x01"
                                               f"{REAL_TOPIC}\x02REAL_QID\x010\x02UNIQ_KEY\x01"
                                               f"{ids.next_id()}\x02"))
        store.put_messages_nowait(MessageExtBatch(
            topic=TIMER_TOPIC, body=encode_batch_body(entries), queue_id=0,
            properties={"WAIT": "true"}, born_timestamp=now_ms, born_host=("127.0.0.1", 50000)))
        written += len(entries)
    store.wait_dispatched(timeout=900)
    return time.perf_counter() - began


def run_timer_bench(args: argparse.Namespace) -> int:
    scratch = args.dir or tempfile.mkdtemp(prefix="rocketdesk-timer-")
    config = MessageStoreConfig(store_path_root_dir=scratch, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                                delete_when="99")
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    process = psutil.Process()
    print(f"timer benchmark: {args.messages:,} timer messages over {args.spread:,} s, "
          f"{args.due:,} due at once; {os.cpu_count()} cores; scratch {scratch}")
    try:
        now_ms = int(time.time() * 1000)
        seconds = _write(store, args, now_ms)
        print(f"  written and dispatched: {args.messages / seconds:,.0f} msg/s ({seconds:.1f} s)")

        service = TimerMessageService(_broker(store, config))
        rss = process.memory_info().rss
        began = time.perf_counter()
        filed = service.scan(now_ms=None)
        seconds = time.perf_counter() - began
        grown = process.memory_info().rss - rss
        print(f"  filed: {filed:,} in {seconds:.2f} s = {filed / seconds:,.0f} units/s; "
              f"{grown / 2**20:,.1f} MiB held ({grown / max(filed, 1):.0f} bytes a timer), "
              f"{len(service.slots):,} one-second slots")

        began = time.perf_counter()
        service.save(refresh_min=True)
        print(f"  progress saved (oldest pending found): {(time.perf_counter() - began) * 1000:.1f} ms")

        restarted = TimerMessageService(_broker(store, config))
        began = time.perf_counter()
        restarted.recover()
        seconds = time.perf_counter() - began
        print(f"  restart: {restarted.pending:,} pending again in {seconds:.2f} s")

        began = time.perf_counter()
        delivered = restarted.deliver_due(int(time.time() * 1000))
        store.wait_dispatched(timeout=600)
        seconds = time.perf_counter() - began
        if delivered:
            print(f"  delivered when due: {delivered:,} in {seconds:.2f} s = "
                  f"{delivered / seconds:,.0f} msg/s; {restarted.pending:,} still pending")
    finally:
        store.shutdown()
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0
