"""DeferredAnswer: a handler's answer given later is written in the call that gives it, counted
in flight until then, and dropped when the connection closed first."""

from __future__ import annotations

import asyncio

from cluster.remoting.codec import FrameDecoder, encode, request
from cluster.remoting.connection import RemotingConnection
from cluster.remoting.deferred_answer import DeferredAnswer
from cluster.remoting.flow import FlowControl
from tests.unit.remoting.transports import RecordingTransport


def _answers(writes: list[bytes]) -> list[tuple[int, int, str | None]]:
    decoder = FrameDecoder()
    decoder.feed(b"".join(writes))
    out = []
    while (command := decoder.next_command()) is not None:
        out.append((command.opaque, command.code, command.remark))
    return out


def _connection(owed: list[DeferredAnswer]):
    def handler(connection, command):
        answer = DeferredAnswer()
        owed.append(answer)
        return answer

    connection = RemotingConnection(handler)
    transport = RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


def test_an_answer_given_later_is_written_in_that_call_and_no_longer_counted():
    async def scenario():
        owed: list[DeferredAnswer] = []
        connection, transport = _connection(owed)
        connection.data_received(encode(request(1000, opaque=7)) + encode(request(1000, opaque=8)))
        await asyncio.sleep(0)
        assert connection.inflight == 2
        assert transport.writes == []
        owed[1].answer(owed[1].command.make_response(0, "second"))
        # Given, not scheduled: corked for this iteration's one write, in flight no more.
        assert connection.inflight == 1
        assert connection.write_buffer_size > 0
        owed[0].fail(RuntimeError("a bug"))
        owed[0].answer(owed[0].command.make_response(0, "too late"))  # once only
        await asyncio.sleep(0)
        return transport.writes, connection.inflight

    writes, inflight = asyncio.run(scenario())
    assert inflight == 0
    answers = _answers(writes)
    assert [a[:2] for a in answers] == [(8, 0), (7, 1)]  # the failure is SYSTEM_ERROR
    assert answers[0][2] == "second"
    assert "failed to process" in answers[1][2]


def _settled_in_its_handler(settle, opaque: int) -> tuple[list[bytes], int]:
    """What a connection wrote, and still counts in flight, for a request whose handler settles
    its DeferredAnswer (``settle(answer, command)``) before returning it."""
    async def scenario():
        def handler(connection, command):
            answer = DeferredAnswer()
            settle(answer, command)
            return answer

        connection = RemotingConnection(handler)
        transport = RecordingTransport()
        connection.connection_made(transport)
        connection.data_received(encode(request(1000, opaque=opaque)))
        await asyncio.sleep(0)
        return transport.writes, connection.inflight

    return asyncio.run(scenario())


def test_an_answer_given_before_its_connection_took_it_is_written_when_it_does():
    writes, inflight = _settled_in_its_handler(
        lambda answer, command: answer.answer(command.make_response(0, "early")), 3)
    assert inflight == 0
    assert _answers(writes) == [(3, 0, "early")]


def test_a_failure_given_before_its_connection_took_it_is_a_system_error_for_its_request():
    writes, inflight = _settled_in_its_handler(
        lambda answer, command: answer.fail(RuntimeError("a bug")), 4)
    assert inflight == 0
    [(opaque, code, remark)] = _answers(writes)
    assert (opaque, code) == (4, 1)  # SYSTEM_ERROR, to the request that failed
    assert "failed to process" in remark


def test_an_answer_after_its_connection_closed_is_dropped():
    async def scenario():
        owed: list[DeferredAnswer] = []
        connection, transport = _connection(owed)
        connection.data_received(encode(request(1000, opaque=5)))
        await asyncio.sleep(0)
        connection.connection_lost(None)
        assert owed[0].cancelled()
        assert connection.inflight == 0  # nothing left counted against a closed connection
        owed[0].answer(owed[0].command.make_response(0))
        await asyncio.sleep(0)
        return transport.writes

    assert asyncio.run(scenario()) == []


def test_answers_given_before_return_under_a_tight_in_flight_limit_do_not_recurse():
    # Answered already when its connection takes it: written as an answer at once, not through
    # the deferred path (which would resume reading, and handle the next frame, inside it).
    async def scenario():
        def handler(connection, command):
            answer = DeferredAnswer()
            answer.answer(command.make_response(0))
            return answer

        flow = FlowControl(write_high_water=1 << 30, write_low_water=1 << 29,
                           max_write_buffer=1 << 31, max_inflight_requests=1,
                           max_inflight_bytes=1 << 30)
        connection = RemotingConnection(handler, flow=flow)
        transport = RecordingTransport()
        connection.connection_made(transport)
        connection.data_received(b"".join(encode(request(1000, opaque=i + 1)) for i in range(3000)))
        await asyncio.sleep(0)
        return transport.writes, connection.inflight

    writes, inflight = asyncio.run(scenario())
    assert inflight == 0
    assert [a[0] for a in _answers(writes)] == list(range(1, 3001))
