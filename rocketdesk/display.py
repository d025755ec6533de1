"""Running async handlers from the command line's sync entry points."""

from __future__ import annotations

from cluster.remoting import event_loop


def run_async(handler):
    """An argparse handler that runs the coroutine ``handler(args)`` to completion."""

    def run(args) -> int:
        return event_loop.run(handler(args))

    return run
