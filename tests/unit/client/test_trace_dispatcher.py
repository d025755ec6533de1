"""The trace dispatcher's stop: what was submitted before it is sent, even a batch in flight."""

from __future__ import annotations

import asyncio

from cluster.client import trace
from cluster.client.trace import TraceDispatcher


class SlowProducer:
    """A producer whose sends take a while (a loaded machine), recording what was sent."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.sent: list[bytes] = []
        self.shut = False

    async def start(self) -> None:
        pass

    async def send(self, message) -> None:
        await asyncio.sleep(self.delay)
        self.sent.append(message.body)

    async def shutdown(self) -> None:
        self.shut = True


def test_a_batch_being_sent_when_the_dispatcher_stops_is_sent_not_lost():
    async def scenario():
        producer = SlowProducer(0.05)
        dispatcher = TraceDispatcher(producer)
        await dispatcher.start()
        dispatcher.submit("SubBefore|", ["k1"])
        await asyncio.sleep(0.01)  # taken off the queue: its send is under way
        dispatcher.submit("SubAfter|", ["k1"])
        await dispatcher.stop()
        return producer

    producer = asyncio.run(scenario())
    assert b"".join(producer.sent) == b"SubBefore|SubAfter|"
    assert producer.shut


def test_a_stop_waits_only_so_long_for_a_send_that_hangs(monkeypatch):
    monkeypatch.setattr(trace, "STOP_WAIT_SECONDS", 0.05)

    async def scenario():
        producer = SlowProducer(30)
        dispatcher = TraceDispatcher(producer)
        await dispatcher.start()
        dispatcher.submit("Pub|", ["k"])
        await asyncio.sleep(0.01)
        producer.delay = 0  # (what is left is sent at once)
        dispatcher.submit("later|", ["k"])
        loop = asyncio.get_running_loop()
        began = loop.time()
        await dispatcher.stop()
        return producer, loop.time() - began

    producer, took = asyncio.run(scenario())
    assert took < 5
    assert producer.sent == [b"later|"]  # (the hung send was given up; the rest went)
    assert producer.shut
