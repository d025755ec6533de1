"""A blocking remoting client: one socket, the sans-I/O codec, no event loop.

For code that cannot run one: Spark's Python workers read a queue range per partition, and
starting an event loop for each would cost more than the reads. Requests are answered in order
on one connection; requests the server sends us (NOTIFY_CONSUMER_IDS_CHANGED and the like) are
skipped, as tools skip them.

A response is read straight from the socket into its place, frame by frame: its length, its
header, then its body, with ``recv_into`` and no buffer in between. A caller that collects
bodies (the export's pull reader, ~1 MiB a pull) says where each goes (``body_into``): the
bodies of consecutive pulls then lie side by side in one buffer, never copied again before
they are cut into columns. Read through a decoder's buffer, a pull's records were copied three
times more on their way (the socket's chunks into the buffer, the body out of it, the
responses joined for a batch).
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable
from dataclasses import replace

from cluster.remoting.codec import (
    HEADER_MARK,
    HEADER_MAX,
    LENGTH,
    RemotingCommand,
    check_frame_length,
    decode_frame,
    encode,
)
from cluster.remoting.errors import (
    RemoteProtocolError,
    RemotingConnectError,
    RemotingTimeoutError,
)

# Where a body of n bytes goes: a writable buffer of exactly n bytes.
BodyInto = Callable[[int], memoryview]


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
        self._opaques = itertools.count(1)

    def __enter__(self) -> BlockingRemotingClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def invoke(self, command: RemotingCommand,
               body_into: BodyInto | None = None) -> RemotingCommand:
        """Send a request and return its response. With ``body_into``, a response's body of
        any bytes is read into ``body_into(length)`` and is that buffer (a memoryview, not
        bytes); otherwise, and when empty, it is bytes. A malformed frame closes the
        connection (RemoteProtocolError), as the server side does; so does any other failure,
        which may leave a frame half read."""
        opaque = next(self._opaques) & 0x7FFFFFFF
        try:
            self.sock.sendall(encode(replace(command, opaque=opaque)))
            while True:
                answer, body_length = self._read_header()
                ours = answer.is_response and answer.opaque == opaque
                if ours and body_into is not None and body_length:
                    body = body_into(body_length)
                    if len(body) != body_length:
                        raise ValueError(f"body_into({body_length}) gave {len(body)} bytes")
                    self._read_into(body)
                    # (the body is the caller's buffer, not bytes: what it asked for)
                    return replace(answer, body=body)  # type: ignore[arg-type]
                data = bytearray(body_length)
                self._read_into(memoryview(data))
                if ours:
                    return replace(answer, body=bytes(data))
                # (a request of the server's own: skipped, as tools skip them)
        except TimeoutError as exc:
            self.close()  # (a frame may be half read: nothing after it could be told apart)
            raise RemotingTimeoutError(f"no response from {self.address} to request "
                                       f"{command.code}") from exc
        except OSError as exc:
            self.close()
            raise RemotingConnectError(f"connection to {self.address} failed: {exc}") from exc
        except BaseException:  # (RemoteProtocolError among them)
            self.close()
            raise

    def _read_header(self) -> tuple[RemotingCommand, int]:
        """The next frame's command (no body yet) and its body's length."""
        prefix = bytearray(LENGTH.size + HEADER_MARK.size)
        self._read_into(memoryview(prefix))
        (total,) = LENGTH.unpack_from(prefix, 0)
        (mark,) = HEADER_MARK.unpack_from(prefix, LENGTH.size)
        check_frame_length(total)
        header_length = mark & HEADER_MAX
        if header_length > total - HEADER_MARK.size:
            raise RemoteProtocolError(f"header length {header_length} exceeds the frame's "
                                      f"{total - HEADER_MARK.size} bytes")
        header = bytearray(HEADER_MARK.size + header_length)
        header[:HEADER_MARK.size] = prefix[LENGTH.size:]
        self._read_into(memoryview(header)[HEADER_MARK.size:])
        return decode_frame(header), total - len(header)

    def _read_into(self, view: memoryview) -> None:
        """Fill ``view`` from the socket."""
        while view:
            received = self.sock.recv_into(view)
            if not received:
                raise RemotingConnectError(f"{self.address} closed the connection")
            view = view[received:]
