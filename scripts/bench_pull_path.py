"""CPU a broker and an exporter's reader spend on each record of a pull, over a real socket.

A scratch cluster of one broker (transfer limits raised as `rocketdesk bench export` raises them)
is loaded with ``--messages`` records of ``--size`` bytes on 4 queues; then this process reads
the whole topic ``--rounds`` times with the export's pull reader (``export.pull_reader``, the
code Spark's Python workers run), ``--pull`` messages a pull, and prints per record: the wall
time, this process's CPU and the broker's CPU (its process's user + system time). With
``--store`` it reads the broker's store files instead (``export.pull_reader.read_store_range``,
the export's other source), the broker still running.

    python scripts/bench_pull_path.py [--messages 400000] [--pull 1024] [--rounds 3] [--store]
        [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from cluster.client.admin import AdminClient
from cluster.supervisor.spec import ClusterSpec, GroupSpec
from cluster.supervisor.supervisor import Supervisor
from export.options import SourceOptions
from export.planner import QueueRange
from export.pull_reader import read_ranges, read_store_range
from rocketdesk.bench.export import BULK_READS, _load

TOPIC = "BenchExport"


async def _queue_ends(namesrv: str) -> list[tuple[str, str, int, int]]:
    async with AdminClient(namesrv) as admin:
        route = await admin.instance.fetch_route(TOPIC)
        stats = await admin.topic_stats(TOPIC)
    addresses = route.master_addrs()
    return [(mq.broker_name, addresses[mq.broker_name], mq.queue_id, offsets["maxOffset"])
            for mq, offsets in stats.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("-s", "--size", type=int, default=1024)
    parser.add_argument("--pull", type=int, default=1024, help="messages a pull asks for")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", action="store_true", help="read the store files, not pulls")
    parser.add_argument("--profile", action="store_true", help="cProfile the last round")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rocketdesk-bench-pull-"))
    spec = ClusterSpec(name="bench-pull", groups=[
        GroupSpec("broker-a", commitlog_file_size=1 << 30, conf=dict(BULK_READS))])
    supervisor = Supervisor.create(spec, root=scratch)
    asyncio.run(supervisor.start())
    try:
        namesrv = supervisor.state.namesrv_addr
        asyncio.run(_load(namesrv, args.messages, args.size, TOPIC))
        node = next(n for n in supervisor.state.nodes if n.kind == "broker")
        broker = psutil.Process(node.pid)
        ranges = [QueueRange(TOPIC, name, queue, 0, end, None if args.store else address)
                  for name, address, queue, end in asyncio.run(_queue_ends(namesrv))]
        if args.store:
            options = SourceOptions(topics=[TOPIC], path=node.store_dir)
            how = "from the store files"
        else:
            options = SourceOptions(topics=[TOPIC], name_server=namesrv, pull_batch_size=args.pull)
            how = f"{args.pull} a pull"
        for round_ in range(1, args.rounds + 1):
            profile = cProfile.Profile() if args.profile and round_ == args.rounds else None
            broker_before = sum(broker.cpu_times()[:2])
            cpu_before, began = time.process_time(), time.perf_counter()
            if profile is not None:
                profile.enable()
            rows = sum(batch.num_rows for batch in _read(ranges, options, args.store))
            if profile is not None:
                profile.disable()
            wall = time.perf_counter() - began
            cpu = time.process_time() - cpu_before
            broker_cpu = sum(broker.cpu_times()[:2]) - broker_before
            print(f"round {round_}: {rows:,} records, {how}: "
                  f"{wall / rows * 1e6:.2f} µs wall, reader {cpu / rows * 1e6:.2f} µs CPU, "
                  f"broker {broker_cpu / rows * 1e6:.2f} µs CPU a record")
            if profile is not None:
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    finally:
        asyncio.run(supervisor.stop())
        supervisor.remove()
    return 0


def _read(ranges: list[QueueRange], options: SourceOptions, store: bool):
    if not store:
        return read_ranges(ranges, options)
    return (batch for rng in ranges for batch in read_store_range(rng, options))


if __name__ == "__main__":
    raise SystemExit(main())
