"""One slave's connection on the master: RocketMQ's HAConnection (ReadSocketService and
WriteSocketService), as an asyncio protocol.

The slave's reports (8-byte offsets: where to start, then acknowledgements) are handled in the
callback that received them. The CommitLog bytes go out from a task: it writes what the slave
lacks, at most haTransferBatchSize a frame, an empty frame every haSendHeartbeatInterval when
idle, and otherwise sleeps until new data is put (:meth:`HAConnection.wakeup`). One timer a
connection, every WRITER_IDLE_WAIT, both wakes that task (the heartbeat) and ends a connection
whose slave fell silent for haHousekeepingInterval: with streams, a timeout a read and a timeout
a wait cost the master two timers and a task step for every transfer.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING

from cluster.ha.errors import HAProtocolError
from cluster.ha.protocol import ReportReader, encode_transfer_header
from cluster.ha.rate import ByteRate
from storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from cluster.ha.master import HAService

log = logging.getLogger(__name__)

WRITER_IDLE_WAIT = 0.1  # allWaitForRunning(100)
# Once woken, the writer lets the loop run this many more iterations before it reads the
# CommitLog: the sends of the same moment (many clients' reads) then leave in one transfer
# instead of one each. Each transfer costs the master a write and the slave a read, an append
# and a report; `bench ha -w 32`: ASYNC +15 %, SYNC unchanged (docs/benchmarks.md, session 11).
COALESCE_ITERATIONS = 2
SOCKET_BUFFER = 64 * 1024


class HAConnection(asyncio.Protocol):
    """One slave: its reports in, CommitLog bytes out."""

    def __init__(self, service: HAService) -> None:
        self.service = service
        self.addr = "?"
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.next_transfer_from = -1
        # Where the slave's CommitLog begins: a new slave is sent the master's last file only,
        # and its acknowledgements say nothing of the bytes before it.
        self.held_from = 0
        now = time.monotonic()
        self.last_read = now
        self.last_write = now
        self.connected_at_ms = int(time.time() * 1000)
        self.rate = ByteRate()
        self.reports = ReportReader()
        self.state = "HANDSHAKE"  # -> TRANSFER, or REJECTED
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.closed: asyncio.Future = loop.create_future()  # done once the connection is gone
        self.transport: asyncio.Transport | None = None
        self._first_report: asyncio.Future = loop.create_future()
        self._wake: asyncio.Future | None = None  # the idle writer's sleep
        self._drained: asyncio.Future | None = None  # set while the transport's buffer is full
        self._writer: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None

    # -- the connection --------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self.service.admit(self):
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        log.info("HA: slave connected from %s", self.addr)
        self._writer = self._loop.create_task(self._write_loop())
        self._timer = self._loop.call_later(WRITER_IDLE_WAIT, self._tick)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            offset = self.reports.feed(data)
        except HAProtocolError as exc:
            log.warning("HA connection from %s closed: %s", self.addr, exc)
            self.close()
            return
        if offset is not None and not self._on_report(offset):
            self.close()

    def eof_received(self) -> bool:
        log.info("HA: slave %s closed the connection", self.addr)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._writer is not None:
            self._writer.cancel()
        for future in (self._first_report, self._wake, self._drained):
            if future is not None and not future.done():
                future.cancel()
        self.service.release(self)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def close(self) -> None:
        """End the connection now; :attr:`closed` is done once it is gone.

        Aborted, not closed: a peer that stopped reading would hold a closing transport (and
        its place among the connections) until its unsent bytes left, which is never."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is not None:
            self._writer.cancel()
        if self.transport is not None:
            self.transport.abort()

    def _tick(self) -> None:
        housekeeping = self.service.config.ha_housekeeping_interval / 1000
        if time.monotonic() - self.last_read > housekeeping:
            log.warning("HA: slave %s sent nothing for %.0f s; closing", self.addr, housekeeping)
            self.close()
            return
        self.wakeup()
        self._timer = self._loop.call_later(WRITER_IDLE_WAIT, self._tick)

    def wakeup(self) -> None:
        """New CommitLog data, or time for a heartbeat: the writer looks again."""
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    # -- reports ---------------------------------------------------------------------------------
    def _on_report(self, offset: int) -> bool:
        service = self.service
        if self.slave_request_offset < 0:
            problem = service.check_start(offset)
            if problem is not None:
                service.reject(self, offset, problem)
                return False
            self.slave_request_offset = offset
            if offset == 0:  # a new slave starts from the master's last file
                max_offset = service.store.get_max_phy_offset()
                self.held_from = max(0, max_offset - max_offset % service.config.mapped_file_size_commit_log)
            self.state = "TRANSFER"
            service.rejected.pop(self.addr.rsplit(":", 1)[0], None)
            self._first_report.set_result(None)
            log.info("HA: slave %s starts at offset %d", self.addr, offset)
        if offset > service.store.get_max_phy_offset():
            service.reject(self, offset, "the slave acknowledged bytes the master never wrote")
            return False
        self.slave_ack_offset = offset
        service.notify_transfer_some(offset, self.held_from)
        return True

    # -- transfers -------------------------------------------------------------------------------
    async def _write_loop(self) -> None:
        try:
            await self._first_report
            await self._transfer()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("HA connection from %s failed", self.addr)
            self.close()

    async def _transfer(self) -> None:
        service = self.service
        store = service.store
        config = service.config
        if self.slave_request_offset == 0:
            # A new slave starts from the master's last file, not from the beginning of time.
            self.next_transfer_from = self.held_from
        else:
            self.next_transfer_from = self.slave_request_offset
        batch = config.ha_transfer_batch_size
        heartbeat = config.ha_send_heartbeat_interval / 1000
        transport = self.transport
        loop = self._loop
        while True:
            try:
                data = store.get_commit_log_data(self.next_transfer_from, batch)
            except OffsetOutOfRangeError as exc:
                if self.next_transfer_from < store.get_min_phy_offset():
                    # Deleted under a slave that fell behind (retention, a full disk): it can
                    # never catch up, and must not go on counting as a slave in sync.
                    service.reject(self, self.next_transfer_from,
                                   f"the slave stands at {self.next_transfer_from}, before the "
                                   f"master's oldest file ({store.get_min_phy_offset()}): the "
                                   "bytes it needs were deleted")
                    self.close()
                    return
                # Not there yet (a file being made): the next look finds it.
                log.debug("HA: nothing to send %s at %d: %s", self.addr, self.next_transfer_from, exc)
                data = b""
            if data:
                # One write, one segment: a header written alone left in a segment of its own
                # (TCP_NODELAY), woke the slave for 12 bytes and cost a system call a transfer.
                transport.write(encode_transfer_header(self.next_transfer_from, len(data)) + data)
                self.next_transfer_from += len(data)
                self.rate.add(len(data))
                self.last_write = time.monotonic()
                if self._drained is not None:
                    await self._drained
                continue
            if time.monotonic() - self.last_write > heartbeat:
                transport.write(encode_transfer_header(self.next_transfer_from, 0))
                self.last_write = time.monotonic()
            self._wake = loop.create_future()
            await self._wake
            self._wake = None
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
