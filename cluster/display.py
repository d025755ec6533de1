"""Small helpers shared by the command line and the console for showing figures and running
async handlers from sync entry points."""

from __future__ import annotations

import asyncio


def human_bytes(value: float | None) -> str:
    """1536 -> '1.5 KiB'; None -> '-'."""
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return "-"


def run_async(handler):
    """An argparse handler that runs the coroutine ``handler(args)`` to completion."""

    def run(args) -> int:
        return asyncio.run(handler(args))

    return run
