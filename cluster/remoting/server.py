"""A remoting server: a processor per request code, answers as the Java server answers.

Unknown codes get REQUEST_CODE_NOT_SUPPORTED and the connection stays open; a processor that
raises gets SYSTEM_ERROR with the exception as remark; oneway requests get nothing back.

A peer is never trusted to behave: a connection idle too long, or holding half a frame too
long, is closed; connections over ``serverMaxConnections`` are closed as they arrive, so file
descriptors stay for the store and for the clients already served; each accepted connection
gets flow control (see :class:`~cluster.remoting.flow.FlowControl`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, fields

from cluster.remoting.busy_poll import DEFAULT_LIMIT_MICROS, MAX_LIMIT_MICROS, BusyPoller
from cluster.remoting.codec import RemotingCommand
from cluster.remoting.codes import ResponseCode
from cluster.remoting.connection import HandlerResult, RemotingConnection
from cluster.remoting.errors import RemotingError
from cluster.remoting.flow import CloseReason, FlowControl
from cluster.remoting.lanes import Lane
from common.platform.limits import open_files_limit

log = logging.getLogger(__name__)

# A response now, or an awaitable of it (see connection.RequestHandler).
Processor = Callable[[RemotingConnection, RemotingCommand], HandlerResult]
IDLE_SECONDS = 120  # serverChannelMaxIdleTimeSeconds
DEFAULT_MAX_CONNECTIONS = 10_000
# File descriptors left for everything but client connections when the cap is derived from
# RLIMIT_NOFILE: the store keeps one per mapped file (CommitLog, every ConsumeQueue, index),
# plus logs, HA sockets and outgoing connections.
FD_RESERVE_MIN = 256
MIN_DERIVED_CONNECTIONS = 32
REFUSAL_LOG_INTERVAL = 10.0  # seconds between two "refusing connections" lines


class ServerConfigError(RemotingError, ValueError):
    """A NettyServerConfig value the server cannot run with; names the key as RocketMQ spells it."""

    def __init__(self, key: str, value: int, reason: str) -> None:
        super().__init__(f"{key}={value} is not valid: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


def _java_key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(slots=True)
class NettyServerConfig:
    """The listening side's settings, under RocketMQ's NettyServerConfig names where it has one.

    Broker and name-server configs extend it, so the keys come from broker.conf and the name
    server's file as in RocketMQ. ``0`` turns a timeout off and derives the connection cap.
    """

    server_socket_backlog: int = 1024
    server_channel_max_idle_time_seconds: int = IDLE_SECONDS
    # A peer that sends the start of a frame and stalls holds up to 16 MiB and a socket. The
    # time runs from the frame's first byte, so a 16 MiB frame needs ~0.5 MiB/s.
    server_channel_partial_frame_timeout_millis: int = 30_000
    # 0: min(10,000, RLIMIT_NOFILE minus a quarter of it, at least 256 kept back).
    server_max_connections: int = 0
    # Netty's marks are 64/32 KiB; a pull answer alone may be 256 KiB, so ours are higher and
    # a reading client is never paused for one answer.
    write_buffer_high_water_mark: int = 1 << 20
    write_buffer_low_water_mark: int = 256 << 10
    server_channel_max_write_buffer_bytes: int = 64 << 20
    # Long-polling pulls are held for up to 25 s each and count as in flight, one per queue a
    # consumer pulls from this broker: the limit must stay far above the queues one client
    # pulls, or its other requests (sends, heartbeats, offset commits) would wait behind them.
    server_channel_max_inflight_requests: int = 1024
    # ... and their frames' bytes together: 1024 sends of 16 MiB would be 16 GiB.
    server_channel_max_inflight_bytes: int = 64 << 20
    # How long, at most, the loop polls instead of sleeping after answering a client that
    # tends to send again sooner than that (busy_poll.py; ours, not RocketMQ's). 0: never.
    server_busy_poll_micros: int = DEFAULT_LIMIT_MICROS

    def check(self) -> None:
        """Raise ServerConfigError for the first value the server cannot run with."""
        for f in fields(NettyServerConfig):
            value = getattr(self, f.name)
            if value < 0:
                raise ServerConfigError(_java_key(f.name), value, "must not be negative")
        for name in ("server_socket_backlog", "write_buffer_high_water_mark",
                     "server_channel_max_write_buffer_bytes", "server_channel_max_inflight_requests",
                     "server_channel_max_inflight_bytes"):
            if getattr(self, name) == 0:
                raise ServerConfigError(_java_key(name), 0, "must be positive")
        if self.server_busy_poll_micros > MAX_LIMIT_MICROS:
            raise ServerConfigError("serverBusyPollMicros", self.server_busy_poll_micros,
                                    f"must not exceed {MAX_LIMIT_MICROS}")
        if self.write_buffer_low_water_mark > self.write_buffer_high_water_mark:
            raise ServerConfigError("writeBufferLowWaterMark", self.write_buffer_low_water_mark,
                                    "must not exceed writeBufferHighWaterMark "
                                    f"({self.write_buffer_high_water_mark})")
        if self.server_channel_max_write_buffer_bytes < self.write_buffer_high_water_mark:
            raise ServerConfigError("serverChannelMaxWriteBufferBytes",
                                    self.server_channel_max_write_buffer_bytes,
                                    "must not be below writeBufferHighWaterMark "
                                    f"({self.write_buffer_high_water_mark})")

    def flow_control(self) -> FlowControl:
        return FlowControl(
            write_high_water=self.write_buffer_high_water_mark,
            write_low_water=self.write_buffer_low_water_mark,
            max_write_buffer=self.server_channel_max_write_buffer_bytes,
            max_inflight_requests=self.server_channel_max_inflight_requests,
            max_inflight_bytes=self.server_channel_max_inflight_bytes)

    def max_connections(self) -> int:
        return self.server_max_connections or derived_max_connections()


def derived_max_connections() -> int:
    """The default connection cap: what RLIMIT_NOFILE allows, keeping descriptors back."""
    try:
        soft = open_files_limit()
    except (OSError, ValueError):
        return DEFAULT_MAX_CONNECTIONS
    if soft is None:  # no limit to ask (Windows), or none set
        return DEFAULT_MAX_CONNECTIONS
    allowed = soft - max(FD_RESERVE_MIN, soft // 4)
    return max(MIN_DERIVED_CONNECTIONS, min(DEFAULT_MAX_CONNECTIONS, allowed))


class _Refused(asyncio.Protocol):
    """A connection over the cap: closed as soon as it is accepted, nothing read."""

    def __init__(self, server: RemotingServer) -> None:
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
        peer = transport.get_extra_info("peername")
        self._server._note_refusal(f"{peer[0]}:{peer[1]}" if peer else "?")


class RemotingServer:
    """Listens on one address and routes requests to processors by code."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 config: NettyServerConfig | None = None) -> None:
        self.host = host
        self.port = port
        self.config = config if config is not None else NettyServerConfig()
        self.config.check()
        self.max_connections = self.config.max_connections()
        self._flow = self.config.flow_control()
        micros = self.config.server_busy_poll_micros
        self.busy_poll = BusyPoller(micros) if micros else None
        self.processors: dict[int, Processor] = {}
        self.lanes: dict[int, Lane] = {}
        self.connections: set[RemotingConnection] = set()
        self.on_disconnect: list[Callable[[RemotingConnection], None]] = []
        self.refused_total = 0
        self._refused_unreported = 0
        self._refusal_logged_at = -math.inf
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task | None = None

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    def register_lane(self, code: int, lane: Lane) -> None:
        """Let ``lane`` answer the common requests of ``code`` before its processor sees
        them (lanes.py: a lane answers, or declines having changed nothing)."""
        self.lanes[int(code)] = lane

    async def start(self, sock=None) -> None:
        """Listen on (host, port), or on an already bound socket."""
        loop = asyncio.get_running_loop()
        # The default backlog (100) drops SYNs when a burst of clients connects while the loop
        # is busy; they then retry after a second or more. RocketMQ listens with 1024.
        backlog = self.config.server_socket_backlog
        if sock is not None:
            self._server = await loop.create_server(self._new_connection, sock=sock,
                                                    backlog=backlog)
        else:
            self._server = await loop.create_server(self._new_connection, self.host, self.port,
                                                    backlog=backlog)
        self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = loop.create_task(self._close_idle())

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _new_connection(self) -> asyncio.Protocol:
        if len(self.connections) >= self.max_connections:
            return _Refused(self)
        connection = RemotingConnection(self._dispatch, self._connection_closed, self._flow,
                                        self.lanes, self.busy_poll)
        self.connections.add(connection)
        return connection

    def _note_refusal(self, peer: str) -> None:
        self.refused_total += 1
        self._refused_unreported += 1
        self._report_refusals(asyncio.get_running_loop().time(), peer)

    def _report_refusals(self, now: float, peer: str | None = None) -> None:
        # One line per interval whatever the flood, with the count since the previous line.
        if not self._refused_unreported or now - self._refusal_logged_at < REFUSAL_LOG_INTERVAL:
            return
        latest = f", latest from {peer}" if peer else ""
        log.warning("refused %d connection(s)%s: %d are open, serverMaxConnections=%d",
                    self._refused_unreported, latest, len(self.connections), self.max_connections)
        self._refused_unreported = 0
        self._refusal_logged_at = now

    def _connection_closed(self, connection: RemotingConnection) -> None:
        self.connections.discard(connection)
        for callback in self.on_disconnect:
            try:
                callback(connection)
            except Exception:
                log.exception("disconnect callback failed")

    def _dispatch(self, connection: RemotingConnection, command: RemotingCommand) -> HandlerResult:
        processor = self.processors.get(command.code)
        if processor is None:
            return command.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         f" request type {command.code} not supported")
        return processor(connection, command)

    async def _close_idle(self) -> None:
        idle = self.config.server_channel_max_idle_time_seconds
        partial = self.config.server_channel_partial_frame_timeout_millis / 1000
        # A quarter of the shortest timeout: a peer is closed at most 25 % late.
        interval = min([10.0] + [t / 4 for t in (idle, partial) if t > 0])
        interval = max(interval, 0.05)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            self._report_refusals(now)
            for connection in list(self.connections):
                since = connection.partial_since
                if partial and since is not None and now - since > partial:
                    log.warning("closing %s: it sent %d bytes of a frame and did not finish it "
                                "within %.1f s (serverChannelPartialFrameTimeoutMillis)",
                                connection.remote_address, connection.pending_bytes, partial)
                    connection.close(CloseReason.PARTIAL_FRAME)
                elif idle and now - connection.last_active > idle:
                    connection.close(CloseReason.IDLE)

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close(CloseReason.SHUTDOWN)
        if self._server is not None:
            await self._server.wait_closed()
