"""Runs of a read's consecutive requests for one lane (``lane.run``, RemotingConnection).

A lane that answers runs gets the consecutive frames of its codes from one read, up to its
``run_frames``; whatever it leaves of a run goes one by one, in order (its per-frame call, then
the handler), and every other request in between breaks the run. Answers leave in request order.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from cluster.remoting.codec import FrameDecoder, encode, request
from cluster.remoting.connection import RemotingConnection
from tests.unit.remoting.transports import RecordingTransport

# (both splits: the compiled core's and the pure decoder's, FrameDecoder.next_run)
pytestmark = pytest.mark.usefixtures("header_codec")

LANE_CODE = 310
OTHER_CODE = 11


class RunLane:
    """Takes the leading frames of a run whose extFields say "take"; a frame by itself, only
    if they say "single"."""

    run_frames = 3

    def __init__(self, fail: bool = False) -> None:
        self.runs: list[list[int]] = []
        self.singles: list[int] = []
        self.fail = fail

    def run(self, connection, frames):
        self.runs.append([frame[2] for frame in frames])
        if self.fail:
            raise RuntimeError("lane bug")
        answers = []
        for frame in frames:
            if frame[5].get("how") != "take":
                break
            answers.append(_answer(frame[2], "run"))
        return answers

    def __call__(self, connection, frame):
        self.singles.append(frame[2])
        if frame[5].get("how") in ("take", "single"):
            return _answer(frame[2], "single")
        return NotImplemented


def _answer(opaque: int, remark: str) -> bytes:
    return encode(request(LANE_CODE, {}, opaque=opaque).make_response(0, remark))


def _frame(opaque: int, how: str, code: int = LANE_CODE) -> bytes:
    return encode(request(code, {"how": how}, opaque=opaque))


def _scenario(data: bytes, lane: RunLane):
    async def run():
        handled = []

        def handler(connection, command):
            handled.append(command.opaque)
            return command.make_response(0, "handler")

        connection = RemotingConnection(handler, lanes={LANE_CODE: lane})
        transport = RecordingTransport()
        connection.connection_made(transport)
        connection.data_received(data)
        await asyncio.sleep(0)
        decoder = FrameDecoder()
        decoder.feed(b"".join(transport.writes))
        answers = []
        while (command := decoder.next_command()) is not None:
            answers.append((command.opaque, command.code, command.remark))
        return answers, handled, connection

    return asyncio.run(run())


def test_runs_are_answered_together_and_what_they_leave_goes_one_by_one_in_order():
    lane = RunLane()
    data = b"".join([_frame(1, "take"), _frame(2, "take"), _frame(3, "take"),
                     _frame(4, "take"), _frame(5, "take"), _frame(6, "general"),
                     _frame(7, "single")])
    answers, handled, _ = _scenario(data, lane)
    assert lane.runs == [[1, 2, 3], [4, 5, 6]]  # (7: a run of one is the per-frame call's)
    assert lane.singles == [6, 7]
    assert handled == [6]
    assert answers == [(1, 0, "run"), (2, 0, "run"), (3, 0, "run"), (4, 0, "run"),
                       (5, 0, "run"), (6, 0, "handler"), (7, 0, "single")]


def test_another_request_between_ends_the_run_before_it():
    lane = RunLane()
    data = b"".join([_frame(1, "take"), _frame(2, "take"), _frame(3, "x", OTHER_CODE),
                     _frame(4, "take"), _frame(5, "take")])
    answers, handled, _ = _scenario(data, lane)
    assert lane.runs == [[1, 2], [4, 5]]
    assert handled == [3]
    assert [opaque for opaque, *_ in answers] == [1, 2, 3, 4, 5]


def test_a_run_that_fails_before_changing_anything_goes_one_by_one():
    lane = RunLane(fail=True)
    data = b"".join([_frame(1, "take"), _frame(2, "general"), _frame(3, "x", OTHER_CODE)])
    answers, handled, connection = _scenario(data, lane)
    assert lane.runs == [[1, 2]]
    assert lane.singles == [1, 2]
    assert handled == [2, 3]
    assert answers == [(1, 0, "single"), (2, 0, "handler"), (3, 0, "handler")]
    assert connection.is_open


def test_answers_a_run_gives_as_failures_are_system_errors():
    lane = RunLane()
    lane.run = lambda connection, frames: [RuntimeError("bug"), _answer(frames[1][2], "run")]
    answers, _, _ = _scenario(_frame(1, "take") + _frame(2, "take") + _frame(3, "take"), lane)
    assert answers == [(1, 1, "the server failed to process request code 310; see its log"),
                       (2, 0, "run"), (3, 0, "single")]


def test_a_lane_that_takes_no_runs_now_is_asked_frame_by_frame_within_the_in_flight_limit():
    # (a lane that takes no runs, and whose answers wait: its run_frames is 0, so the
    # in-flight limit holds frame by frame)
    from cluster.remoting.flow import FlowControl

    lane = RunLane()
    lane.run_frames = 0
    waiting: list[asyncio.Future] = []

    def waits(connection, frame):
        lane.singles.append(frame[2])
        future = asyncio.get_running_loop().create_future()
        waiting.append(future)
        return future

    lane.__call__ = waits

    async def run():
        connection = RemotingConnection(
            lambda connection, command: None,
            flow=FlowControl(write_high_water=1 << 20, write_low_water=1 << 19,
                             max_write_buffer=1 << 22, max_inflight_requests=2,
                             max_inflight_bytes=1 << 20),
            lanes={LANE_CODE: WaitingLane(waits)})
        connection.connection_made(RecordingTransport())
        connection.data_received(b"".join(_frame(opaque, "take") for opaque in range(1, 9)))
        await asyncio.sleep(0)
        return connection.inflight

    assert asyncio.run(run()) == 2
    assert lane.singles == [1, 2]


class WaitingLane:
    run_frames = 0

    def __init__(self, call) -> None:
        self._call = call

    def run(self, connection, frames):  # pragma: no cover (never asked: run_frames is 0)
        raise AssertionError("a run was formed")

    def __call__(self, connection, frame):
        return self._call(connection, frame)


def test_the_requests_of_a_run_before_a_malformed_frame_are_answered_then_it_closes():
    lane = RunLane()
    malformed = struct.pack(">ii", 8, 0x7FFFFFFF) + b"junk"  # (a header longer than its frame)
    answers, _handled, connection = _scenario(
        _frame(1, "take") + _frame(2, "take") + malformed, lane)
    assert lane.runs == [[1, 2]]
    assert answers == [(1, 0, "run"), (2, 0, "run")]
    assert connection.close_reason is not None


def test_a_request_read_by_itself_is_answered_at_once_and_waits_while_the_limit_is_reached():
    # A lone sender's read: one whole request, handled without the read loop (the compiled
    # split, FrameDecoder.lone_frame), its answer written before data_received returns; with
    # the in-flight limit reached, it waits in the buffer like any other until one finishes.
    from cluster.remoting.flow import FlowControl

    waiting: list[asyncio.Future] = []
    asked: list[int] = []

    def lane_call(connection, frame):
        asked.append(frame[2])
        if frame[5].get("how") == "decline":
            return NotImplemented
        if frame[5].get("how") == "bug":
            raise RuntimeError("lane bug")
        if frame[5].get("how") == "wait":
            future = asyncio.get_running_loop().create_future()
            waiting.append(future)
            return future
        return _answer(frame[2], "single")

    async def run():
        transport = RecordingTransport()
        handled: list[int] = []
        connection = RemotingConnection(
            lambda connection, command: handled.append(command.opaque) or
            command.make_response(0, "handler"),
            flow=FlowControl(write_high_water=1 << 20, write_low_water=1 << 19,
                             max_write_buffer=1 << 22, max_inflight_requests=1,
                             max_inflight_bytes=1 << 20),
            lanes={LANE_CODE: WaitingLane(lane_call)})
        connection.connection_made(transport)
        connection.data_received(_frame(1, "take"))
        first = len(transport.writes)  # (at once: no loop turn)
        connection.data_received(_frame(2, "x", code=OTHER_CODE))  # no lane: the handler's
        connection.data_received(_frame(5, "decline"))  # the lane declines: the handler's
        connection.data_received(_frame(6, "bug"))  # SYSTEM_ERROR, written at once too
        writes = len(transport.writes)
        connection.data_received(_frame(3, "wait"))
        connection.data_received(_frame(4, "take"))  # the limit is reached: it waits
        held = (connection.pending_bytes, connection.reading_paused)
        waiting[0].set_result(encode(request(LANE_CODE, {}, opaque=3).make_response(0, "late")))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        decoder = FrameDecoder()
        decoder.feed(b"".join(transport.writes))
        answers = []
        while (command := decoder.next_command()) is not None:
            answers.append((command.opaque, command.code if command.code else command.remark))
        return first, writes, handled, held, answers

    first, writes, handled, held, answers = asyncio.run(run())
    assert first == 1
    assert writes == 4  # (each answer at once, the refusal's too)
    assert handled == [2, 5]
    assert asked == [1, 5, 6, 3, 4]  # (each frame asked of its lane once)
    assert held == (len(_frame(4, "take")), True)
    assert answers == [(1, "single"), (2, "handler"), (5, "handler"), (6, 1), (3, "late"),
                       (4, "single")]


def test_a_lone_request_answer_follows_what_was_written_before_it():
    # Something waits for this loop turn's write (a request of the server's own, say): a lone
    # request's answer goes after it, in the same write, never ahead of it.
    async def run():
        transport = RecordingTransport()
        connection = RemotingConnection(lambda connection, command: None,
                                        lanes={LANE_CODE: WaitingLane(
                                            lambda connection, frame: _answer(frame[2], "a"))})
        connection.connection_made(transport)
        ours = encode(request(OTHER_CODE, {}, opaque=99))
        connection.send_frame(ours)
        connection.data_received(_frame(1, "take"))
        await asyncio.sleep(0)
        return transport.writes, ours

    writes, ours = asyncio.run(run())
    assert b"".join(writes) == ours + _answer(1, "a")
