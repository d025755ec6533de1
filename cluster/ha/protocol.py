"""The HA wire format, sans I/O.

There is no remoting framing on the HA port: the slave writes bare 8-byte big-endian longs
(its CommitLog max offset: where to start, a heartbeat and an acknowledgement all at once), and
the master writes ``[phyOffset: 8][size: 4][size raw CommitLog bytes]`` frames, size 0 being a
heartbeat. Both readers here take bytes as they arrive and keep what is incomplete.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cluster.ha.errors import HAProtocolError

REPORT_SIZE = 8
TRANSFER_HEADER_SIZE = 12
# The master sends at most haTransferBatchSize (32 KiB) per frame; RocketMQ's slave buffers
# 4 MiB, so anything larger cannot come from a RocketMQ-compatible master.
MAX_TRANSFER_BODY = 4 * 1024 * 1024

_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")


def encode_report(max_offset: int) -> bytes:
    """The slave's report: its CommitLog max offset."""
    return _REPORT.pack(max_offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    return _HEADER.pack(offset, size)


class ReportReader:
    """The master's side: reports arrive in any chunking; only the latest complete one counts
    (older ones in the same read are superseded, as RocketMQ's reader does)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> int | None:
        """The newest complete report in what has arrived, or None when none completed."""
        buffer = self._pending + data
        whole = len(buffer) - len(buffer) % REPORT_SIZE
        self._pending = buffer[whole:]
        if whole == 0:
            return None
        (offset,) = _REPORT.unpack_from(buffer, whole - REPORT_SIZE)
        if offset < 0:
            raise HAProtocolError(f"the slave reported a negative offset {offset}")
        return offset


@dataclass(frozen=True, slots=True)
class TransferFrame:
    offset: int
    body: bytes | memoryview  # a view of the bytes read (TransferReader)

    @property
    def is_heartbeat(self) -> bool:
        return not self.body


class TransferReader:
    """The slave's side: splits the master's stream into frames, keeping a partial one.

    A frame's body is a view of the bytes that arrived, not a copy: the master writes a frame
    whole, so a read usually starts at a frame's header and the bodies go to the CommitLog
    without being copied on the way (only a frame split across reads is joined)."""

    def __init__(self, max_body: int = MAX_TRANSFER_BODY) -> None:
        self._pending = bytearray()
        self._needed = 0  # what the pending frame needs before it is whole
        self._max_body = max_body

    @property
    def buffered(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes) -> list[TransferFrame]:
        if self._pending:
            self._pending += data
            if len(self._pending) < self._needed:
                return []  # a large frame still arriving: no copy of it per read
            source = bytes(self._pending)
            self._pending.clear()
        else:
            source = bytes(data)
        view = memoryview(source)
        frames = []
        pos = 0
        total = len(source)
        while total - pos >= TRANSFER_HEADER_SIZE:
            offset, size = _HEADER.unpack_from(source, pos)
            if offset < 0 or size < 0 or size > self._max_body:
                raise HAProtocolError(f"bad transfer header: offset {offset}, size {size}")
            end = pos + TRANSFER_HEADER_SIZE + size
            if end > total:
                break
            frames.append(TransferFrame(offset, view[pos + TRANSFER_HEADER_SIZE : end]))
            pos = end
        if pos < total:
            self._pending += view[pos:]
            self._needed = TRANSFER_HEADER_SIZE
            if total - pos >= TRANSFER_HEADER_SIZE:
                self._needed += _HEADER.unpack_from(source, pos)[1]
        return frames
