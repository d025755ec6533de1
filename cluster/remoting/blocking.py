"""A blocking remoting client: one socket, the sans-I/O codec, no event loop.

For code that cannot run one: Spark's Python workers read a queue range per partition, and
starting an event loop for each would cost more than the reads. Requests are answered in order
on one connection; requests the server sends us (NOTIFY_CONSUMER_IDS_CHANGED and the like) are
skipped, as tools skip them.
"""

from __future__ import annotations

import itertools
import socket
from dataclasses import replace

from cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from cluster.remoting.errors import RemotingConnectError, RemotingTimeoutError

READ_SIZE = 1 << 20


class BlockingRemotingClient:
    """A connection to one address; ``invoke`` sends a request and returns its response."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        try:
            self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise RemotingConnectError(f"cannot connect to {address}: {exc}") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder()
        self._opaques = itertools.count(1)

    def __enter__(self) -> BlockingRemotingClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def invoke(self, command: RemotingCommand) -> RemotingCommand:
        opaque = next(self._opaques) & 0x7FFFFFFF
        try:
            self.sock.sendall(encode(replace(command, opaque=opaque)))
            while True:
                answer = self._decoder.next_command()
                if answer is not None:
                    if answer.is_response and answer.opaque == opaque:
                        return answer
                    continue
                data = self.sock.recv(READ_SIZE)
                if not data:
                    raise RemotingConnectError(f"{self.address} closed the connection")
                self._decoder.feed(data)
        except TimeoutError as exc:
            raise RemotingTimeoutError(f"no response from {self.address} to request "
                                       f"{command.code}") from exc
        except OSError as exc:
            raise RemotingConnectError(f"connection to {self.address} failed: {exc}") from exc
