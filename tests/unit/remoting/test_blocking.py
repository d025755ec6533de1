"""The blocking client against a real asyncio server on loopback (in a thread)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cluster.client.pull import pull_request
from cluster.remoting.blocking import BlockingRemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import PullSysFlag, RequestCode, ResponseCode
from cluster.remoting.errors import RemotingConnectError
from cluster.remoting.server import RemotingServer


@pytest.fixture
def server():
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    async def echo(connection, command):
        # A request of the server's own first, which the blocking client must skip.
        connection.invoke_oneway(request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"g": "x"}))
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

