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
        self._transport: asyncio.Transport | None = None

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
            if self._transport is not None:
                self._transport.abort()  # (an old master that stopped reading never lets it close)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
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
                    transport, session = await loop.create_connection(
                        lambda: TransferSession(self), host, int(port))
            except (OSError, TimeoutError, ValueError) as exc:
                self._note_error(f"cannot connect to the master at {address}: {exc}")
                await self._pause()
                continue
            self._transport = transport
            self.sessions += 1
            try:
                await session.ended
            except (ConnectionError, OSError, HAProtocolError, OffsetMismatchError, StoreError) as exc:
                self._note_error(f"replication from {address} stopped: {exc}")
            finally:
                self._transport = None
                session.stop()
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

    def _report(self, transport: asyncio.Transport, offset: int) -> None:
        transport.write(encode_report(offset))
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


class TransferSession(asyncio.Protocol):
    """One connection to the master, driven by its bytes: each read's frames are appended and
    answered with one report, in the callback that received them. (A stream reader with a
    timeout a read cost the slave a task step, a timer and two copies for every transfer, on
    a machine whose two cores SYNC_MASTER replication already fills.) A timer every
    haSendHeartbeatInterval reports when nothing else did, and ends a session the master
    stopped talking on."""

    def __init__(self, client: HAClient) -> None:
        self.client = client
        self.store = client.store
        self.frames = TransferReader()
        self.ended: asyncio.Future = asyncio.get_running_loop().create_future()
        # Read here if the client's task was stopped first (nobody awaits it then).
        self.ended.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.transport: asyncio.Transport | None = None
        self._heartbeat = client.config.ha_send_heartbeat_interval / 1000
        self._housekeeping_ms = client.config.ha_housekeeping_interval
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = self.client
        client._report(transport, self.store.get_max_phy_offset())
        client.state = "TRANSFER"
        client.last_read_ms = int(time.time() * 1000)
        log.info("HA: connected to the master at %s, reporting offset %d",
                 client.master_address, client.current_reported_offset)
        self._timer = asyncio.get_running_loop().call_later(self._heartbeat, self._tick)

    def data_received(self, data: bytes) -> None:
        client = self.client
        store = self.store
        client.last_read_ms = int(time.time() * 1000)
        try:
            for frame in self.frames.feed(data):
                slave_offset = store.get_max_phy_offset()
                if slave_offset not in (0, frame.offset):
                    raise OffsetMismatchError(slave_offset, frame.offset)
                if frame.body:
                    store.append_to_commit_log(frame.offset, frame.body)
                    client.rate.add(len(frame.body))
        except (HAProtocolError, OffsetMismatchError, StoreError) as exc:
            self._end(exc)
            return
        current = store.get_max_phy_offset()
        if (current > client.current_reported_offset
                or client.last_read_ms - client.last_report_ms > self._heartbeat * 1000):
            client._report(self.transport, current)

    def _tick(self) -> None:
        client = self.client
        now_ms = time.time() * 1000
        if now_ms - client.last_read_ms > self._housekeeping_ms:
            self._end(ConnectionError(
                f"the master sent nothing for {self._housekeeping_ms / 1000:.0f} s"))
            return
        if now_ms - client.last_report_ms >= self._heartbeat * 1000 * 0.9:
            client._report(self.transport, self.store.get_max_phy_offset())
        self._timer = asyncio.get_running_loop().call_later(self._heartbeat, self._tick)

    def eof_received(self) -> None:
        self._end(ConnectionError("the master closed the connection"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionError("the master closed the connection"))

    def _end(self, exc: BaseException) -> None:
        if not self.ended.done():
            self.ended.set_exception(exc)
        self.stop()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.abort()  # (a master that stopped reading would keep it closing)
