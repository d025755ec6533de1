"""Handing completions from the store's threads to the event loop, one wakeup per burst."""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class LoopBridge:
    """Resolves asyncio futures from other threads.

    A group commit completes dozens of requests at once; waking the loop once for all of them
    (not once each, as ``call_soon_threadsafe`` per future would) keeps 64 writers cheap.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: deque = deque()
        self.scheduled = False
        self.lock = threading.Lock()

    def resolve_later(self, future: asyncio.Future, value: object) -> None:
        self.pending.append((future, value))
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
            future, value = pending.popleft()
            if not future.done():
                future.set_result(value)

    def future_of(self, request, timeout: float | None = None) -> asyncio.Future:
        """An asyncio future resolved with a GroupCommitRequest's outcome, or with False after
        ``timeout`` seconds (a timer, not ``asyncio.wait_for``: that costs a SYNC_FLUSH send
        a waiter future, callbacks and a cancellation of its own)."""
        future = self.loop.create_future()
        if timeout is not None:
            timer = self.loop.call_later(timeout, _resolve_if_pending, future, False)
            future.add_done_callback(lambda _done: timer.cancel())
        request.add_done_callback(lambda ok: self.resolve_later(future, ok))
        return future


def _resolve_if_pending(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_result(value)
