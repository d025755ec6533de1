"""Free loopback ports, preferring RocketMQ's defaults where a profile asks for them."""

from __future__ import annotations

import socket


def port_is_free(port: int) -> bool:
    """Whether a node could listen on ``port`` now. SO_REUSEADDR as the nodes use it: the
    connections of a node just killed linger in TIME_WAIT, yet a listener is still refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
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
