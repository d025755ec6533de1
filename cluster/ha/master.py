"""The master's side of replication: RocketMQ's HAService, AcceptSocketService, HAConnection
and GroupTransferService, on the broker's event loop.

Each slave connection has a reader (the slave's 8-byte reports: where to start, then
acknowledgements) and a writer (raw CommitLog bytes from where the slave stands, at most
haTransferBatchSize per frame, an empty frame every haSendHeartbeatInterval when idle). A
SYNC_MASTER send waits in :class:`ReplicaWaiters` until some slave acknowledged its end offset.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import socket
import threading
import time
from dataclasses import dataclass

from cluster.ha.errors import HAProtocolError
from cluster.ha.protocol import ReportReader, encode_transfer_header
from cluster.ha.rate import ByteRate
from storage.config import MessageStoreConfig
from storage.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)

WRITER_IDLE_WAIT = 0.1  # allWaitForRunning(100)
# Once woken, a writer lets the loop run this many more iterations before it reads the
# CommitLog: the sends of the same moment (many clients' reads) then leave in one transfer
# instead of one each. Each transfer costs the master a write and the slave a read, an append
# and a report; `bench ha -w 32`: ASYNC +15 %, SYNC unchanged (docs/benchmarks.md, session 11).
COALESCE_ITERATIONS = 2
SOCKET_BUFFER = 64 * 1024


class ReplicaWaiters:
    """Sends waiting for a slave to acknowledge their end offset (GroupTransferService).

    Acknowledgements only grow, so waiters sit in a heap by offset and leave from the top; a
    sweep fails the ones whose deadline passed.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, float, asyncio.Future]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def wait(self, next_offset: int, acked: int, timeout: float) -> asyncio.Future:
        future = self._loop.create_future()
        if acked >= next_offset:
            future.set_result(True)
        else:
            heapq.heappush(self._heap, (next_offset, next(self._seq), time.monotonic() + timeout, future))
        return future

    def notify(self, acked: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= acked:
            future = heapq.heappop(heap)[3]
            if not future.done():
                future.set_result(True)

    def expire(self, now: float) -> int:
        """Fail the waiters past their deadline; returns how many."""
        expired = [item for item in self._heap if item[2] <= now]
        if not expired:
            return 0
        self._heap = [item for item in self._heap if item[2] > now]
        heapq.heapify(self._heap)
        for item in expired:
            if not item[3].done():
                item[3].set_result(False)
        return len(expired)

    def fail_all(self) -> None:
        for item in self._heap:
            if not item[3].done():
                item[3].set_result(False)
        self._heap.clear()


@dataclass(slots=True)
class RejectedSlave:
    """A slave the master refused to stream to, and why (shown in the HA status)."""

    addr: str
    reported_offset: int
    reason: str
    at_ms: int


class HAConnection:
    """One slave: its reports in, CommitLog bytes out."""

    def __init__(self, service: HAService, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.next_transfer_from = -1
        now = time.monotonic()
        self.last_read = now
        self.last_write = now
        self.connected_at_ms = int(time.time() * 1000)
        self.rate = ByteRate()
        self.reports = ReportReader()
        self.first_report = asyncio.Event()
        self.wake = asyncio.Event()
        self.state = "HANDSHAKE"  # -> TRANSFER, or REJECTED
        self._tasks: list[asyncio.Future] = []

    def close(self) -> None:
        """End both halves; :meth:`run` then returns normally."""
        for task in self._tasks:
            task.cancel()

    async def run(self) -> None:
        tasks = [asyncio.ensure_future(self._read_loop()), asyncio.ensure_future(self._write_loop())]
        self._tasks = tasks
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    exc = task.exception()
                    if isinstance(exc, ConnectionError | HAProtocolError):
                        log.warning("HA connection from %s closed: %s", self.addr, exc)
                    else:
                        log.error("HA connection from %s failed", self.addr, exc_info=exc)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    # -- reports ---------------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        housekeeping = self.service.config.ha_housekeeping_interval / 1000
        while True:
            try:
                async with asyncio.timeout(housekeeping):
                    data = await self.reader.read(64 * 1024)
            except TimeoutError:
                log.warning("HA: slave %s sent nothing for %.0f s; closing", self.addr, housekeeping)
                return
            if not data:
                log.info("HA: slave %s closed the connection", self.addr)
                return
            self.last_read = time.monotonic()
            offset = self.reports.feed(data)
            if offset is not None and not self._on_report(offset):
                return

    def _on_report(self, offset: int) -> bool:
        service = self.service
        if self.slave_request_offset < 0:
            problem = service.check_start(offset)
            if problem is not None:
                service.reject(self, offset, problem)
                return False
            self.slave_request_offset = offset
            self.state = "TRANSFER"
            service.rejected.pop(self.addr.rsplit(":", 1)[0], None)
            self.first_report.set()
            log.info("HA: slave %s starts at offset %d", self.addr, offset)
        if offset > service.store.get_max_phy_offset():
            service.reject(self, offset, "the slave acknowledged bytes the master never wrote")
            return False
        self.slave_ack_offset = offset
        service.notify_transfer_some(offset)
        return True

    # -- transfers -------------------------------------------------------------------------------
    async def _write_loop(self) -> None:
        await self.first_report.wait()
        service = self.service
        store = service.store
        config = service.config
        if self.slave_request_offset == 0:
            # A new slave starts from the master's last file, not from the beginning of time.
            max_offset = store.get_max_phy_offset()
            self.next_transfer_from = max(0, max_offset - max_offset % config.mapped_file_size_commit_log)
        else:
            self.next_transfer_from = self.slave_request_offset
        batch = config.ha_transfer_batch_size
        heartbeat = config.ha_send_heartbeat_interval / 1000
        writer = self.writer
        while True:
            try:
                data = store.get_commit_log_data(self.next_transfer_from, batch)
            except OffsetOutOfRangeError as exc:
                # Deleted under the slave (it fell behind the oldest file) or not yet there.
                log.warning("HA: nothing to send %s at %d: %s", self.addr, self.next_transfer_from, exc)
                data = b""
            if data:
                # One write, one segment: a header written alone left in a segment of its own
                # (TCP_NODELAY), woke the slave for 12 bytes and cost a system call a transfer.
                writer.write(encode_transfer_header(self.next_transfer_from, len(data)) + data)
                self.next_transfer_from += len(data)
                self.rate.add(len(data))
                await writer.drain()
                self.last_write = time.monotonic()
                continue
            if time.monotonic() - self.last_write > heartbeat:
                writer.write(encode_transfer_header(self.next_transfer_from, 0))
                await writer.drain()
                self.last_write = time.monotonic()
            self.wake.clear()
            try:
                async with asyncio.timeout(WRITER_IDLE_WAIT):
                    await self.wake.wait()
            except TimeoutError:
                continue
            for _ in range(COALESCE_ITERATIONS):
                await asyncio.sleep(0)

    def info(self, master_offset: int) -> dict:
        ack = max(self.slave_ack_offset, 0)
        diff = master_offset - ack if self.state == "TRANSFER" else 0
        return {
            "addr": self.addr,
            "state": self.state,
            "slaveAckOffset": self.slave_ack_offset,
            "diff": diff,
            "inSync": self.state == "TRANSFER" and diff < self.service.config.ha_slave_fallbehind_max,
            "transferredByteInSecond": self.rate.per_second(),
            "transferredBytesTotal": self.rate.total,
            "transferFromWhere": self.next_transfer_from,
            "lastReadAgoMs": int((time.monotonic() - self.last_read) * 1000),
            "connectedAt": self.connected_at_ms,
        }


class HAService:
    """Accepts slaves, tracks the highest acknowledged offset, releases SYNC_MASTER sends."""

    def __init__(self, store, config: MessageStoreConfig, bind_address: str, port: int) -> None:
        self.store = store
        self.config = config
        self.bind_address = bind_address
        self.port = port
        self.connections: list[HAConnection] = []
        self.rejected: dict[str, RejectedSlave] = {}
        self._reject_said: dict[str, tuple[str, float]] = {}  # host -> (kind, when said)
        self._refused = 0
        self._refused_said = -60.0
        self.push_to_slave_max_offset = 0
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._sweeper: asyncio.Task | None = None
        self.waiters: ReplicaWaiters | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.waiters = ReplicaWaiters(self._loop)
        self._server = await asyncio.start_server(
            self._accept, self.bind_address, self.port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = self._loop.create_task(self._sweep())
        log.info("HA service listening on %s:%d", self.bind_address, self.port)

    # A master streams to a handful of slaves; anyone can reach the port, so connections
    # beyond this many are closed at once (said at most once a minute) rather than each
    # holding a socket, a task and 20 s of housekeeping.
    MAX_CONNECTIONS = 64

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= self.MAX_CONNECTIONS:
            self._refused += 1
            now = time.monotonic()
            if now - self._refused_said > 60:
                log.warning("HA: %d connection(s) refused: already %d open (the limit)",
                            self._refused, len(self.connections))
                self._refused, self._refused_said = 0, now
            writer.transport.abort()
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        connection = HAConnection(self, reader, writer)
        log.info("HA: slave connected from %s", connection.addr)
        self.connections.append(connection)
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await connection.run()
        finally:
            self._tasks.discard(task)
            if connection in self.connections:
                self.connections.remove(connection)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            self.waiters.expire(time.monotonic())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        # Closing (not cancelling) the handlers lets asyncio's stream callbacks end quietly.
        for connection in list(self.connections):
            connection.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self.waiters is not None:
            self.waiters.fail_all()

    # -- slaves' positions -------------------------------------------------------------------------
    def check_start(self, offset: int) -> str | None:
        """Why a slave reporting ``offset`` on connect cannot be served, or None."""
        max_offset = self.store.get_max_phy_offset()
        if offset > max_offset:
            return (f"the slave's CommitLog ends at {offset}, beyond the master's {max_offset}: "
                    "it holds data the master does not have")
        min_offset = self.store.get_min_phy_offset()
        if 0 < offset < min_offset:
            return (f"the slave stands at {offset}, before the master's oldest file ({min_offset}): "
                    "the bytes it needs were deleted")
        return None

    # A refused peer that keeps reconnecting (or anyone on the port sending made-up offsets)
    # is said once per host and kind of refusal, then at most once a minute.
    REJECT_LOG_SECONDS = 60.0

    def reject(self, connection: HAConnection, offset: int, reason: str) -> None:
        host = connection.addr.rsplit(":", 1)[0]
        kind = reason.split(":", 1)[-1]  # "it holds data…" / "the bytes it needs…": no offsets
        now = time.monotonic()
        said = self._reject_said.get(host)
        if said is None or said[0] != kind or now - said[1] > self.REJECT_LOG_SECONDS:
            log.error("HA: refusing slave %s: %s", connection.addr, reason)
            self._reject_said[host] = (kind, now)
        connection.state = "REJECTED"
        self.rejected[host] = RejectedSlave(connection.addr, offset, reason, int(time.time() * 1000))

    def notify_transfer_some(self, offset: int) -> None:
        if offset > self.push_to_slave_max_offset:
            self.push_to_slave_max_offset = offset
            self.waiters.notify(offset)

    def wakeup(self) -> None:
        """New CommitLog data: wake the writers (safe from any thread)."""
        if self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            for connection in self.connections:
                connection.wake.set()
        else:
            self._loop.call_soon_threadsafe(self.wakeup)

    def connection_count(self) -> int:
        return sum(1 for c in self.connections if c.state == "TRANSFER")

    def is_slave_ok(self, master_put_where: int) -> bool:
        return (self.connection_count() > 0
                and master_put_where - self.push_to_slave_max_offset < self.config.ha_slave_fallbehind_max)

    def wait_for_replica(self, next_offset: int) -> asyncio.Future:
        """A future that becomes True once a slave acknowledged ``next_offset``, False after
        syncFlushTimeout."""
        return self.waiters.wait(next_offset, self.push_to_slave_max_offset,
                                 self.config.sync_flush_timeout / 1000)

    def runtime_info(self) -> dict:
        master_offset = self.store.get_max_phy_offset()
        connections = [c.info(master_offset) for c in self.connections]
        return {
            "master": True,
            "masterCommitLogMaxOffset": master_offset,
            "push2SlaveMaxOffset": self.push_to_slave_max_offset,
            "inSyncSlaveNums": sum(1 for c in connections if c["inSync"]),
            "haConnectionInfo": connections,
            "rejectedSlaves": [
                {"addr": r.addr, "reportedOffset": r.reported_offset, "reason": r.reason, "at": r.at_ms}
                for r in self.rejected.values()],
        }
