"""A transport for RemotingConnection tests: what it writes is kept, nothing is sent."""

from __future__ import annotations


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.gathered: list[list] = []  # what each writelines (a writev) was given

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def writelines(self, frames) -> None:
        self.gathered.append(list(frames))
        self.writes.append(b"".join(frames))

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass  # (a server's connection sets its flow control's marks)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1234) if name == "peername" else default

    def close(self) -> None:
        pass
