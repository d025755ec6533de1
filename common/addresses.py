"""``host:port`` as people and RocketMQ write addresses (a name server list, a broker's address),
parsed in one place for the cluster's clients and the console alike."""

from __future__ import annotations


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (IPv6 hosts may be bracketed) -> (host, port); ValueError, with a
    sentence, for anything else."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host.strip("[]") or not (port.isascii() and port.isdigit()) \
            or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port (a port from 1 to 65535)")
    return host.strip("[]"), int(port)
