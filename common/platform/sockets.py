"""Listening on a port again soon after its last owner ended.

POSIX refuses a listener while the old one's connections linger in TIME_WAIT unless the socket
sets SO_REUSEADDR, which there still refuses a port someone is listening on. On Windows
SO_REUSEADDR means something else: it lets a second socket bind a port another is listening on,
and the two then split its connections. Windows needs no option for TIME_WAIT; there the socket
takes SO_EXCLUSIVEADDRUSE instead, so that nobody can share a port a node listens on and a check
that a port is free cannot pass while another program holds it."""

from __future__ import annotations

import socket
import sys

# winsock2.h: SO_EXCLUSIVEADDRUSE is ~SO_REUSEADDR (socket has the name only on Windows).
SO_EXCLUSIVEADDRUSE = getattr(socket, "SO_EXCLUSIVEADDRUSE", ~4)


def listen_again_soon(sock: socket.socket) -> None:
    """Set before ``bind``: the port is ours alone, and taken again past TIME_WAIT."""
    if sys.platform == "win32":
        sock.setsockopt(socket.SOL_SOCKET, SO_EXCLUSIVEADDRUSE, 1)
    else:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
