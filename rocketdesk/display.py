"""Running async handlers from the command line's sync entry points."""

from __future__ import annotations

import asyncio


def run_async(handler):
    """An argparse handler that runs the coroutine ``handler(args)`` to completion."""

    def run(args) -> int:
        return asyncio.run(handler(args))

    return run
