"""``rocketdesk bench cold-start``: from nothing to every node ready, over the protocol.

Each round lays out a fresh scratch cluster from a profile (new ports, empty stores), starts
it, and reports how long until the supervisor saw every node ready: name servers answering,
brokers answering and registered with every name server, slaves replicating.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from cluster.supervisor.spec import load_profile
from cluster.supervisor.supervisor import Supervisor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="2m-2s-sync", help="built-in profile to start")
    parser.add_argument("--rounds", type=int, default=3)
    parser.set_defaults(func=run_cold_start_bench)


async def _rounds(args: argparse.Namespace) -> list[float]:
    spec = load_profile(args.profile)
    figures = []
    with tempfile.TemporaryDirectory(prefix="rocketdesk-cold-start-") as scratch:
        for number in range(args.rounds):
            supervisor = Supervisor.create(spec, name=f"{spec.name}-{number}", root=Path(scratch))
            began = time.perf_counter()
            await supervisor.start()
            elapsed = time.perf_counter() - began
            figures.append(elapsed)
            print(f"round {number + 1}: {len(supervisor.state.nodes)} nodes ready in {elapsed:.2f} s")
            await supervisor.stop()
    print(f"cold start of {args.profile}: best {min(figures):.2f} s, median "
          f"{statistics.median(figures):.2f} s, worst {max(figures):.2f} s (target <= 5 s)")
    return figures


def run_cold_start_bench(args: argparse.Namespace) -> int:
    asyncio.run(_rounds(args))
    return 0
