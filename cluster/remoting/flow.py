"""What a connection may make a server hold, and why a connection closed.

Connections a server accepts get :class:`FlowControl` (connection.py applies it), so that a
peer cannot make us hold unbounded memory: reading stops while our write buffer to it is above
the high-water mark (it does not read its answers) or while too many of its requests are being
processed (it pipelines faster than we answer); a write buffer past a hard limit ends the
connection. Client connections have none of this: a client that stopped reading because it
could not write would deadlock against a server doing the same, and a client only buffers what
its own code asked for. Every connection closes once, for one :class:`CloseReason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class CloseReason(Enum):
    PEER_CLOSED = "the peer closed the connection"
    OUT_OF_SYNC = "the peer sent a malformed frame"
    LOCAL_CLOSE = "closed locally"
    IDLE = "idle too long"
    PARTIAL_FRAME = "a partial frame was not completed in time"
    WRITE_BUFFER_FULL = "the peer does not read its responses"
    SHUTDOWN = "the server is shutting down"


# Reasons for which unsent bytes are dropped at once: waiting to flush them to a peer that
# does not read would keep the socket (and the buffer) for as long as the peer likes.
DISCARD_UNSENT = frozenset({CloseReason.IDLE, CloseReason.PARTIAL_FRAME,
                            CloseReason.WRITE_BUFFER_FULL, CloseReason.SHUTDOWN})


@dataclass(frozen=True, slots=True)
class FlowControl:
    """The memory one accepted connection may make a server hold (defaults: NettyServerConfig).

    Reading stops while more than ``write_high_water`` bytes wait to be written to the peer and
    resumes once they are below ``write_low_water`` (asyncio calls pause_writing and
    resume_writing). Past ``max_write_buffer`` unsent bytes the connection is dropped: answers
    to requests read before the pause, and requests the server sends on its own, still pile up.
    Reading also stops while ``max_inflight_requests`` requests of the peer, or
    ``max_inflight_bytes`` of their frames, are being processed, and resumes as they finish.
    """

    write_high_water: int
    write_low_water: int
    max_write_buffer: int
    max_inflight_requests: int
    max_inflight_bytes: int
