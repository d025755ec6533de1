"""A 5.x push consumer's messages (ReceiveMessage with auto_renew) kept invisible by the proxy
until acked, against a real name server and broker; the proxy's service runs in the test's
process, so a renewal round can be run at the moment it would fall due."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cluster.client.admin import AdminClient
from cluster.client.instance import MQClientInstance
from cluster.client.route import parse_mq_table
from cluster.pop_handle import ExtraInfo
from cluster.proxy.renewal import AUTO_RENEW_INVISIBLE_MS
from cluster.proxy.schema import Code, pb
from cluster.proxy.service import MessagingService
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf, send_v2
from tests.unit.proxy.serving import serving

pytestmark = pytest.mark.integration
META = [("x-mq-client-id", "renew-client@1"), ("x-mq-language", "JAVA")]


async def _in_flight(broker: str, group: str, topic: str) -> int:
    client = RemotingClient()
    try:
        stats = await client.invoke(broker, request(RequestCode.GET_CONSUME_STATS, {
            "consumerGroup": group, "topic": topic}))
        return sum(v["inFlight"] for v in parse_mq_table(stats.body.decode()).values())
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def _push_consumer(namesrv: str, broker: str, group: str, topic: str, body: bytes):
    """A one-queue topic holding one message, a proxy service served in-process, and a push
    consumer's Telemetry stream whose settings made it known: (service, stub, the receive
    request with auto_renew, the stream)."""
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, 1, 1)
    sender = RemotingClient()
    assert (await sender.invoke(broker, send_v2(topic, body, queue_id=0))).code \
        == ResponseCode.SUCCESS
    await sender.close()
    instance = MQClientInstance(namesrv, "PROXY-TEST")
    await instance.start()
    service = MessagingService(instance, ("127.0.0.1", 8081))
    receive = pb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1, auto_renew=True)
    try:
        async with serving(service) as stub:
            telemetry = stub.Telemetry(metadata=META)
            await telemetry.write(pb.TelemetryCommand(settings=pb.Settings(
                client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(
                    group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
                        topic=pb.Resource(name=topic),
                        expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))))
            await telemetry.read()  # the settings' answer: the client is known
            try:
                yield service, stub, receive, telemetry
            finally:
                telemetry.cancel()
    finally:
        await instance.shutdown()


def _on_a_cluster(tmp_path, main):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        return asyncio.run(main(ns.address, broker.address))


def test_a_push_consumers_message_stays_invisible_until_acked_with_the_handle_it_got(tmp_path):
    # The proxy ignored auto_renew: a push consumer's message came back after 30 s while it
    # was still cached or being consumed, and the late ack was refused.
    async def main(namesrv: str, broker: str):
        async with _push_consumer(namesrv, broker, "CID-renew", "T5Renew", b"slow") as (
                service, stub, receive, _):
            received = [r async for r in stub.ReceiveMessage(receive, metadata=META)]
            [message] = [r.message for r in received if r.HasField("message")]
            handle = message.system_properties.receipt_handle
            first = ExtraInfo.parse(handle)
            assert first.invisible_time == AUTO_RENEW_INVISIBLE_MS
            # The round at the moment it falls due: 5 s before the handle runs out.
            assert await service.renew_once(now_ms=first.deadline - 5_000) == 1
            current = service.renewals.table[("CID-renew", handle)].current
            assert current.deadline > first.deadline
            assert await _in_flight(broker, "CID-renew", "T5Renew") == 1
            acked = await stub.AckMessage(pb.AckMessageRequest(
                group=pb.Resource(name="CID-renew"), topic=pb.Resource(name="T5Renew"),
                entries=[pb.AckMessageEntry(message_id=message.system_properties.message_id,
                                            receipt_handle=handle)]), metadata=META)
            assert acked.status.code == Code.OK, acked.status.message
            assert not service.renewals.table
        return await _in_flight(broker, "CID-renew", "T5Renew")

    assert _on_a_cluster(tmp_path, main) == 0  # settled, not back later


def test_a_push_consumer_that_shuts_down_hands_its_messages_back_at_once(tmp_path):
    # Its messages (a FIFO consumer's: its queue) stayed held until their renewal round came
    # up, up to a minute later; RocketMQ hands them back as the consumer unregisters.
    async def main(namesrv: str, broker: str):
        async with _push_consumer(namesrv, broker, "CID-leave", "T5Leave", b"held") as (
                service, stub, receive, _):
            first = [r.message async for r in stub.ReceiveMessage(receive, metadata=META)
                     if r.HasField("message")]
            assert len(first) == 1
            assert service.renewals.table
            await stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(
                group=pb.Resource(name="CID-leave")), metadata=META)
            assert not service.renewals.table
            other = [("x-mq-client-id", "renew-client@2"), ("x-mq-language", "JAVA")]
            again = []
            for _ in range(20):  # back within a couple of seconds, not a minute
                again = [r.message async for r in stub.ReceiveMessage(receive, metadata=other)
                         if r.HasField("message")]
                if again:
                    break
                await asyncio.sleep(0.25)
            return [m.body for m in again], (again[0].system_properties.delivery_attempt
                                             if again else 0)

    assert _on_a_cluster(tmp_path, main) == ([b"held"], 2)
