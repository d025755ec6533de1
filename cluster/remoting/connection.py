"""One remoting connection over asyncio: the only module that touches a transport.

Requests and responses flow both ways on one connection (a broker asks clients too). Responses
are matched by ``opaque``; a pending entry is always removed in ``finally``, so a request that
timed out or was cancelled can never receive someone else's reply. A frame that does not decode
closes this connection (failing every waiter once), and nobody else's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from enum import Enum

from cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from cluster.remoting.errors import (
    RemoteProtocolError,
    RemotingConnectError,
    RemotingTimeoutError,
)

log = logging.getLogger(__name__)

# Handles one incoming request; returns the response, or None for oneway requests.
RequestHandler = Callable[["RemotingConnection", RemotingCommand], Awaitable[RemotingCommand | None]]


class CloseReason(Enum):
    PEER_CLOSED = "the peer closed the connection"
    OUT_OF_SYNC = "the peer sent a malformed frame"
    LOCAL_CLOSE = "closed locally"
    IDLE = "idle too long"


class RemotingConnection(asyncio.Protocol):
    """A framed, bidirectional command channel."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        on_close: Callable[[RemotingConnection], None] | None = None,
    ) -> None:
        self._handler = handler
        self._on_close = on_close
        self._decoder = FrameDecoder()
        self._pending: dict[int, asyncio.Future] = {}
        self._opaques = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Task] = set()
        self.closed = asyncio.Event()
        self.close_reason: CloseReason | None = None
        self.remote_address = ""
        self.last_active = asyncio.get_running_loop().time()

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote_address = f"{peer[0]}:{peer[1]}"

    def data_received(self, data: bytes) -> None:
        self.last_active = asyncio.get_running_loop().time()
        self._decoder.feed(data)
        try:
            while (command := self._decoder.next_command()) is not None:
                self._on_command(command)
        except RemoteProtocolError as exc:
            log.warning("closing %s: %s", self.remote_address, exc)
            self.close(CloseReason.OUT_OF_SYNC)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(self.close_reason or CloseReason.PEER_CLOSED)
        for task in list(self._tasks):
            task.cancel()
        self.closed.set()
        if self._on_close is not None:
            self._on_close(self)

    # -- incoming --------------------------------------------------------------------------------
    def _on_command(self, command: RemotingCommand) -> None:
        if command.is_response:
            future = self._pending.get(command.opaque)
            if future is not None and not future.done():
                future.set_result(command)
            else:
                log.debug("response %d from %s matches no request", command.opaque,
                          self.remote_address)
            return
        if self._handler is None:
            return
        task = asyncio.get_running_loop().create_task(self._handle(command))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, command: RemotingCommand) -> None:
        try:
            response = await self._handler(self, command)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a processor bug answers SYSTEM_ERROR; the server goes on
            log.exception("request %d from %s failed", command.code, self.remote_address)
            response = command.make_response(1, f"{type(exc).__name__}: {exc}")
        if response is not None and not command.is_oneway:
            self.send(response)

    # -- outgoing ---------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, command: RemotingCommand) -> None:
        """Write a command (a response, or a oneway request) without waiting."""
        if not self.is_open:
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        self._transport.write(encode(command))

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response."""
        opaque = next(self._opaques) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        self._pending[opaque] = future
        try:
            self.send(replace(request, opaque=opaque, flag=request.flag & ~0b10))
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError as exc:
            raise RemotingTimeoutError(
                f"no response from {self.remote_address} to request {request.code} "
                f"within {timeout:.1f} s") from exc
        finally:
            self._pending.pop(opaque, None)  # a late reply is dropped, never misread

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request that gets no response."""
        opaque = next(self._opaques) & 0x7FFFFFFF
        self.send(replace(request, opaque=opaque, flag=request.flag | 0b10))

    def close(self, reason: CloseReason = CloseReason.LOCAL_CLOSE) -> None:
        """Close once, failing every waiter with the reason."""
        if self.close_reason is None:
            self.close_reason = reason
        self._fail_all(reason)
        if self._transport is not None:
            self._transport.close()

    def _fail_all(self, reason: CloseReason) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RemotingConnectError(
                    f"connection to {self.remote_address} closed: {reason.value}"))
