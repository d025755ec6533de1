"""A remoting client: one connection per address, opened on first use and reopened when lost."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from cluster.remoting.busy_poll import DEFAULT_LIMIT_MICROS, BusyPoller
from cluster.remoting.codec import RemotingCommand
from cluster.remoting.connection import RemotingConnection, RequestHandler
from cluster.remoting.errors import RemotingConnectError
from cluster.remoting.frame_template import PreparedRequest
from common.addresses import split_address

DEFAULT_TIMEOUT = 3.0  # mqClientApiTimeout
CONNECT_TIMEOUT = 3.0


class RemotingClient:
    """Requests to any number of servers; server-initiated requests go to ``handler``."""

    def __init__(self, handler: RequestHandler | None = None,
                 busy_poll_micros: int = DEFAULT_LIMIT_MICROS) -> None:
        self._handler = handler
        # (busy_poll.py: while a server answers sooner than this, the loop polls for it;
        # 0: never; a value past its range raises ValueError)
        self.busy_poll = BusyPoller(busy_poll_micros) if busy_poll_micros != 0 else None
        self._connections: dict[str, RemotingConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def connection(self, address: str) -> RemotingConnection:
        """The open connection to ``address``, connecting if needed."""
        connection = self._connections.get(address)
        if connection is not None and connection.is_open:
            return connection
        lock = self._locks.setdefault(address, asyncio.Lock())
        async with lock:
            connection = self._connections.get(address)
            if connection is not None and connection.is_open:
                return connection
            try:
                host, port = split_address(address)
            except ValueError as exc:  # (a typo in an address is the user's, said as such)
                raise RemotingConnectError(str(exc)) from None
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    _, connection = await loop.create_connection(
                        lambda: RemotingConnection(self._handler, self._forget,
                                                   busy_poll=self.busy_poll), host, port)
            except (OSError, TimeoutError) as exc:
                raise RemotingConnectError(f"cannot connect to {address}: {exc}") from exc
            connection.remote_address = address
            self._connections[address] = connection
            return connection

    def _forget(self, connection: RemotingConnection) -> None:
        address = connection.remote_address
        if self._connections.get(address) is connection:
            del self._connections[address]

    def invoke(self, address: str, request: RemotingCommand | PreparedRequest,
               timeout: float = DEFAULT_TIMEOUT) -> Awaitable[RemotingCommand]:
        """Send a request to ``address``; await the result for the response. An open connection
        is used without a coroutine of ours in between (one less a request)."""
        connection = self._connections.get(address)
        if connection is not None and connection.is_open:
            return connection.invoke(request, timeout)
        return self._connect_and_invoke(address, request, timeout)

    async def _connect_and_invoke(self, address: str, request: RemotingCommand | PreparedRequest,
                                  timeout: float) -> RemotingCommand:
        connection = await self.connection(address)
        return await connection.invoke(request, timeout)

    async def invoke_oneway(self, address: str,
                            request: RemotingCommand | PreparedRequest) -> None:
        connection = await self.connection(address)
        connection.invoke_oneway(request)

    def close_connection(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    async def close(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        if connections:
            # connection_lost runs on the next loop turns; do not wait forever on a dead peer.
            await asyncio.wait([asyncio.ensure_future(c.closed.wait()) for c in connections],
                               timeout=5)
