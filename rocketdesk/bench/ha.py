"""``rocketdesk bench ha``: what replication costs a producer.

Brings up two scratch clusters (a master and a slave each): SYNC_MASTER + SYNC_FLUSH, where a
send is answered once the slave acknowledged it and the disk flushed it, and ASYNC_MASTER +
ASYNC_FLUSH, where neither is waited for; runs the same producer load against both and prints
both figures and their ratio (issue target: the synchronous one at least 50 % of the other).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from cluster.remoting import event_loop
from cluster.supervisor.spec import ClusterSpec, GroupSpec
from cluster.supervisor.supervisor import Supervisor
from rocketdesk.bench.client import producer_bench
from rocketdesk.cli_numbers import positive

MODES = {"sync": ("SYNC_MASTER", "SYNC_FLUSH"), "async": ("ASYNC_MASTER", "ASYNC_FLUSH")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-w", "--threads", type=positive, default=64, help="concurrent synchronous senders")
    parser.add_argument("-s", "--size", type=positive, default=1024, help="body size in bytes")
    parser.add_argument("--duration", type=float, default=10, help="seconds per mode")
    parser.add_argument("-t", "--topic", default="BenchmarkHA",
                        help="topic (auto-created with 8 queues; BenchmarkTest has 1,024)")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of uncounted load first")
    parser.add_argument("--file-size", type=int, default=256 << 20, help="CommitLog file size")
    parser.set_defaults(func=run_ha_bench)


async def _one(mode: str, args: argparse.Namespace, root: Path) -> dict:
    role, flush = MODES[mode]
    spec = ClusterSpec(name=f"bench-{mode}", groups=[GroupSpec(
        "broker-a", master_role=role, flush=flush, slaves=1, commitlog_file_size=args.file_size)])
    supervisor = Supervisor.create(spec, root=root)
    await supervisor.start()
    try:
        print(f"--- {role} + {flush}, one slave, {args.threads} senders, {args.size}-byte bodies")
        load = argparse.Namespace(namesrv=supervisor.state.namesrv_addr, topic=args.topic,
                                  threads=args.threads, size=args.size, keys=False, tags=None,
                                  batch=0, duration=args.warmup)
        if args.warmup > 0:
            # A fresh cluster runs slower for its first seconds (new files, topic creation, the
            # slave's first metadata copy): measure the steady state, as RocketMQ's tools do.
            await producer_bench(load, out=lambda _line: None)
        load.duration = args.duration
        return await producer_bench(load)
    finally:
        await supervisor.stop()


async def _run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="rocketdesk-bench-ha-") as scratch:
        results = {mode: await _one(mode, args, Path(scratch)) for mode in ("async", "sync")}
    ratio = results["sync"]["tps"] / results["async"]["tps"] if results["async"]["tps"] else 0.0
    print(f"\nASYNC_MASTER + ASYNC_FLUSH: {results['async']['tps']:,.0f} TPS, "
          f"avg RT {results['async']['avg_rt_ms']:.2f} ms")
    print(f"SYNC_MASTER  + SYNC_FLUSH : {results['sync']['tps']:,.0f} TPS, "
          f"avg RT {results['sync']['avg_rt_ms']:.2f} ms")
    print(f"synchronous / asynchronous: {ratio:.0%} (target >= 50%)")
    results["ratio"] = ratio
    return results


def run_ha_bench(args: argparse.Namespace) -> int:
    event_loop.run(_run(args))  # the client on uvloop, as `bench producer` runs it
    return 0
