"""DeferredAnswer: a request's answer given later by whoever learns it, written at once.

A handler that cannot answer yet (a SYNC_FLUSH or SYNC_MASTER send waits for the disk or a
slave) returns one; its connection binds it and counts it in flight. Whoever learns the answer
calls ``answer``, and the connection writes it in that same call. An asyncio future in its place
cost a loop iteration per step: its done callbacks are scheduled, not called, so the answer
waited behind every read of the iteration in between (docs/benchmarks.md, session 18).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Protocol


class _Binder(Protocol):
    def deferred_answered(self, deferred: DeferredAnswer) -> None: ...


_UNSET = object()


class DeferredAnswer:
    """An answer to come: ``answer(response)`` or ``fail(exc)`` once; ``cancel`` when its
    connection closed (later answers are dropped)."""

    __slots__ = ("_binder", "_cancelled", "command", "failure", "response", "size")

    def __init__(self) -> None:
        self._binder: _Binder | None = None
        self._cancelled = False
        self.command: Any = None  # the request (set by its connection, or by the handler that
        # made it: the send lane's runs)
        self.size = 0  # the request's frame size, counted against the connection's limits
        self.response: Any = _UNSET
        self.failure: BaseException | None = None

    def done(self) -> bool:
        return self._cancelled or self.response is not _UNSET or self.failure is not None

    def cancelled(self) -> bool:
        return self._cancelled

    def answer(self, response: Any) -> None:
        """Answer now, through the bound connection (kept until it takes it). Ignored once done."""
        self._settle(response, None)

    def fail(self, exc: BaseException) -> None:
        """The handler failed: its connection answers SYSTEM_ERROR and logs ``exc``."""
        self._settle(_UNSET, exc)

    def _settle(self, response: Any, failure: BaseException | None) -> None:
        if self.done():
            return
        self.response, self.failure = response, failure
        if self._binder is not None:
            self._binder.deferred_answered(self)

    def cancel(self) -> bool:
        if self.done():
            return False
        self._cancelled = True
        return True

    def bind(self, binder: _Binder, command, size: int) -> None:
        """The connection that owes the answer (``_take_result``, which answers one given
        already itself)."""
        self._binder = binder
        self.command = command
        self.size = size


class _Settled:
    """A binder that only notes that its DeferredAnswer was given (``settled``)."""

    __slots__ = ("future",)

    def __init__(self, future) -> None:
        self.future = future

    def deferred_answered(self, deferred: DeferredAnswer) -> None:
        if not self.future.done():
            self.future.set_result(None)


async def settled(result: object, command: Any) -> object:
    """What a handler's result answers, awaited: for a coroutine that must hold an answer back
    (the send that created its topic waits for the registration). A DeferredAnswer is bound to
    the coroutine instead of the connection; its failure is raised."""
    if type(result) is DeferredAnswer:
        if not result.done():
            future = asyncio.get_running_loop().create_future()
            result.bind(_Settled(future), command, 0)
            await future
        if result.failure is not None:
            raise result.failure
        if result.cancelled():
            raise RuntimeError("the answer was cancelled")
        return result.response
    if inspect.isawaitable(result):
        return await result
    return result
