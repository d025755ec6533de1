"""Listening on a port again soon after its last owner ended.

POSIX refuses a listener while the old one's connections linger in TIME_WAIT unless the socket
sets SO_REUSEADDR (which there still refuses a port someone is listening on); asyncio sets it
on POSIX for the servers it creates. On Windows SO_REUSEADDR means something else: it lets a
second socket bind a port another is listening on, and the two then split its connections (and
a check that a port is free would pass while another program holds it). Windows needs no option
for TIME_WAIT, so there a socket is bound as asyncio binds it: with none."""

from __future__ import annotations

import socket
import sys


def listen_again_soon(sock: socket.socket) -> None:
    """Set before ``bind``, as the nodes' listeners are bound."""
    if sys.platform != "win32":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
