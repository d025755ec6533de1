"""The loop kept polling for a quick peer (cluster/remoting/busy_poll.py): when it asks, how
long, and that it stops: on the peer's frame, at its limit, while an answer waits on another
thread, and never for a slow peer."""

from __future__ import annotations

import asyncio
import math

import pytest

from cluster.broker.config import load_broker_config
from cluster.client.instance import MQClientInstance
from cluster.remoting import busy_poll
from cluster.remoting.busy_poll import BusyPoller
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import ResponseCode
from cluster.remoting.deferred_answer import DeferredAnswer
from cluster.remoting.errors import RemotingConnectError
from cluster.remoting.server import NettyServerConfig, RemotingServer, ServerConfigError

ECHO = 1000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeConnection:
    """What the poller keeps on a connection, with a switch for ``keeps_polling``."""

    def __init__(self, loop) -> None:
        self._loop = loop
        self._written_at = 0.0
        self._gap = math.inf
        self.free = True

    def keeps_polling(self) -> bool:
        return self.free


def polling_for_a_quick_peer() -> tuple[BusyPoller, FakeConnection]:
    """A poller asked to poll, on the running loop, for a peer 10 µs away."""
    poller = BusyPoller(200)
    connection = FakeConnection(asyncio.get_running_loop())
    connection._gap = 10e-6
    poller.wrote(connection)
    return poller, connection


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(busy_poll, "_clock", clock)
    return clock


def test_gaps_are_averaged_and_only_a_quick_peer_is_polled_for(clock):
    loop = asyncio.new_event_loop()
    try:
        poller = BusyPoller(200)
        connection = FakeConnection(loop)
        poller.wrote(connection)  # no gap known yet: no poll
        assert not poller.polling
        clock.now += 50e-6
        poller.read(connection)
        assert connection._gap == pytest.approx(50e-6)  # the first gap as it is
        poller.read(connection)  # a read with no write before it: no gap
        assert connection._gap == pytest.approx(50e-6)
        poller.wrote(connection)
        assert poller.polling
        assert poller._until == pytest.approx(clock.now + 120e-6)
        clock.now += 450e-6
        poller.read(connection)
        assert connection._gap == pytest.approx(50e-6 + (450e-6 - 50e-6) / 4)  # 150 µs
        assert poller._until == 0.0  # its frame came: the poll kept for it ends
        clock.now += 1e-3
        for _ in range(3):  # a slow peer: the average passes the limit, no poll is asked
            poller.wrote(connection)
            clock.now += 1e-3
            poller.read(connection)
        assert connection._gap > 200e-6
        loop.run_until_complete(asyncio.sleep(0))  # the round scheduled above finds nothing due
        assert not poller.polling
        poller.wrote(connection)
        assert not poller.polling
    finally:
        loop.close()


def test_the_poll_never_outlasts_the_limit(clock):
    loop = asyncio.new_event_loop()
    try:
        poller = BusyPoller(200)
        connection = FakeConnection(loop)
        connection._gap = 150e-6  # twice that and the slack would be 320 µs
        poller.wrote(connection)
        assert poller._until == pytest.approx(clock.now + 200e-6)
    finally:
        loop.close()


def test_rounds_go_on_until_due_then_stop(clock):
    async def main() -> None:
        poller, _ = polling_for_a_quick_peer()
        for _ in range(5):  # the clock stands still: each iteration runs a round again
            await asyncio.sleep(0)
        assert poller.polling
        assert poller.rounds >= 4
        clock.now += 1e-3  # past due: the next round is the last
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not poller.polling
        rounds = poller.rounds
        await asyncio.sleep(0.01)
        assert poller.rounds == rounds  # nothing runs while idle

    asyncio.run(main())


def test_an_answer_waiting_on_another_thread_stops_the_rounds(clock):
    async def main() -> None:
        poller, connection = polling_for_a_quick_peer()
        await asyncio.sleep(0)
        assert poller.polling
        connection.free = False  # (a SYNC_FLUSH send's answer waits for the flush thread)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not poller.polling

    asyncio.run(main())


def test_a_client_and_server_poll_while_exchanging_and_stop_when_idle():
    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0, NettyServerConfig(server_busy_poll_micros=50_000))

        def echo(connection, command):
            return command.make_response(ResponseCode.SUCCESS, body=command.body)

        server.register(ECHO, echo)
        await server.start()
        client = RemotingClient(busy_poll_micros=50_000)  # (polled for even on a loaded machine)
        try:
            assert server.busy_poll is not None
            assert client.busy_poll is not None
            for index in range(200):
                response = await client.invoke(server.address,
                                               request(ECHO, body=b"%d" % index), timeout=2)
                assert response.body == b"%d" % index
            (connection,) = client._connections.values()
            assert connection._gap < 0.1  # a loopback round trip, measured
            (accepted,) = server.connections
            assert accepted._gap < 0.1  # and the client's turnaround, on the server's side
            assert client.busy_poll.rounds > 0  # the loop polled while it waited
            await asyncio.sleep(0.2)  # (past 2 x 50 ms)
            assert not client.busy_poll.polling
            assert not server.busy_poll.polling
            rounds = client.busy_poll.rounds + server.busy_poll.rounds
            await asyncio.sleep(0.05)
            assert client.busy_poll.rounds + server.busy_poll.rounds == rounds
        finally:
            await client.close()
            await server.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_limit_is_a_setting_and_zero_turns_it_off():
    assert RemotingClient(busy_poll_micros=0).busy_poll is None
    assert MQClientInstance("127.0.0.1:9876", busy_poll_micros=0).remoting.busy_poll is None
    assert MQClientInstance("127.0.0.1:9876").remoting.busy_poll is not None
    config, _, _ = load_broker_config({"serverBusyPollMicros": "0"})
    assert config.server_busy_poll_micros == 0
    assert RemotingServer("127.0.0.1", 0, config).busy_poll is None
    config, _, _ = load_broker_config({})
    assert config.server_busy_poll_micros == busy_poll.DEFAULT_LIMIT_MICROS
    with pytest.raises(ServerConfigError, match="serverBusyPollMicros"):
        NettyServerConfig(server_busy_poll_micros=-1).check()
    with pytest.raises(ServerConfigError, match=r"serverBusyPollMicros=100001 .* not exceed"):
        NettyServerConfig(server_busy_poll_micros=busy_poll.MAX_LIMIT_MICROS + 1).check()
    NettyServerConfig(server_busy_poll_micros=busy_poll.MAX_LIMIT_MICROS).check()
    for hostile in (-1, busy_poll.MAX_LIMIT_MICROS + 1, 10**30, 1.5, "200", None):
        with pytest.raises(ValueError, match="busy poll's limit"):
            RemotingClient(busy_poll_micros=hostile)  # type: ignore[arg-type]


def test_a_poller_used_again_under_a_new_loop_polls_there(clock):
    poller = BusyPoller(200)

    async def ask() -> None:
        connection = FakeConnection(asyncio.get_running_loop())
        connection._gap = 10e-6
        poller.wrote(connection)

    asyncio.run(ask())  # the loop closes with a round still scheduled on it
    assert poller.polling

    async def again() -> None:
        await ask()
        await asyncio.sleep(0)
        rounds = poller.rounds
        await asyncio.sleep(0)
        assert poller.rounds > rounds

    asyncio.run(again())


def test_writes_that_get_no_frame_back_stop_the_polling(clock):
    loop = asyncio.new_event_loop()
    try:
        poller = BusyPoller(200)
        connection = FakeConnection(loop)
        connection._gap = 10e-6
        for _ in range(3):  # oneway sends 1 ms apart: no frame comes in any window
            poller.wrote(connection)
            clock.now += 1e-3
        poller.wrote(connection)
        assert connection._gap > 200e-6
        poller._running = False  # (the round scheduled at the first write is not run here)
        poller.wrote(connection)
        assert not poller.polling
    finally:
        loop.close()


def test_a_round_that_raises_leaves_the_poller_ready_to_poll_again(clock):
    def broken() -> bool:
        raise RuntimeError("keeps_polling broke")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _, context: errors.append(context))
        poller, connection = polling_for_a_quick_peer()
        connection.keeps_polling = broken  # type: ignore[method-assign]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert errors
        assert not poller.polling  # (else no write would ever schedule a round)
        del connection.keeps_polling
        poller.wrote(connection)
        await asyncio.sleep(0)
        rounds = poller.rounds
        await asyncio.sleep(0)
        assert poller.rounds > rounds

    asyncio.run(main())


def test_a_brokers_outgoing_clients_follow_its_setting():
    from types import SimpleNamespace

    from cluster.broker.registration import BrokerRegistration
    from cluster.broker.slave_sync import SlaveSynchronize

    for micros, on in (("0", False), ("300", True)):
        config, _, _ = load_broker_config({"serverBusyPollMicros": micros})
        broker = SimpleNamespace(config=config)
        for client in (BrokerRegistration(broker).client, SlaveSynchronize(broker).client):
            assert (client.busy_poll is not None) is on
            if on:
                assert client.busy_poll._limit == pytest.approx(300e-6)


def test_a_held_request_keeps_the_poll_and_an_answer_owed_by_a_thread_stops_it():
    HOLD, DEFER = 1001, 1002

    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0, NettyServerConfig(server_busy_poll_micros=50_000))
        release = asyncio.Event()
        owed: list[tuple[DeferredAnswer, object]] = []

        async def hold(connection, command):  # (a held pull: the loop itself answers it)
            await release.wait()
            return command.make_response(ResponseCode.SUCCESS)

        def defer(connection, command):  # (a SYNC_FLUSH send: the flush thread answers it)
            owed.append((DeferredAnswer(), command))
            return owed[-1][0]

        server.register(HOLD, hold)
        server.register(DEFER, defer)
        await server.start()
        client = RemotingClient(busy_poll_micros=0)
        try:
            held = asyncio.ensure_future(client.invoke(server.address, request(HOLD), timeout=5))
            while not server.connections:
                await asyncio.sleep(0.01)
            (accepted,) = server.connections
            while not accepted._tasks:
                await asyncio.sleep(0.01)
            assert accepted.keeps_polling()  # a held request alone: still polled for
            deferred = asyncio.ensure_future(client.invoke(server.address, request(DEFER),
                                                           timeout=5))
            while not owed:
                await asyncio.sleep(0.01)
            assert not accepted.keeps_polling()  # another thread owes an answer
            answer, command = owed[0]
            answer.answer(command.make_response(ResponseCode.SUCCESS))
            assert (await deferred).code == ResponseCode.SUCCESS
            assert accepted.keeps_polling()
            release.set()
            assert (await held).code == ResponseCode.SUCCESS
            # A connection that closes with an answer still owed counts it off as it cancels it.
            owed.clear()
            deferred = asyncio.ensure_future(client.invoke(server.address, request(DEFER),
                                                           timeout=5))
            while not owed:
                await asyncio.sleep(0.01)
            assert accepted._deferred == 1
            await client.close()
            with pytest.raises(RemotingConnectError):
                await deferred
            while accepted.is_open:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert accepted._deferred == 0
        finally:
            await client.close()
            await server.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
