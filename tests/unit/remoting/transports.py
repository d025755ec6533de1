"""A transport for RemotingConnection tests: what it writes is kept, nothing is sent."""

from __future__ import annotations


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1234) if name == "peername" else default

    def close(self) -> None:
        pass
