"""The asyncio adapter against a real server on loopback."""

from __future__ import annotations

import asyncio
import socket

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import ResponseCode
from cluster.remoting.errors import RemotingConnectError, RemotingTimeoutError
from cluster.remoting.server import RemotingServer


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _server() -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0)
    seen_oneway = asyncio.Event()

    async def echo(connection, command):
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"echo": command.field("x")},
                                     body=command.body[::-1])

    async def slow(connection, command):
        await asyncio.sleep(float(command.field("seconds")))
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"slow": "done"})

    async def broken(connection, command):
        raise ValueError("processor bug")

    async def oneway(connection, command):
        seen_oneway.set()
        return command.make_response(ResponseCode.SUCCESS)  # must not be sent

    async def call_back(connection, command):
        answer = await connection.invoke(request(40, {"q": "?"}), 5)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"client": answer.field("a")})

    server.register(1000, echo)
    server.register(1001, slow)
    server.register(1002, broken)
    server.register(1003, oneway)
    server.register(1004, call_back)

    async def too_big(connection, command):
        return command.make_response(ResponseCode.SUCCESS, body=bytes(17 * 1024 * 1024))

    server.register(1005, too_big)
    server.seen_oneway = seen_oneway
    await server.start()
    return server


def test_request_and_response_round_trip():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            response = await client.invoke(server.address, request(1000, {"x": 5}, b"abc"))
            assert response.code == 0
            assert response.field("echo") == "5"
            assert response.body == b"cba"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_unknown_code_is_not_supported_and_the_connection_stays_open():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            response = await client.invoke(server.address, request(4242))
            assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert "4242" in response.remark
            assert (await client.invoke(server.address, request(1000, {"x": 1}))).code == 0
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_processor_error_answers_system_error():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            response = await client.invoke(server.address, request(1002))
            assert response.code == ResponseCode.SYSTEM_ERROR
            # A sentence for the peer; Python's exception text stays in the server's log.
            assert "failed to process request code 1002" in response.remark
            assert "processor bug" not in response.remark
            assert "Error" not in response.remark
            # The server goes on.
            assert (await client.invoke(server.address, request(1002))).code == ResponseCode.SYSTEM_ERROR
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_an_answer_over_the_frame_limit_becomes_a_system_error_sentence():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            response = await client.invoke(server.address, request(1005), timeout=10)
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "cannot be sent" in response.remark
            assert (await client.invoke(server.address, request(1000, {"x": 1}))).code == 0
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_oneway_requests_get_no_response():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            await client.invoke_oneway(server.address, request(1003))
            await asyncio.wait_for(server.seen_oneway.wait(), 5)
            # The next request's response is its own: nothing stray was queued for the oneway.
            response = await client.invoke(server.address, request(1000, {"x": "after"}))
            assert response.field("echo") == "after"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_late_reply_after_timeout_is_dropped():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(server.address, request(1001, {"seconds": 0.3}), timeout=0.05)
            await asyncio.sleep(0.4)  # the slow reply arrives now and must be discarded
            response = await client.invoke(server.address, request(1000, {"x": "mine"}))
            assert response.field("echo") == "mine"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_each_request_times_out_at_its_own_deadline_whatever_came_before():
    # One timer a connection, at the earliest deadline: a short timeout after a long one must
    # not wait for the long one, and the long one still ends at its own.
    async def main():
        server = await _server()
        client = RemotingClient()
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            slow = asyncio.ensure_future(
                client.invoke(server.address, request(1001, {"seconds": 3}), timeout=0.6))
            await asyncio.sleep(0.05)
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(server.address, request(1001, {"seconds": 3}), timeout=0.1)
            assert loop.time() - started < 0.45
            assert not slow.done()
            with pytest.raises(RemotingTimeoutError):
                await slow
            assert 0.55 < loop.time() - started < 1.5
            # Answered requests leave no deadline behind, and the timer is armed again.
            response = await client.invoke(server.address, request(1000, {"x": "next"}), 1.0)
            assert response.field("echo") == "next"
            connection = next(iter(client._connections.values()))
            assert not connection._deadlines
            assert not connection._pending
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_server_can_call_the_client_on_the_same_connection():
    async def client_handler(connection, command):
        assert command.code == 40
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"a": "from-client"})

    async def main():
        server = await _server()
        client = RemotingClient(client_handler)
        try:
            response = await client.invoke(server.address, request(1004))
            assert response.field("client") == "from-client"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_garbage_closes_only_that_connection():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            assert (await client.invoke(server.address, request(1000, {"x": 1}))).code == 0
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"\xff\xff\xff\xff garbage that is no frame")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
            writer.close()
            response = await client.invoke(server.address, request(1000, {"x": 2}))
            assert response.field("echo") == "2"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_waiters_fail_when_the_server_goes_away():
    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            pending = asyncio.ensure_future(
                client.invoke(server.address, request(1001, {"seconds": 5}), timeout=10))
            await asyncio.sleep(0.1)
            await server.stop()
            with pytest.raises(RemotingConnectError):
                await pending
        finally:
            await client.close()

    run(main())


def test_connecting_to_nothing_is_a_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connection refused

    async def main():
        client = RemotingClient()
        with pytest.raises(RemotingConnectError):
            await client.invoke(f"127.0.0.1:{port}", request(1000))

    run(main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_big_and_small_answers_pipelined_on_one_connection_arrive_whole_and_in_order(loop):
    # Answers of a few MiB (a pull's records) with small ones in between, over a real socket
    # on each loop a node may run: every answer must still be the frame it was.
    factory = None
    if loop == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop

    async def main():
        server = await _server()
        client = RemotingClient()
        try:
            bodies = [bytes([i]) * (3 << 20) if i % 3 == 0 else bytes([i]) * 100
                      for i in range(12)]
            answers = await asyncio.gather(*(
                client.invoke(server.address, request(1000, {"x": i}, body))
                for i, body in enumerate(bodies)))
            for i, (answer, body) in enumerate(zip(answers, bodies, strict=True)):
                assert answer.field("echo") == str(i)
                assert answer.body == body[::-1]
        finally:
            await client.close()
            await server.stop()

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(main(), 30))
