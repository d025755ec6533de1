"""The 5.x clients a proxy remembers are bounded: invented client ids (any call may name one)
cannot grow the registry, or the consumers heartbeated to every broker, past its limit."""

from __future__ import annotations

import asyncio
import time

from cluster.proxy.clients import CLIENT_EXPIRY, OUTBOX_LIMIT, ClientRegistry
from cluster.proxy.schema import Code, pb
from tests.unit.proxy.serving import offline, serving


def test_a_full_registry_remembers_no_new_client_until_a_silent_one_is_forgotten(monkeypatch):
    registry = ClientRegistry(limit=3)
    for number in range(3):
        assert registry.touch(f"c{number}") is not None
    assert registry.touch("c3") is None  # full
    assert registry.touch("c1") is not None  # a known one is still served
    assert set(registry.clients) == {"c0", "c1", "c2"}
    registry.clients["c0"].last_seen -= CLIENT_EXPIRY + 1  # silent for good
    registry._expired_at -= 2  # (it forgets at most once a second)
    assert registry.touch("c3") is not None
    assert set(registry.clients) == {"c1", "c2", "c3"}


def test_telemetry_past_the_limit_is_refused_with_too_many_requests():
    from cluster.proxy.service import MessagingService

    service = offline(MessagingService)
    service.clients.limit = 1

    async def exercise():
        async with serving(service) as stub:
            # One-off calls with new ids take no place: a flood of them locked real clients
            # out of Telemetry.
            for number in range(5):
                await stub.Heartbeat(pb.HeartbeatRequest(),
                                     metadata=[("x-mq-client-id", f"one-off-{number}")])
            assert not service.clients.clients
            [a async for a in stub.Telemetry(iter([]), metadata=[("x-mq-client-id", "first")],
                                             timeout=10)]
            refused = [a async for a in stub.Telemetry(
                iter([]), metadata=[("x-mq-client-id", "second")], timeout=10)]
            served = await stub.Heartbeat(pb.HeartbeatRequest(),
                                          metadata=[("x-mq-client-id", "third")])
            return refused, served

    began = time.monotonic()
    refused, served = asyncio.run(exercise())
    assert [a.status.code for a in refused] == [Code.TOO_MANY_REQUESTS]
    assert "serves 1 clients" in refused[0].status.message
    assert served.status.code == Code.OK  # other calls are served, just not remembered
    assert set(service.clients.clients) == {"first"}
    assert time.monotonic() - began < 10


def test_a_group_no_broker_knows_is_asked_about_once_in_a_while_not_per_call():
    # Every receive naming a made-up group fetched every master's whole subscription table.
    from cluster.proxy.service import MessagingService
    from cluster.remoting.codec import RemotingCommand
    from cluster.remoting.codes import ResponseCode

    asked = []

    class Remoting:
        async def invoke(self, address, command, timeout):
            asked.append(address)
            return RemotingCommand(code=ResponseCode.SUCCESS, body=b'{"subscriptionGroupTable": {}}')

    service = offline(MessagingService)
    service.instance.broker_addrs = {"broker-a": {0: "127.0.0.1:1"}}
    service.instance.remoting = Remoting()

    async def many():
        for _ in range(50):
            assert await service._group_config("made-up") == {}

    asyncio.run(many())
    assert len(asked) == 1


def test_settings_naming_too_many_topics_or_bad_names_are_refused_with_a_status():
    # 200,000 subscribed topics made every 10 s heartbeat round stall the proxy for everyone.
    from cluster.proxy.service import MAX_SETTINGS_TOPICS, MessagingService

    service = offline(MessagingService)

    def subscribing(*topics):
        return pb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
                group=pb.Resource(name="CID-many"), subscriptions=[pb.SubscriptionEntry(
                    topic=pb.Resource(name=t),
                    expression=pb.FilterExpression(type=pb.TAG, expression="*"))
                    for t in topics])))

    async def exercise():
        async with serving(service) as stub:
            answers = []
            for settings in (subscribing(*(f"T{n}" for n in range(MAX_SETTINGS_TOPICS + 1))),
                             subscribing("bad topic!")):
                answers += [a async for a in stub.Telemetry(
                    iter([settings]), metadata=[("x-mq-client-id", "many")], timeout=10)]
            return answers

    answers = asyncio.run(exercise())
    assert [a.status.code for a in answers] == [Code.BAD_REQUEST, Code.ILLEGAL_TOPIC]
    assert not service.clients.clients["many"].subscriptions  # nothing adopted


def test_a_client_that_never_reads_its_telemetry_answers_cannot_grow_the_proxys_memory():
    # Each settings command it sent was answered into a queue without bound, which grew for
    # as long as such a client kept writing.
    from cluster.proxy.service import MessagingService

    service = offline(MessagingService)
    settings = pb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])))

    async def exercise():
        async with serving(service) as stub:
            call = stub.Telemetry(metadata=[("x-mq-client-id", "flood")])

            async def flood():
                for _ in range(20_000):
                    await call.write(settings)

            writer = asyncio.ensure_future(flood())
            await asyncio.wait([writer], timeout=5)
            queued = service.clients.clients["flood"].outbox.qsize()
            writer.cancel()
            call.cancel()
            return queued

    assert asyncio.run(exercise()) <= OUTBOX_LIMIT


def test_a_command_the_proxy_starts_is_dropped_for_a_client_not_reading_its_stream():
    async def exercise():
        registry = ClientRegistry()
        client = registry.touch("slow")
        client.outbox = asyncio.Queue(OUTBOX_LIMIT)
        offered = [registry.offer(client, pb.TelemetryCommand()) for _ in range(OUTBOX_LIMIT + 5)]
        client.outbox = None
        return offered, registry.offer(client, pb.TelemetryCommand())

    offered, closed = asyncio.run(exercise())
    assert offered == [True] * OUTBOX_LIMIT + [False] * 5
    assert not closed
