"""The event loop the cluster's processes and command-line clients run on.

uvloop (libuv underneath, as Node.js) where it is installed: a round trip on loopback costs a
third of the standard loop's, and a broker answering thousands of sends a second spends much
of its time in the loop itself. ``ROCKETDESK_LOOP=asyncio`` selects the standard loop (to
compare, or to rule uvloop out); the console keeps its own qasync loop and never comes here.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

LOOP_ENV = "ROCKETDESK_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or None for the standard loop."""
    if os.environ.get(LOOP_ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not built for this platform (Windows): the standard loop
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    """What :func:`run` uses: "uvloop" or "asyncio"."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the loop :func:`loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
