"""The blocking client against a real asyncio server on loopback (in a thread)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from cluster.client.pull import pull_request
from cluster.remoting import codec
from cluster.remoting.blocking import BlockingRemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import PullSysFlag, RequestCode, ResponseCode
from cluster.remoting.errors import RemoteProtocolError, RemotingConnectError
from cluster.remoting.server import RemotingServer


@pytest.fixture(params=["asyncio", "uvloop"])
def server(request):
    # (both loops: a big answer leaves through uvloop's writelines, asyncio's joined)
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    async def echo(connection, command):
        # A request of the server's own first, which the blocking client must skip.
        connection.invoke_oneway(codec.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                               {"g": "x"}))
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"x": command.field("x")},
                                     body=command.body[::-1])

    async def start():
        srv = RemotingServer("127.0.0.1", 0)
        srv.register(1000, echo)
        await srv.start()
        holder["server"] = srv
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert ready.wait(10)
    yield holder["server"]
    asyncio.run_coroutine_threadsafe(holder["server"].stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_requests_are_answered_in_turn(server):
    with BlockingRemotingClient(server.address, timeout=5) as client:
        for n in range(3):
            answer = client.invoke(request(1000, {"x": n}, b"abc"))
            assert answer.field("x") == str(n)
            assert answer.body == b"cba"


def test_a_closed_or_missing_server_is_a_connect_error(server):
    with pytest.raises(RemotingConnectError):
        BlockingRemotingClient("127.0.0.1:1", timeout=2)


def test_the_pull_request_says_its_flags_once():
    plain = pull_request("TOOLS_CONSUMER", "T", 1, 5, 32)
    assert int(plain.field("sysFlag")) == PullSysFlag.SUBSCRIPTION
    held = pull_request("g", "T", 1, 5, suspend_ms=15_000, commit_offset=3)
    assert int(held.field("sysFlag")) == (PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND
                                         | PullSysFlag.COMMIT_OFFSET)
    assert held.field("commitOffset") == "3"


def test_a_big_body_arrives_whole_and_the_next_answer_after_it(server):
    body = bytes(range(256)) * (12 << 10)  # 3 MiB: many reads of the socket
    with BlockingRemotingClient(server.address, timeout=5) as client:
        answer = client.invoke(request(1000, {"x": 1}, body))
        assert answer.body == body[::-1]
        assert client.invoke(request(1000, {"x": 2}, b"next")).body == b"txen"




def test_bodies_are_read_where_the_caller_says_and_the_servers_own_requests_are_not(server):
    """The echo server sends a request of its own before each answer: only the answers'
    bodies go where the caller says, and each answer's body is exactly the buffer given."""
    buffer = bytearray(64)
    used: list[int] = []

    def body_into(length: int) -> memoryview:
        start = sum(used)
        used.append(length)
        return memoryview(buffer)[start:start + length]

    with BlockingRemotingClient(server.address, timeout=5) as client:
        first = client.invoke(request(1000, {"x": 1}, b"abc"), body_into=body_into)
        second = client.invoke(request(1000, {"x": 2}, b"defg"), body_into=body_into)
        third = client.invoke(request(1000, {"x": 3}, b"hi"))  # (bytes, as before)
    assert (bytes(first.body), bytes(second.body), third.body) == (b"cba", b"gfed", b"ih")
    assert used == [3, 4]
    assert bytes(buffer[:7]) == b"cbagfed"  # side by side, as a batch's pulls lie


@pytest.mark.parametrize("frame", [
    (2).to_bytes(4, "big") + b"\0\0\0\0",                 # shorter than its header mark
    (1 << 30).to_bytes(4, "big") + b"\0\0\0\0",           # over the frame limit
    (8).to_bytes(4, "big") + (200).to_bytes(4, "big"),      # a header longer than its frame
    (6).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"{]",  # a header that does not parse
])
def test_a_malformed_answer_is_a_protocol_error_and_closes_the_connection(frame):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_garbage():
            peer, _ = listener.accept()
            with peer:
                peer.recv(1 << 16)
                peer.sendall(frame)
                peer.recv(1)  # until the client closes

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        client = BlockingRemotingClient(address, timeout=5)
        with pytest.raises(RemoteProtocolError):
            client.invoke(request(1000, {"x": 1}))
        assert client.sock.fileno() == -1  # closed: nothing after it could be told apart
        thread.join(5)
