"""Running coroutines from Qt slots without blocking the GUI thread.

qasync makes the asyncio loop and Qt's the same loop: a click schedules a task and returns at
once; the task's outcome comes back through callbacks, and an exception becomes a sentence for
the status bar, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)
_running: set[asyncio.Task] = set()


def user_message(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def spawn(coro: Awaitable, on_done: Callable | None = None,
          on_error: Callable[[str], None] | None = None) -> asyncio.Task:
    task = asyncio.ensure_future(coro)
    _running.add(task)

    def finished(t: asyncio.Task) -> None:
        _running.discard(t)
        if t.cancelled():
            return
        exc = t.exception()
        if exc is not None:
            log.info("console task failed: %s", exc)
            if on_error is not None:
                on_error(user_message(exc))
        elif on_done is not None:
            on_done(t.result())

    task.add_done_callback(finished)
    return task


def running_tasks() -> int:
    return len(_running)
