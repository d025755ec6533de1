"""Lanes: the common requests of one code answered straight from the frame tuple the decoder
split (codec.FrameDecoder.next_frame), with no command object, and runs of them.

A lane gives an answer at once (bytes), or NotImplemented, having changed nothing, for the
request to take the handler's way. A lane may also answer the consecutive requests of its code
in one read together: ``run(connection, frames)`` gives the answers to the first of them
(bytes, a result as a handler's, or an exception for SYSTEM_ERROR), up to ``run_frames`` a run
(0 while it takes none); the rest go one by one. It raises only before it has changed anything.

:class:`LaneRequests` is the half of RemotingConnection that hands a read's requests to their
lanes and writes what they answer; the connection's read loop (``_drain_decoder``) finds them.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from cluster.remoting.codec import RemotingCommand, command_of
from cluster.remoting.deferred_answer import DeferredAnswer
from cluster.remoting.errors import RemotingConnectError

if TYPE_CHECKING:
    from cluster.remoting.connection import HandlerResult, RemotingConnection

log = logging.getLogger(__name__)

_IS_BYTES = functools.partial(operator.is_, bytes)

Lane = Callable[["RemotingConnection", tuple], "RemotingCommand | bytes"]

# At most this many requests of one read make a run (a lane's ``run_frames``). A run's answers
# are made together and, when given at once (not waiting for a disk or a slave), leave in one
# write, so a longer run costs its first sender the time
# the others take to put (a few µs each) and saves a write, a put and the Python around them
# for every request it takes. Measured (docs/benchmarks.md, "Speed, session 25"): 16 against
# 4 cut the broker's CPU a send by ~10 % for the official C++ client and by ~20 % in-process,
# with no loss for 32 concurrent senders of our own client.
RUN_FRAMES = max(0, min(int(os.environ.get("ROCKETDESK_RUN_FRAMES", "16")), 1024))


class LaneRequests:
    """Requests answered by lanes, one at a time or as runs (mixed into RemotingConnection)."""

    remote_address: str

    if TYPE_CHECKING:  # (RemotingConnection's)
        def send_frame(self, frame: bytes) -> None: ...
        def _send_frames(self, frames: list[bytes]) -> None: ...
        def _on_command(self, command: RemotingCommand, size: int = 0) -> None: ...
        def _take_result(self, command: RemotingCommand, result: HandlerResult,
                         size: int) -> None: ...
        def _failed(self, command: RemotingCommand,
                    exc: BaseException | None = None) -> RemotingCommand: ...
        def _write_now(self, frame: bytes) -> None: ...
        def _uncork(self) -> None: ...
        def _update_reading(self) -> None: ...
        _lanes: dict[int, Lane] | None
        _corked: list[bytes] | None
        _draining: bool

    def _on_lone_request(self, frame: tuple, size: int) -> None:
        """One request, read by itself: what :meth:`_drain_decoder` does with a frame. A
        lane's answer at once (a lone sender's) is written straight away: nothing else of
        this read is coming to share the write."""
        lanes = self._lanes
        lane = None if lanes is None else lanes.get(frame[1])
        answer: object = NotImplemented
        if lane is not None and self._corked is None:
            try:
                answer = lane(self, frame)  # type: ignore[arg-type]  # (self is the connection)
            except Exception:
                answer = self._failed(command_of(frame))
            if type(answer) is bytes:  # (nearly always)
                try:
                    self._write_now(answer)
                except RemotingConnectError:
                    log.debug("%s left before its answer to request %d", self.remote_address,
                              frame[1])
                return
            lane = None  # (asked once: its refusal or answer that waits, or the handler's way)
        self._draining = True
        try:
            if answer is not NotImplemented:
                self._take_result(command_of(frame), answer, size)  # type: ignore[arg-type]
            elif lane is None or not self._on_lane(lane, frame, size):
                self._on_command(command_of(frame), size)
        finally:
            self._draining = False
            if self._corked is not None:
                self._uncork()  # (its answer, written now as a read's answers are)
        self._update_reading()

    def _on_lane(self, lane: Lane, frame: tuple, size: int) -> bool:
        """Let ``lane`` answer a request; False when it leaves it to the handler."""
        try:
            answer = lane(self, frame)  # type: ignore[arg-type]  # (self is the connection)
        except Exception:
            answer = self._failed(command_of(frame))
        if answer is NotImplemented:
            return False
        if type(answer) is bytes:  # nearly always: the answer at once, from its template
            try:
                self.send_frame(answer)
            except RemotingConnectError:
                log.debug("%s left before its answer to request %d", self.remote_address,
                          frame[1])
        else:  # a refusal, or an answer that waits (SYNC_FLUSH, SYNC_MASTER)
            self._take_result(command_of(frame), answer, size)
        return True

    def _on_lane_run(self, lane, frames: list[tuple], sizes: list[int]) -> None:
        """Let ``lane`` answer a run of requests together (``lane.run``); those it leaves go
        one by one, in order, as any other."""
        answers: list = []
        if len(frames) > 1:  # (a run of one: the lane's call for one is cheaper)
            try:
                answers = lane.run(self, frames)
            except Exception:  # a bug before the run changed anything: one by one, as ever
                log.exception("answering a run of %d requests from %s failed; answering them "
                              "one by one", len(frames), self.remote_address)
        if answers and all(map(_IS_BYTES, map(type, answers))):  # (loops in C)
            try:
                self._send_frames(answers)
            except RemotingConnectError:
                log.debug("%s left before its answers to %d requests", self.remote_address,
                          len(answers))
        else:
            self._answer_each(frames, sizes, answers)
        for index in range(len(answers), len(frames)):
            frame = frames[index]
            if not self._on_lane(lane, frame, sizes[index]):
                self._on_command(command_of(frame), sizes[index])

    def _answer_each(self, frames: list[tuple], sizes: list[int], answers: list) -> None:
        """Reply to the first frames with the answers a run gave them, one at a time (a
        refusal, a failure, a result that waits among them)."""
        for index in range(len(answers)):
            answer = answers[index]
            if type(answer) is bytes:
                try:
                    self.send_frame(answer)
                except RemotingConnectError:
                    log.debug("%s left before its answer to request %d", self.remote_address,
                              frames[index][1])
                continue
            # (an answer that waits may carry its request already: the send lane's, made to
            # build it; not made a second time)
            command = answer.command if type(answer) is DeferredAnswer else None
            if command is None:
                command = command_of(frames[index])
            if isinstance(answer, BaseException):
                answer = self._failed(command, answer)
            self._take_result(command, answer, sizes[index])
