"""Peers that misbehave on purpose: stalled frames, connection floods, pipelining, not reading.

Each test runs a RemotingServer in-process on loopback with limits small enough to hit in well
under a second, drives the hostile side with raw sockets, and checks both that the server
contains it and that a well-behaved client is still answered meanwhile.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import resource
import select
import socket
import time

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import FrameDecoder, encode, replace, request
from cluster.remoting.codes import ResponseCode
from cluster.remoting.server import NettyServerConfig, RemotingServer

ECHO, GATE, BIG = 1000, 1001, 1002
BIG_BODY = b"x" * (256 << 10)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def frame(code: int, opaque: int, body: bytes = b"", **fields) -> bytes:
    return encode(replace(request(code, fields, body), opaque=opaque))


async def start_server(**limits) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, NettyServerConfig(**limits))
    server.gate = asyncio.Event()

    async def echo(connection, command):
        return command.make_response(ResponseCode.SUCCESS, body=command.body)

    async def gate(connection, command):
        await server.gate.wait()
        return command.make_response(ResponseCode.SUCCESS)

    async def big(connection, command):
        return command.make_response(ResponseCode.SUCCESS, body=BIG_BODY)

    server.register(ECHO, echo)
    server.register(GATE, gate)
    server.register(BIG, big)
    await server.start()
    return server


async def wait_until(predicate, timeout: float = 5.0, what: str = "condition") -> float:
    """Poll ``predicate`` every 10 ms; returns the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def served(client: RemotingClient, server: RemotingServer, tag: str = "ok") -> None:
    response = await client.invoke(server.address, request(ECHO, body=tag.encode()), timeout=2)
    assert response.body == tag.encode()


async def read_answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    """The opaques of the next ``count`` frames; fails if the server closes first."""
    decoder, opaques = FrameDecoder(), []
    while len(opaques) < count:
        data = await asyncio.wait_for(reader.read(65536), 2)
        assert data, f"the server closed the connection after {len(opaques)} answers"
        decoder.feed(data)
        while (command := decoder.next_command()) is not None:
            opaques.append(command.opaque)
    return opaques


def only_connection(server: RemotingServer, besides=()):
    [connection] = [c for c in server.connections if c not in besides]
    return connection


def warnings_from_server(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "cluster.remoting.server" and r.levelno == logging.WARNING]


def test_half_a_frame_then_silence_is_closed_after_the_timeout(caplog):
    caplog.set_level(logging.WARNING, "cluster.remoting")

    async def main():
        server = await start_server(server_channel_partial_frame_timeout_millis=300)
        client = RemotingClient()
        writers = []
        try:
            await served(client, server)
            idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writers += [idle_writer, writer]
            host, port = writer.get_extra_info("sockname")[:2]
            writer.write(frame(ECHO, 1, b"never finished")[:10])
            await writer.drain()
            started = time.monotonic()
            closed = asyncio.ensure_future(reader.read())
            while not closed.done():  # the stalled peer costs nobody else anything
                assert time.monotonic() - started < 2.0, "the stalled peer was never closed"
                await served(client, server, "meanwhile")
                await asyncio.sleep(0.05)
            assert closed.result() == b""
            assert 0.3 <= time.monotonic() - started < 2.0
            # A connection that sent nothing at all is the idle reaper's business, not this one's.
            await asyncio.sleep(0.2)
            assert not idle_reader.at_eof()
            assert len(server.connections) == 2
            return f"{host}:{port}"
        finally:
            for w in writers:
                w.close()
            await client.close()
            await server.stop()

    peer = run(main())
    [record] = warnings_from_server(caplog)
    assert peer in record.getMessage()
    assert "10 bytes of a frame" in record.getMessage()
    assert record.exc_info is None


def test_a_frame_that_keeps_arriving_is_timed_from_its_own_first_byte():
    """Pipelined frames split across reads: each partial frame gets the whole timeout."""
    async def main():
        server = await start_server(server_channel_partial_frame_timeout_millis=300)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            stream = b"".join(frame(ECHO, i, b"abc") for i in (1, 2, 3))
            size = len(stream) // 3
            cuts = [0, size + 5, 2 * size + 5, len(stream)]
            for a, b in itertools.pairwise(cuts):
                writer.write(stream[a:b])  # each piece ends inside a frame
                await writer.drain()
                await asyncio.sleep(0.2)  # 0.6 s in all, 0.2 s per partial frame
            assert await read_answers(reader, 3) == [1, 2, 3]
        finally:
            writer.close()
            await server.stop()

    run(main())


def test_idle_connections_are_still_reaped():
    async def main():
        server = await start_server(server_channel_max_idle_time_seconds=1)
        # (timed from before the connect: the server counts from its accept, which a full run's
        # load may put well before open_connection returns here; and it reads its loop's
        # clock, which uvloop keeps to the millisecond at each iteration's start)
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            assert await asyncio.wait_for(reader.read(), 3) == b""
            assert time.monotonic() - started >= 0.99
        finally:
            writer.close()
            await server.stop()

    run(main())


def _somaxconn() -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except OSError:
        return 128


def test_thousands_of_idle_connections_and_a_burst_do_not_lock_out_a_new_client():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(2000, (soft - 300) // 2)  # both ends of every connection live in this process
    if count < 200:
        pytest.skip(f"RLIMIT_NOFILE {soft} is too low for this test")
    burst = min(1000, count, _somaxconn())

    async def main():
        server = await start_server()
        loop = asyncio.get_running_loop()
        client = RemotingClient()
        socks: list[socket.socket] = []
        try:
            # The loop is blocked while this burst connects: only the kernel's accept queue
            # (the listen backlog) holds them; past it SYNs are dropped and retried after 1 s.
            poller = select.poll()
            for _ in range(burst):
                sock = socket.socket()
                sock.setblocking(False)
                socks.append(sock)
                sock.connect_ex(("127.0.0.1", server.port))
                poller.register(sock, select.POLLOUT)
            connected: set[int] = set()
            deadline = time.monotonic() + 0.8
            while len(connected) < burst and time.monotonic() < deadline:
                for fd, _ in poller.poll(50):
                    connected.add(fd)
                    poller.unregister(fd)
            assert len(connected) == burst, f"{burst - len(connected)} of {burst} still waiting"
            assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for s in socks)
            for _ in range(count - burst):
                sock = socket.socket()
                sock.setblocking(False)
                socks.append(sock)
                await loop.sock_connect(sock, ("127.0.0.1", server.port))
            await wait_until(lambda: len(server.connections) == count, what="every accept")
            started = time.monotonic()
            await served(client, server, "new client")
            assert time.monotonic() - started < 2.0
            assert server.refused_total == 0
        finally:
            for sock in socks:
                sock.close()
            await client.close()
            await server.stop()

    run(main())


def test_connections_over_the_cap_are_closed_at_once_and_logged_once(caplog):
    caplog.set_level(logging.WARNING, "cluster.remoting")

    async def main():
        server = await start_server(server_max_connections=3)
        client = RemotingClient()
        held = []
        try:
            await served(client, server)
            for _ in range(2):
                held.append(await asyncio.open_connection("127.0.0.1", server.port))
            await wait_until(lambda: len(server.connections) == 3, what="three connections")
            for _ in range(20):  # a flood over the cap: each closed, one log line in all
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                assert await asyncio.wait_for(reader.read(), 2) == b""
                writer.close()
            assert server.refused_total == 20
            await served(client, server, "still served")
            # Below the cap again, a newcomer is accepted.
            held.pop()[1].close()
            await wait_until(lambda: len(server.connections) == 2, what="a slot to free")
            newcomer = RemotingClient()
            try:
                await served(newcomer, server, "newcomer")
            finally:
                await newcomer.close()
        finally:
            for _, writer in held:
                writer.close()
            await client.close()
            await server.stop()

    run(main())
    [record] = warnings_from_server(caplog)
    assert "refused 1 connection(s), latest from 127.0.0.1:" in record.getMessage()
    assert "serverMaxConnections=3" in record.getMessage()


@pytest.mark.parametrize(("limits", "body"), [
    ({"server_channel_max_inflight_requests": 8}, b""),
    ({"server_channel_max_inflight_bytes": 64 << 10}, b"b" * (16 << 10)),
])
def test_requests_processed_at_once_per_connection_are_bounded(limits, body):
    async def main():
        server = await start_server(**limits)
        client = RemotingClient()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            frames = [frame(GATE, i, body) for i in range(1, 101)]
            if "server_channel_max_inflight_bytes" in limits:
                expected = math.ceil(limits["server_channel_max_inflight_bytes"] / len(frames[0]))
            else:
                expected = limits["server_channel_max_inflight_requests"]
            writer.write(b"".join(frames))  # a pipeline of 100 requests that all block
            await writer.drain()
            connection = only_connection(server)
            await wait_until(lambda: connection.inflight == expected, what="the limit")
            assert connection.reading_paused
            await served(client, server, "other connections are not held up")
            assert connection.inflight == expected
            server.gate.set()
            assert sorted(await read_answers(reader, 100)) == list(range(1, 101))
            assert not connection.reading_paused
        finally:
            writer.close()
            await client.close()
            await server.stop()

    run(main())


def _raw_socket_that_does_not_read() -> socket.socket:
    sock = socket.socket()
    # Small kernel buffers on our side, so the server's limits are reached quickly.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    sock.setblocking(False)
    return sock


def test_a_peer_that_pipelines_and_never_reads_is_paused_with_bounded_buffers():
    high = 64 << 10
    flood_cap = 48 << 20  # what an unbounded server would let us push

    async def main():
        server = await start_server(write_buffer_high_water_mark=high,
                                    write_buffer_low_water_mark=16 << 10)
        loop = asyncio.get_running_loop()
        client = RemotingClient()
        sock = _raw_socket_that_does_not_read()
        try:
            await loop.sock_connect(sock, ("127.0.0.1", server.port))
            batch = b"".join(frame(ECHO, i, os.urandom(16 << 10)) for i in range(64))
            pending = memoryview(batch)
            sent = stuck = 0
            # Push until the server stops taking bytes for 0.2 s (or the flood cap is reached).
            while sent < flood_cap and stuck < 10:
                moved = 0
                try:
                    while True:
                        n = sock.send(pending)
                        moved += n
                        pending = pending[n:] if n < len(pending) else memoryview(batch)
                except BlockingIOError:
                    pass
                sent += moved
                stuck = 0 if moved else stuck + 1
                await asyncio.sleep(0.02)
            assert sent < flood_cap, "the server kept reading a peer that does not read"
            connection = only_connection(server, besides=())
            assert connection.reading_paused
            # One read's worth of answers may land after the pause: 256 KiB, plus the frame
            # that crossed the mark.
            assert connection.write_buffer_size <= high + (512 << 10)
            assert connection.pending_bytes <= 512 << 10
            assert connection.inflight == 0
            await served(client, server, "others are served")
        finally:
            sock.close()
            await client.close()
            await server.stop()

    run(main())


def test_a_peer_whose_answers_pile_up_past_the_hard_limit_is_dropped(caplog):
    caplog.set_level(logging.WARNING, "cluster.remoting")

    async def main():
        server = await start_server(write_buffer_high_water_mark=64 << 10,
                                    write_buffer_low_water_mark=16 << 10,
                                    server_channel_max_write_buffer_bytes=1 << 20)
        loop = asyncio.get_running_loop()
        client = RemotingClient()
        sock = _raw_socket_that_does_not_read()
        try:
            await served(client, server)
            await loop.sock_connect(sock, ("127.0.0.1", server.port))
            # 64 small requests in one read, each answered with 256 KiB: 16 MiB of answers.
            await loop.sock_sendall(sock, b"".join(frame(BIG, i) for i in range(1, 65)))
            await wait_until(lambda: len(server.connections) == 1, what="the drop")
            await served(client, server, "others are served")
        finally:
            sock.close()
            await client.close()
            await server.stop()

    run(main())
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "does not read its responses" in record.getMessage()
    assert record.exc_info is None


def test_a_client_pipelining_large_requests_through_tight_limits_gets_every_answer():
    """Server flow control must not deadlock a client that writes more than it has read."""
    async def main():
        server = await start_server(write_buffer_high_water_mark=64 << 10,
                                    write_buffer_low_water_mark=16 << 10,
                                    server_channel_max_inflight_requests=4)
        client = RemotingClient()
        try:
            bodies = [os.urandom(64 << 10) for _ in range(200)]
            answers = await asyncio.gather(*(
                client.invoke(server.address, request(ECHO, body=b), timeout=10) for b in bodies))
            assert [a.body for a in answers] == bodies
            await client.invoke_oneway(server.address, request(ECHO))
            await served(client, server)
        finally:
            await client.close()
            await server.stop()

    run(main())
