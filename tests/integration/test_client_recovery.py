"""The client library when the cluster around it changes: routes that move or vanish, a
group it cannot learn, a queue taken away mid-listener, a message no broker takes back."""

from __future__ import annotations

import asyncio
import contextlib
import time

import psutil
import pytest

from cluster.client.consumer import ConsumeStatus, PushConsumer
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.client.pull import PullConsumer
from cluster.client.route import MessageQueue
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from tests.integration.procs import free_port, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run, two_by_two, wait_route

pytestmark = pytest.mark.integration


async def _until(condition, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_a_producer_follows_route_changes_at_its_refresh(tmp_path):
    """The 30 s route refresh updates the producer's publish info (RocketMQ's
    updateTopicRouteInfoFromNameServer): a broker that gets the topic later gets messages, and
    one whose write permission was wiped on the name servers gets none."""
    with two_by_two(tmp_path) as (namesrv, brokers):
        async def main():
            await create_topic({"broker-a": brokers["broker-a"]}, "Moving", 2)
            watcher = PullConsumer("cg-watch", namesrv)  # (a client of its own: ours must refresh)
            await watcher.start()
            async with Producer("pg-moving", namesrv) as producer:
                await wait_route(producer, "Moving", 1)
                sent = [await producer.send(Message("Moving", b"a")) for _ in range(4)]
                assert {r.message_queue.broker_name for r in sent} == {"broker-a"}

                await create_topic({"broker-b": brokers["broker-b"]}, "Moving", 2)
                for _ in range(100):
                    route = await watcher.instance.fetch_route("Moving")
                    if route is not None and len(route.master_addrs()) == 2:
                        break
                    await asyncio.sleep(0.1)
                await producer.instance.refresh_routes()  # (what the 30 s timer runs)
                sent = [await producer.send(Message("Moving", b"ab")) for _ in range(8)]
                assert {r.message_queue.broker_name for r in sent} == {"broker-a", "broker-b"}

                # broker-a drained before maintenance: its write permission wiped.
                client = RemotingClient()
                try:
                    for address in namesrv.split(";"):
                        answer = await client.invoke(address, request(
                            RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
                        assert answer.code == ResponseCode.SUCCESS
                finally:
                    await client.close()
                await producer.instance.refresh_routes()
                sent = [await producer.send(Message("Moving", b"b")) for _ in range(8)]
                assert {r.message_queue.broker_name for r in sent} == {"broker-b"}
            await watcher.shutdown()

        run(main())


def test_a_rebalance_that_cannot_learn_the_group_keeps_its_queues(tmp_path):
    """No master answers GET_CONSUMER_LIST_BY_GROUP (here a broker that hangs): the client does
    not take every queue as if alone (RebalanceImpl skips the topic); it keeps its own."""
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Halves", 4)
            async with Producer("pg-halves", ns.address) as producer:
                await wait_route(producer, "Halves", 1)
            consumers = []
            for name in ("c1", "c2"):
                consumer = PushConsumer("cg-halves", ns.address)
                consumer.instance.client_id += f"-{name}"
                consumer.subscribe("Halves", "*")

                async def listener(messages):
                    return ConsumeStatus.CONSUME_SUCCESS

                consumer.register_listener(listener)
                await consumer.start()
                consumers.append(consumer)
            first = consumers[0]

            def owned():
                return {mq for mq in first._pull_tasks if mq.topic == "Halves"}

            hung = psutil.Process(broker.process.pid)
            try:
                for consumer in consumers:
                    await consumer.rebalance()
                before = owned()
                assert len(before) == 2
                hung.suspend()
                try:
                    await first.rebalance()  # (the members' request times out)
                    assert owned() == before
                finally:
                    hung.resume()
            finally:
                for consumer in consumers:
                    await consumer.shutdown()

        run(main())


def test_a_name_server_that_forgot_the_topic_takes_no_queue_away(tmp_path):
    """Right after a name server restarts it knows no topic until the brokers register again
    (every 30 s): the consumer keeps the queues it knew (RocketMQ's topicSubscribeInfoTable)
    instead of dropping them all."""
    env = {"HOME": str(tmp_path)}
    port = free_port()
    with running("cluster.namesrv", "-p", str(port), env=env) as ns:
        address = ns.address
        conf = broker_conf(tmp_path, address, registerNameServerPeriod="60000")
        with running("cluster.broker", "-c", conf, env=env) as broker:
            async def before_restart(consumer):
                await create_topic({"a": broker}, "Kept", 2)
                async with Producer("pg-kept", address) as producer:
                    await wait_route(producer, "Kept", 1)
                await consumer.start()
                await consumer.rebalance()
                return {mq for mq in consumer._pull_tasks if mq.topic == "Kept"}

            async def after_restart(consumer, before):
                try:
                    for _ in range(50):  # (the first request may meet the old connection, closed)
                        with contextlib.suppress(RemotingError):
                            route = await consumer.instance.fetch_route("Kept")
                            break
                        await asyncio.sleep(0.1)
                    assert route is None  # forgotten
                    await consumer.rebalance()
                    assert {mq for mq in consumer._pull_tasks if mq.topic == "Kept"} == before
                    assert consumer._routeless == []
                finally:
                    await consumer.shutdown()

            async def main():
                consumer = PushConsumer("cg-kept", address)
                consumer.subscribe("Kept", "*")

                async def listener(messages):
                    return ConsumeStatus.CONSUME_SUCCESS

                consumer.register_listener(listener)
                before = await before_restart(consumer)
                assert len(before) == 2
                ns.process.kill()
                ns.process.wait(10)
                with running("cluster.namesrv", "-p", str(port), env=env):
                    await after_restart(consumer, before)

            run(main())


def test_a_queue_taken_away_mid_listener_is_not_interrupted(tmp_path):
    """A rebalance gives a queue to a new member while the listener runs on one of its messages:
    the listener is not cancelled (RocketMQ only marks the ProcessQueue dropped), its result
    is discarded, and the new owner consumes the message again."""
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Moved", 2)
            moving = MessageQueue("Moved", "broker-a", 1)  # c2's once it joins (sorted ids)
            entered, release = asyncio.Event(), asyncio.Event()
            events: list[str] = []
            second: list[bytes] = []

            async def slow(messages):
                entered.set()
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    events.append("cancelled")
                    raise
                events.append("finished")
                return ConsumeStatus.CONSUME_SUCCESS

            async def quick(messages):
                second.extend(m.body for m in messages)
                return ConsumeStatus.CONSUME_SUCCESS

            first = PushConsumer("cg-moved", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            first.instance.client_id += "-c1"
            first.subscribe("Moved", "*")
            first.register_listener(slow)
            late = PushConsumer("cg-moved", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            late.instance.client_id += "-c2"
            late.subscribe("Moved", "*")
            late.register_listener(quick)
            async with Producer("pg-moved", ns.address) as producer:
                await wait_route(producer, "Moved", 1)
                await first.start()
                await first.rebalance()
                await producer.send(Message("Moved", b"slow"), mq=moving)
            try:
                await asyncio.wait_for(entered.wait(), 20)
                await late.start()
                await first.rebalance()
                assert moving not in first._pull_tasks
                await late.rebalance()
                await _until(lambda: second == [b"slow"], "the new owner to consume the message")
                assert events == []  # still running
                release.set()
                await _until(lambda: not first._draining, "the old turn to end")
                assert events == ["finished"]
                assert moving not in first.process_queues
            finally:
                release.set()
                await first.shutdown()
                await late.shutdown()

        run(main())


def test_a_message_the_broker_cannot_take_back_goes_to_the_retry_topic_by_producer(tmp_path):
    """CONSUMER_SEND_MSG_BACK fails (the broker that stored the message is gone): the message is
    sent to %RETRY%group through a producer instead (DefaultMQPushConsumerImpl's fallback), and
    comes back from there counted once more, not retried in place forever."""
    fast = " ".join(["1s"] * 18)
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        conf_a = broker_conf(tmp_path, ns.address, "broker-a", messageDelayLevel=fast)
        conf_b = broker_conf(tmp_path, ns.address, "broker-b", messageDelayLevel=fast)
        with running("cluster.broker", "-c", conf_a, env=env) as a, \
                running("cluster.broker", "-c", conf_b, env=env):
            async def main():
                await create_topic({"a": a}, "Fallback", 1)
                deliveries: list[tuple[str, str, int]] = []
                consumer = PushConsumer("cg-fallback", ns.address,
                                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
                consumer.subscribe("Fallback", "*")

                async def listener(messages):
                    for m in messages:
                        deliveries.append((m.record.topic, m.topic, m.reconsume_times))
                    if len(deliveries) == 1:
                        a.process.kill()  # the message's broker: gone before it is sent back
                        a.process.wait(10)
                        return ConsumeStatus.RECONSUME_LATER
                    return ConsumeStatus.CONSUME_SUCCESS

                consumer.register_listener(listener)
                await consumer.start()
                try:
                    async with Producer("pg-fallback", ns.address) as producer:
                        await wait_route(producer, "Fallback", 1)
                        await producer.send(Message("Fallback", b"once more"))
                    for _ in range(400):
                        if len(deliveries) >= 2:
                            break
                        await consumer.rebalance()  # (the retry topic's route, at once)
                        await asyncio.sleep(0.1)
                finally:
                    await consumer.shutdown()
                assert deliveries[:2] == [("Fallback", "Fallback", 0),
                                          ("%RETRY%cg-fallback", "Fallback", 1)]

            run(main())


def test_a_message_nobody_takes_back_waits_while_the_queue_moves_on(tmp_path):
    """Neither the broker nor a producer takes a failed message back: it is consumed again a
    few seconds later, and the messages after it in its queue are consumed meanwhile."""
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address), env=env) as broker:
        async def main():
            await create_topic({"a": broker}, "Stuck", 1)
            async with Producer("pg-stuck", ns.address) as producer:
                await wait_route(producer, "Stuck", 1)
                for body in (b"first", b"second"):
                    await producer.send(Message("Stuck", body))
            calls: list[bytes] = []
            consumer = PushConsumer("cg-stuck", ns.address, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe("Stuck", "*")

            async def listener(messages):
                calls.extend(m.body for m in messages)
                if len(calls) == 1:
                    broker.process.kill()  # no broker left to take it back
                    broker.process.wait(10)
                    return ConsumeStatus.RECONSUME_LATER
                return ConsumeStatus.CONSUME_SUCCESS

            consumer.register_listener(listener)
            await consumer.start()
            try:
                await _until(lambda: len(calls) >= 3, "three calls of the listener", 30)
            finally:
                await consumer.shutdown()
            assert calls[:3] == [b"first", b"second", b"first"]

        run(main())


def test_a_producer_keeps_refreshing_a_topic_a_restarted_name_server_forgot(tmp_path):
    """A refresh that meets a name server restarted a moment ago (no topic known until the
    brokers register again) does not forget the producer's topic: later refreshes still bring
    its new queues."""
    env = {"HOME": str(tmp_path)}
    port = free_port()
    with running("cluster.namesrv", "-p", str(port), env=env) as ns:
        address = ns.address
        conf_a = broker_conf(tmp_path, address, "broker-a", registerNameServerPeriod="2000")
        conf_b = broker_conf(tmp_path, address, "broker-b", registerNameServerPeriod="2000")
        with running("cluster.broker", "-c", conf_a, env=env) as a, \
                running("cluster.broker", "-c", conf_b, env=env) as b:
            async def main():
                await create_topic({"a": a}, "Remembered", 2)
                producer = Producer("pg-remembered", address)
                await producer.start()
                try:
                    await wait_route(producer, "Remembered", 1)
                    await producer.send(Message("Remembered", b"before"))
                    ns.process.kill()
                    ns.process.wait(10)
                    with running("cluster.namesrv", "-p", str(port), env=env):
                        for _ in range(50):  # (the first request may meet the closed connection)
                            with contextlib.suppress(RemotingError):
                                route = await producer.instance.fetch_route("Remembered")
                                break
                            await asyncio.sleep(0.1)
                        assert route is None  # forgotten until the brokers register again
                        await producer.instance.refresh_routes()
                        await create_topic({"b": b}, "Remembered", 2)
                        watcher = PullConsumer("cg-watch", address)
                        await watcher.start()
                        try:
                            for _ in range(100):
                                route = await watcher.instance.fetch_route("Remembered")
                                if route is not None and len(route.master_addrs()) == 2:
                                    break
                                await asyncio.sleep(0.1)
                        finally:
                            await watcher.shutdown()
                        await producer.instance.refresh_routes()
                        sent = [await producer.send(Message("Remembered", b"after")) for _ in range(8)]
                        assert {r.message_queue.broker_name for r in sent} == {"broker-a", "broker-b"}
                finally:
                    await producer.shutdown()

            run(main())
