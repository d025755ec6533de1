"""Keeping the event loop awake, briefly, for a peer that is about to send.

A request and its answer between two processes on one machine cost each side a wakeup: the
process that wrote goes to sleep in the loop's poll, and the other's next frame has to wake it.
Where a sleeping CPU is expensive to wake (a virtual CPU halts when idle and the host has to
schedule it again: 20-30 µs a wakeup on the VMs this is measured on), the wakeups, not the work,
set the pace of one sender: a lone producer against an idle broker spent most of each round trip
waking processes (docs/benchmarks.md, session 37). Polling instead of sleeping for the short
while until the peer's frame is due is the kernel's own answer for network cards (busy polling,
SO_BUSY_POLL); it does not apply to loopback, so the loop does it.

The rule, a connection at a time: each learns how soon its peer writes after it wrote (the gap
from our write to its next frame, averaged). After a write, while that gap is short (under the
limit), the loop keeps polling without sleeping for up to twice the gap, never past the limit;
the peer's frame is read as it arrives. A peer that is slower (a consumer's long poll, a flush
to disk, a user typing) makes the gap long, and the connection stops asking: idle connections
cost nothing, and a loop keeps polling for at most the limit past its last write; a write
that got nothing back in its window counts as a long gap (a oneway sender stops being polled
for). It stops at once while another thread owes the connection it polls for an answer (a
flush under SYNC_FLUSH, a slave under SYNC_MASTER: that thread gets the interpreter lock without
waiting for a poll to end); requests the loop itself answers (a held pull) do not stop it, so a
client that sends while it consumes on the same connection is polled for (one sender beside an
idle push consumer: 8k -> 13k sends/s, docs/benchmarks.md session 38). Each round yields the
CPU to any other runnable thread first.

The limit is ``serverBusyPollMicros`` on a name server or broker (0: never) and
``busy_poll_micros`` on a client's RemotingClient.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Protocol

DEFAULT_LIMIT_MICROS = 200  # past it, a sleep's wakeup costs little next to the wait
# A poll past this would burn a core for a peer slow enough that sleeping costs nothing.
MAX_LIMIT_MICROS = 100_000
_SLACK = 20e-6  # added to twice the gap: a peer a little slower than usual is still caught
_WEIGHT = 0.25  # of a new gap in the average: a few sends tell a slow peer from a fast one
_clock = time.perf_counter  # (high resolution everywhere, Windows included)
# Gives the CPU to any other runnable thread first. Windows has no sched_yield; a sleep of 0
# there does the same (it gives up the rest of the time slice).
_yield = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


class Polled(Protocol):
    """What a connection keeps for its poller (RemotingConnection)."""

    _loop: asyncio.AbstractEventLoop
    _written_at: float  # when we last wrote and have not read since; 0.0: read since
    _gap: float  # the average gap from our write to the peer's next frame, seconds

    def keeps_polling(self) -> bool: ...


class BusyPoller:
    """Keeps one loop polling for the connections of one server or client."""

    __slots__ = ("_limit", "_loop", "_running", "_until", "_waiting", "rounds")

    def __init__(self, limit_micros: int = DEFAULT_LIMIT_MICROS) -> None:
        if type(limit_micros) is not int or not 0 < limit_micros <= MAX_LIMIT_MICROS:
            raise ValueError(f"a busy poll's limit is 1 to {MAX_LIMIT_MICROS} µs, "
                             f"not {limit_micros!r}")
        self._limit = limit_micros / 1e6
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False  # a round is scheduled
        self._until = 0.0  # when polling stops (perf_counter)
        self._waiting: Polled | None = None  # the connection the last polling was asked for
        self.rounds = 0  # loop iterations kept awake, all told (tests and benchmarks read it)

    @property
    def polling(self) -> bool:
        return self._running

    def read(self, connection: Polled) -> None:
        """``connection`` read: the gap since its last write joins its average, and the poll
        kept for it ends (what it waited for came; its next write asks again)."""
        written = connection._written_at
        if written:
            connection._written_at = 0.0
            gap = _clock() - written
            average = connection._gap
            connection._gap = gap if average == math.inf else average + (gap - average) * _WEIGHT
            if self._waiting is connection:
                self._until = 0.0

    def wrote(self, connection: Polled) -> None:
        """``connection`` wrote: keep the loop polling if its peer tends to answer soon."""
        now = _clock()
        gap = connection._gap
        written = connection._written_at
        if written and now - written > gap + gap + _SLACK:
            # Nothing came in the window the last write polled for (a oneway send, a request
            # answered late): the miss counts as a gap, so a peer that stopped answering soon
            # stops being polled for.
            gap = connection._gap = gap + (now - written - gap) * _WEIGHT
        connection._written_at = now
        if gap >= self._limit:
            return
        until = now + min(self._limit, gap + gap + _SLACK)
        self._until = max(self._until, until)
        self._waiting = connection
        loop = connection._loop
        # (a round scheduled on a loop that has since closed never runs: a client used again
        # under a new loop starts afresh)
        if not self._running or loop is not self._loop:
            self._running = True
            self._loop = loop
            loop.call_soon(self._round)

    def _round(self) -> None:
        # Scheduled again while due: the loop, with a callback ready, polls its sockets without
        # sleeping, then runs this again (a callback scheduled by a callback waits for the
        # next iteration, asyncio's and uvloop's alike).
        waiting = self._waiting
        scheduled = False
        try:
            if waiting is not None and _clock() < self._until and waiting.keeps_polling():
                _yield()
                self._loop.call_soon(self._round)  # type: ignore[union-attr]
                self.rounds += 1
                scheduled = True
        finally:
            # (whatever raised, a poller left "running" with no round scheduled would never
            # poll again: the next write asks afresh)
            if not scheduled:
                self._running = False
                self._until = 0.0
                self._waiting = None
