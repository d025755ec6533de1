"""The master's side of replication: RocketMQ's HAService, AcceptSocketService and
GroupTransferService, on the broker's event loop.

Each slave is an :class:`~cluster.ha.connection.HAConnection` (its reports in, CommitLog bytes
out). A SYNC_MASTER send waits in :class:`ReplicaWaiters` until some slave acknowledged its end
offset.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass

from cluster.ha.connection import HAConnection
from storage.config import MessageStoreConfig

log = logging.getLogger(__name__)

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

    def notify(self, acked: int, held_from: int = 0) -> None:
        """A slave holds the CommitLog from ``held_from`` up to ``acked``: release the sends
        that end in that range. Those that end before it stay for a slave that holds them."""
        heap = self._heap
        kept = []
        while heap and heap[0][0] <= acked:
            item = heapq.heappop(heap)
            if item[0] <= held_from:
                kept.append(item)
            elif not item[3].done():
                item[3].set_result(True)
        for item in kept:
            heapq.heappush(heap, item)

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
        self._sweeper: asyncio.Task | None = None
        self._stopping = False
        self.waiters: ReplicaWaiters | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.waiters = ReplicaWaiters(self._loop)
        self._server = await self._loop.create_server(
            lambda: HAConnection(self), self.bind_address, self.port, backlog=1024)
        # (asyncio sets SO_REUSEADDR on POSIX itself and nothing on Windows, where that option
        # would let another program share the port: common/platform/sockets.py)
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = self._loop.create_task(self._sweep())
        log.info("HA service listening on %s:%d", self.bind_address, self.port)

    # A master streams to a handful of slaves; anyone can reach the port, so connections
    # beyond this many are closed at once (said at most once a minute) rather than each
    # holding a socket, a task and 20 s of housekeeping.
    MAX_CONNECTIONS = 64

    def admit(self, connection: HAConnection) -> bool:
        """Count a new slave connection in, unless the limit is reached (then it is closed)."""
        if self._stopping:
            return False  # accepted just before the server closed
        if len(self.connections) >= self.MAX_CONNECTIONS:
            self._refused += 1
            now = time.monotonic()
            if now - self._refused_said > 60:
                log.warning("HA: %d connection(s) refused: already %d open (the limit)",
                            self._refused, len(self.connections))
                self._refused, self._refused_said = 0, now
            return False
        self.connections.append(connection)
        return True

    def release(self, connection: HAConnection) -> None:
        if connection in self.connections:
            self.connections.remove(connection)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            self.waiters.expire(time.monotonic())

    async def stop(self) -> None:
        self._stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        connections = list(self.connections)
        for connection in connections:
            connection.close()
        await asyncio.gather(*(c.closed for c in connections), return_exceptions=True)
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

    def notify_transfer_some(self, offset: int, held_from: int = 0) -> None:
        """A slave acknowledged ``offset``, holding the CommitLog from ``held_from``."""
        self.push_to_slave_max_offset = max(self.push_to_slave_max_offset, offset)
        # (every slave's: one that is behind may still be the only one holding a send)
        self.waiters.notify(offset, held_from)

    def wakeup(self) -> None:
        """New CommitLog data: wake the writers (safe from any thread)."""
        if self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            for connection in self.connections:
                connection.wakeup()
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
