"""Handing completions from the store's threads to the event loop, one wakeup per burst."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


class LoopBridge:
    """Runs store completions (from the store's threads) on the loop.

    A group commit completes dozens of requests at once; waking the loop once for all of them
    (not once each, as ``call_soon_threadsafe`` per completion would) keeps 64 writers cheap.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: deque = deque()
        self.scheduled = False
        self.lock = threading.Lock()

    def call(self, callback: Callable[[object], None], value: object) -> None:
        """Call ``callback(value)`` on the loop soon; from any thread."""
        self.pending.append((callback, value))
        with self.lock:
            if self.scheduled:
                return
            self.scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self.lock:
            self.scheduled = False
        pending = self.pending
        while pending:
            callback, value = pending.popleft()
            try:
                callback(value)
            except Exception:  # one broken completion must not strand the others
                log.exception("a store completion failed on the event loop")

    def when_done(self, request, timeout: float, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once, on the loop: with a GroupCommitRequest's outcome, or
        with False after ``timeout`` seconds. Called, not scheduled: an asyncio future here
        cost a loop iteration before its waiter heard of it. Call from the loop."""
        if request.done():  # (flushed already: no hop through the bridge, no timer)
            callback(request.flush_ok is True)
            return
        once = _Once(callback)
        once.timer = self.loop.call_later(timeout, once, False)
        request.add_done_callback(functools.partial(self._done_on, threading.get_ident(), once))

    def _done_on(self, loop_thread: int, once: _Once, ok: object) -> None:
        # A request completed on the loop itself (a group commit the loop drives:
        # loop_group_commit.py) is answered in that call; one from a store thread via the loop.
        if threading.get_ident() != loop_thread:
            self.call(once, ok)
            return
        try:
            once(ok)
        except Exception:
            log.exception("a store completion failed on the event loop")


class _Once:
    """A callback that runs once, and stops its timer when it does."""

    __slots__ = ("callback", "timer")

    def __init__(self, callback: Callable[[bool], None]) -> None:
        self.callback: Callable[[bool], None] | None = callback
        self.timer: asyncio.TimerHandle | None = None

    def __call__(self, ok: object) -> None:
        callback, self.callback = self.callback, None
        if callback is None:
            return
        if self.timer is not None:
            self.timer.cancel()
        callback(ok is True)
