"""Running coroutines from Qt slots without blocking the GUI thread.

qasync makes the asyncio loop and Qt's the same loop: a click schedules a task and returns at
once; the task's outcome comes back through callbacks, and an exception becomes a sentence for
the status bar, never a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from common.errors import RocketDeskError

log = logging.getLogger(__name__)
_running: set[asyncio.Task] = set()


class ConsoleError(RocketDeskError):
    """Something the console cannot do right now (no cluster open, no route, nobody online);
    its message is what the status bar says."""


def user_message(exc: BaseException) -> str:
    """The console's one place that turns an error into a sentence. RocketDesk's own errors
    carry theirs; the system's (a refused connection, a full disk) say what the system said;
    anything else is a bug, said as one (its traceback goes to the log)."""
    if isinstance(exc, RocketDeskError):
        text = str(exc).strip() or type(exc).__name__
    elif isinstance(exc, OSError):
        text = exc.strerror or str(exc)
        if exc.filename:
            text += f": {exc.filename}"
    elif isinstance(exc, TimeoutError):
        text = "no answer in time"
    else:
        log.error("unexpected error in the console", exc_info=exc)
        text = f"unexpected error ({type(exc).__name__}); the details are in the log"
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


def user_action(method: Callable) -> Callable:
    """For a view's slot that a click, a key or a choice runs: what it raises becomes the
    console's sentence (the view's ``model.message``), not a traceback Qt prints on stderr while
    the window shows nothing. The slot is given only as many of the signal's arguments as the
    method takes besides ``self`` (a button's ``clicked`` passes ``checked``)."""
    takes = method.__code__.co_argcount - 1

    @functools.wraps(method)
    def slot(self, *args):
        try:
            return method(self, *args[:takes])
        except Exception as exc:
            self.model.message.emit(user_message(exc))
            return None

    return slot


def running_tasks() -> int:
    return len(_running)
