"""Free loopback ports, preferring RocketMQ's defaults where a profile asks for them."""

from __future__ import annotations

import socket
import sys

from common.platform import sockets


def port_is_free(port: int) -> bool:
    """Whether a node could listen on ``port`` now, bound as the nodes bind: the connections of
    a node just killed may linger in TIME_WAIT, yet a port someone listens on is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sockets.listen_again_soon(sock)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    # BSD (macOS) binds 127.0.0.1:port beside another program listening on every address at
    # that port: somebody answering there means it is taken whatever the bind said. (Linux and
    # Windows refuse that bind; and Windows retries a refused connect for a second or two.)
    if sys.platform != "darwin":
        return True
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except OSError:
        return True


def free_port(prefer: int | None = None, taken: set[int] | None = None) -> int:
    """``prefer`` when it is free, else a port the kernel picks; never one in ``taken``."""
    taken = taken if taken is not None else set()
    if prefer and prefer not in taken and port_is_free(prefer):
        taken.add(prefer)
        return prefer
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port
