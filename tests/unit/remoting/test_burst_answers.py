"""A burst of pipelined requests: answered without a task each, in few writes (issue 14)."""

from __future__ import annotations

import asyncio

import pytest

from cluster.remoting.codec import FrameDecoder, encode, request
from cluster.remoting.connection import CORK_FRAMES, RemotingConnection
from tests.unit.remoting.transports import RecordingTransport


def _answers(writes: list[bytes]) -> list[int]:
    decoder = FrameDecoder()
    decoder.feed(b"".join(writes))
    opaques = []
    while (command := decoder.next_command()) is not None:
        opaques.append(command.opaque)
    return opaques


def test_answers_at_once_take_no_task_and_leave_in_few_writes():
    async def scenario():
        tasks_before = len(asyncio.all_tasks())
        seen_tasks = []

        def handler(connection, command):  # a processor that answers at once
            seen_tasks.append(len(asyncio.all_tasks()) - tasks_before)
            return command.make_response(0)

        connection = RemotingConnection(handler)
        transport = RecordingTransport()
        connection.connection_made(transport)
        burst = b"".join(encode(request(1000, {"n": i}, opaque=i + 1)) for i in range(10))
        connection.data_received(burst)
        await asyncio.sleep(0)
        return seen_tasks, transport.writes, connection.inflight

    seen_tasks, writes, inflight = asyncio.run(scenario())
    assert seen_tasks == [0] * 10
    assert inflight == 0
    assert _answers(writes) == list(range(1, 11))  # every answer, in order
    assert len(writes) == -(-10 // CORK_FRAMES)  # one write per CORK_FRAMES answers


def test_an_answer_that_must_wait_gets_a_task_and_still_arrives():
    async def scenario():
        release = asyncio.Event()

        async def later(command):
            await release.wait()
            return command.make_response(0, "late")

        def handler(connection, command):
            return later(command) if command.code == 1001 else command.make_response(0)

        connection = RemotingConnection(handler)
        transport = RecordingTransport()
        connection.connection_made(transport)
        connection.data_received(encode(request(1001, opaque=1)) + encode(request(1000, opaque=2)))
        await asyncio.sleep(0)
        first = _answers(transport.writes)
        waiting = connection.inflight
        release.set()
        for _ in range(3):
            await asyncio.sleep(0)
        return first, waiting, _answers(transport.writes)

    first, waiting, answers = asyncio.run(scenario())
    assert first == [2]  # the quick one did not wait for the slow one
    assert waiting == 1
    assert answers == [2, 1]


def test_the_answers_to_a_read_leave_before_what_its_handling_scheduled():
    # A broker's send schedules the dispatch of what it appended (call_soon); the sender waits
    # on the answer, nobody on the dispatch: the answer must be written first, at the read's end.
    async def scenario():
        order = []
        transport = RecordingTransport()
        real_write = transport.write

        def write(data):
            order.append("answer")
            real_write(data)

        transport.write = write

        def handler(connection, command):
            asyncio.get_running_loop().call_soon(order.append, "dispatch")
            return command.make_response(0)

        connection = RemotingConnection(handler)
        connection.connection_made(transport)
        connection.data_received(encode(request(1000, opaque=1)))
        written_during_read = list(order)
        await asyncio.sleep(0)
        return written_during_read, order

    during, order = asyncio.run(scenario())
    assert during == ["answer"]  # written before data_received returned
    assert order == ["answer", "dispatch"]


def test_answers_corked_in_a_read_that_fails_midway_are_still_written():
    # Whatever ends a read's handling early, nothing corked may wait for a write never coming.
    async def scenario():
        connection = RemotingConnection(lambda connection, command: command.make_response(0))
        transport = RecordingTransport()
        connection.connection_made(transport)
        decoder = connection._decoder
        real_next = decoder.next_frame
        calls = []

        def next_frame():
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("injected: the read's handling stopped")
            return real_next()

        decoder.next_frame = next_frame
        try:
            connection.data_received(encode(request(1000, opaque=7)) + encode(request(1000, opaque=8)))
        except RuntimeError:
            pass
        return transport.writes

    assert _answers(asyncio.run(scenario())) == [7]


def test_an_answer_given_as_a_future_takes_no_task_and_a_closed_connection_drops_it():
    async def scenario():
        loop = asyncio.get_running_loop()
        futures = []

        def handler(connection, command):  # SYNC sends: answered when their burst is durable
            futures.append(loop.create_future())
            return futures[-1]

        tasks_before = len(asyncio.all_tasks())
        connection = RemotingConnection(handler)
        transport = RecordingTransport()
        connection.connection_made(transport)
        connection.data_received(encode(request(1000, opaque=1)) + encode(request(1000, opaque=2)))
        tasks = len(asyncio.all_tasks()) - tasks_before
        waiting = connection.inflight
        futures[1].set_result(encode(request(1000, opaque=2).make_response(0)))
        futures[0].set_exception(RuntimeError("a processor bug"))
        for _ in range(3):
            await asyncio.sleep(0)
        answers = _answers(transport.writes)
        errors = [c for c in _decoded(transport.writes) if c.opaque == 1]
        # A third request whose connection closes before it is answered: nothing is written.
        connection.data_received(encode(request(1000, opaque=3)))
        connection.connection_lost(None)
        for _ in range(3):
            await asyncio.sleep(0)
        return tasks, waiting, answers, errors, futures[2].cancelled(), connection.inflight, \
            _answers(transport.writes)

    tasks, waiting, answers, errors, cancelled, inflight, final = asyncio.run(scenario())
    assert tasks == 0
    assert waiting == 2
    assert sorted(answers) == [1, 2]
    assert errors[0].code == 1  # SYSTEM_ERROR with a sentence, not Python's text
    assert "see its log" in errors[0].remark
    assert cancelled
    assert inflight == 0
    assert 3 not in final


def _decoded(writes: list[bytes]) -> list:
    decoder = FrameDecoder()
    decoder.feed(b"".join(writes))
    commands = []
    while (command := decoder.next_command()) is not None:
        commands.append(command)
    return commands


def test_a_lone_request_leaves_at_once_and_concurrent_ones_share_a_write():
    # A lone sender's request is written in invoke itself: waiting for the end of the loop's
    # iteration would cost it one more iteration a send. Requests made together still leave
    # in one write.
    async def scenario():
        connection = RemotingConnection(lambda connection, command: None)
        transport = RecordingTransport()
        connection.connection_made(transport)
        lone = asyncio.ensure_future(connection.invoke(request(10, opaque=0), 5.0))
        await asyncio.sleep(0)  # (the task runs up to its wait: no iteration after it)
        written_in_call = len(transport.writes)
        together = [asyncio.ensure_future(connection.invoke(request(11), 5.0))
                    for _ in range(CORK_FRAMES - 1)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        writes = list(transport.writes)
        for command in _decoded(writes):  # answer everything
            response = command.make_response(0)
            connection.data_received(encode(response))
        await asyncio.gather(lone, *together)
        return written_in_call, writes

    written_in_call, writes = asyncio.run(scenario())
    assert written_in_call == 1
    assert len(writes) == 2  # the lone one, then the others in one write
    assert len(_decoded(writes[1:])) == CORK_FRAMES - 1


@pytest.mark.parametrize("gathers", [True, False])
def test_a_big_body_leaves_as_it_is_beside_its_header_and_small_answers_still_join(gathers):
    """A pull's ~1 MiB answer is not copied to join its header, nor to join the answers corked
    with it: a transport whose writelines is a writev (uvloop's) gets the body object itself;
    any other gets them joined, as before."""
    big = bytes(range(256)) * 1024  # 256 KiB

    async def scenario():
        def handler(connection, command):
            body = big if command.code == 1001 else b"small"
            return command.make_response(0, body=body)

        connection = RemotingConnection(handler)
        transport = RecordingTransport()
        connection.connection_made(transport)
        assert not connection._gathers  # (not uvloop's)
        connection._gathers = gathers
        connection.data_received(encode(request(1000, opaque=1)) + encode(request(1001, opaque=2))
                                 + encode(request(1000, opaque=3)))
        await asyncio.sleep(0)
        connection.data_received(encode(request(1000, opaque=4)) + encode(request(1000, opaque=5)))
        await asyncio.sleep(0)
        return transport

    transport = asyncio.run(scenario())
    assert _answers(transport.writes) == [1, 2, 3, 4, 5]
    if gathers:
        [gathered] = transport.gathered  # the first read's answers: big, so as they are
        assert any(part is big for part in gathered)
    else:
        assert transport.gathered == []
    decoder = FrameDecoder()
    decoder.feed(b"".join(transport.writes))
    assert [decoder.next_command().body for _ in range(5)] == [b"small", big, b"small",
                                                             b"small", b"small"]
    assert len(transport.writes) == 2  # the second read's small answers: joined, one write
