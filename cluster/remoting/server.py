"""A remoting server: a processor per request code, answers as the Java server answers.

Unknown codes get REQUEST_CODE_NOT_SUPPORTED and the connection stays open; a processor that
raises gets SYSTEM_ERROR with the exception as remark; oneway requests get nothing back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from cluster.remoting.codec import RemotingCommand
from cluster.remoting.codes import ResponseCode
from cluster.remoting.connection import CloseReason, RemotingConnection

log = logging.getLogger(__name__)

Processor = Callable[[RemotingConnection, RemotingCommand], Awaitable[RemotingCommand | None]]
IDLE_SECONDS = 120  # serverChannelMaxIdleTimeSeconds


class RemotingServer:
    """Listens on one address and routes requests to processors by code."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.processors: dict[int, Processor] = {}
        self.connections: set[RemotingConnection] = set()
        self.on_disconnect: list[Callable[[RemotingConnection], None]] = []
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task | None = None

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    async def start(self, sock=None) -> None:
        """Listen on (host, port), or on an already bound socket."""
        loop = asyncio.get_running_loop()
        if sock is not None:
            self._server = await loop.create_server(self._new_connection, sock=sock)
        else:
            self._server = await loop.create_server(self._new_connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = loop.create_task(self._close_idle())

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _new_connection(self) -> RemotingConnection:
        connection = RemotingConnection(self._dispatch, self._connection_closed)
        self.connections.add(connection)
        return connection

    def _connection_closed(self, connection: RemotingConnection) -> None:
        self.connections.discard(connection)
        for callback in self.on_disconnect:
            try:
                callback(connection)
            except Exception:
                log.exception("disconnect callback failed")

    async def _dispatch(self, connection: RemotingConnection,
                        command: RemotingCommand) -> RemotingCommand | None:
        processor = self.processors.get(command.code)
        if processor is None:
            return command.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         f" request type {command.code} not supported")
        return await processor(connection, command)

    async def _close_idle(self) -> None:
        while True:
            await asyncio.sleep(10)
            now = asyncio.get_running_loop().time()
            for connection in list(self.connections):
                if now - connection.last_active > IDLE_SECONDS:
                    connection.close(CloseReason.IDLE)

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()
