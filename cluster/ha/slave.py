"""The slave's side of replication: RocketMQ's HAClient, as an asyncio task.

The slave connects to its master's HA address, reports its CommitLog max offset at once (not
after the first 5 s as 4.x does), appends every transfer at its offset, and reports again after
each read that advanced it and every haSendHeartbeatInterval. A transfer that does not start
where the slave's CommitLog ends means the two logs diverged: the slave drops the connection
rather than write a byte out of place.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from cluster.ha.errors import HAProtocolError, OffsetMismatchError
from cluster.ha.protocol import TransferReader, encode_report
from cluster.ha.rate import ByteRate
from storage.config import MessageStoreConfig
from storage.errors import StoreError

log = logging.getLogger(__name__)

RECONNECT_INTERVAL = 5.0  # waitForRunning(1000 * 5)
CONNECT_TIMEOUT = 3.0


class HAClient:
    def __init__(self, store, config: MessageStoreConfig) -> None:
        self.store = store
        self.config = config
        self.master_address: str | None = config.ha_master_address or None
        self.state = "IDLE"  # IDLE (no address), CONNECTING, TRANSFER
        self.rate = ByteRate()
        self.current_reported_offset = 0
        self.last_read_ms = 0
        self.last_report_ms = 0
        self.last_error: str | None = None
        self.sessions = 0
        self._address_changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._writer: asyncio.StreamWriter | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def update_master_address(self, address: str | None) -> None:
        """The name server told us where the master's HA port is (every registration)."""
        if address and address != self.master_address:
            log.info("HA: master address is now %s (was %s)", address, self.master_address)
            self.master_address = address
            self._address_changed.set()
            if self._writer is not None:
                self._writer.close()

    async def _run(self) -> None:
        while True:
            address = self.master_address
            if not address:
                self.state = "IDLE"
                await self._pause()
                continue
            self.state = "CONNECTING"
            try:
                host, port = address.rsplit(":", 1)
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    reader, writer = await asyncio.open_connection(host, int(port))
            except (OSError, TimeoutError, ValueError) as exc:
                self._note_error(f"cannot connect to the master at {address}: {exc}")
                await self._pause()
                continue
            self._writer = writer
            self.sessions += 1
            try:
                await self._session(reader, writer)
            except (ConnectionError, OSError, HAProtocolError, OffsetMismatchError, StoreError) as exc:
                self._note_error(f"replication from {address} stopped: {exc}")
            finally:
                self._writer = None
                writer.close()
                try:
                    await writer.wait_closed()
                except (ConnectionError, OSError):
                    pass
            self.state = "CONNECTING"
            await self._pause(1.0)

    async def _pause(self, seconds: float = RECONNECT_INTERVAL) -> None:
        self._address_changed.clear()
        try:
            async with asyncio.timeout(seconds):
                await self._address_changed.wait()
        except TimeoutError:
            pass

    def _note_error(self, message: str) -> None:
        if message != self.last_error:
            log.warning("HA: %s", message)
        self.last_error = message

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        store = self.store
        frames = TransferReader()
        self._report(writer, store.get_max_phy_offset())
        self.state = "TRANSFER"
        self.last_read_ms = int(time.time() * 1000)
        log.info("HA: connected to the master at %s, reporting offset %d",
                 self.master_address, self.current_reported_offset)
        heartbeat = self.config.ha_send_heartbeat_interval / 1000
        housekeeping = self.config.ha_housekeeping_interval / 1000
        while True:
            try:
                async with asyncio.timeout(heartbeat):
                    data = await reader.read(256 * 1024)
            except TimeoutError:
                if time.time() * 1000 - self.last_read_ms > housekeeping * 1000:
                    raise ConnectionError(f"the master sent nothing for {housekeeping:.0f} s") from None
                self._report(writer, store.get_max_phy_offset())
                continue
            if not data:
                raise ConnectionError("the master closed the connection")
            self.last_read_ms = int(time.time() * 1000)
            for frame in frames.feed(data):
                slave_offset = store.get_max_phy_offset()
                if slave_offset not in (0, frame.offset):
                    raise OffsetMismatchError(slave_offset, frame.offset)
                if frame.body:
                    store.append_to_commit_log(frame.offset, frame.body)
                    self.rate.add(len(frame.body))
            current = store.get_max_phy_offset()
            stale = time.time() * 1000 - self.last_report_ms > heartbeat * 1000
            if current > self.current_reported_offset or stale:
                self._report(writer, current)
            await writer.drain()

    def _report(self, writer: asyncio.StreamWriter, offset: int) -> None:
        writer.write(encode_report(offset))
        self.current_reported_offset = offset
        self.last_report_ms = int(time.time() * 1000)

    def runtime_info(self) -> dict:
        return {
            "master": False,
            "haClientRuntimeInfo": {
                "masterAddr": self.master_address or "",
                "state": self.state,
                "isActivated": self.state == "TRANSFER",
                "maxOffset": self.store.get_max_phy_offset(),
                "reportedOffset": self.current_reported_offset,
                "transferredByteInSecond": self.rate.per_second(),
                "transferredBytesTotal": self.rate.total,
                "lastReadTimestamp": self.last_read_ms,
                "lastWriteTimestamp": self.last_report_ms,
                "sessions": self.sessions,
                "lastError": self.last_error or "",
            },
        }
