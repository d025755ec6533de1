"""Timer messages (5.x) against a real broker: delivered no sooner than asked and about a second
after at most, whatever the delay; kept across a SIGKILL and a restart; refused when out of range."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message import properties_to_string
from storage.record import iter_records
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf, pull

pytestmark = pytest.mark.integration


def timer_send(topic, body, **props):
    props = {"WAIT": "true", **props}
    return request(RequestCode.SEND_MESSAGE_V2, {
        "a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
        "g": int(time.time() * 1000), "h": 0, "i": properties_to_string(props), "j": 0,
        "k": False, "m": False}, body)


async def arrivals(client, broker, topic, count, timeout) -> list[tuple[bytes, float]]:
    """(body, arrival time) of the first ``count`` messages of queue 0, by polling."""
    got: list[tuple[bytes, float]] = []
    offset = 0
    deadline = time.time() + timeout
    while len(got) < count and time.time() < deadline:
        answer = await client.invoke(broker, pull(topic, 0, offset))
        if answer.code == ResponseCode.SUCCESS:
            for record in iter_records(answer.body):
                got.append((record.body, time.time()))
                offset = record.queue_offset + 1
        else:
            await asyncio.sleep(0.05)
    return got


@pytest.fixture
def namesrv(tmp_path):
    with running("cluster.namesrv", "-p", "0", env={"HOME": str(tmp_path)}) as node:
        yield node.address


def test_timer_messages_arrive_no_sooner_than_asked_and_in_time_order(tmp_path, namesrv):
    async def main(broker):
        client = RemotingClient()
        try:
            now_ms = int(time.time() * 1000)
            sends = [(b"late", {"TIMER_DELIVER_MS": str(now_ms + 3500)}),
                     (b"soon", {"TIMER_DELAY_MS": "1200"}),
                     (b"mid", {"TIMER_DELAY_SEC": "2"}),
                     (b"past", {"TIMER_DELIVER_MS": str(now_ms - 5000)}),  # at once
                     (b"plain", {})]
            for body, props in sends:
                answer = await client.invoke(broker, timer_send("TimerTopic", body, **props))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            got = await arrivals(client, broker, "TimerTopic", 5, 15)
        finally:
            await client.close()
        return now_ms / 1000, got

    with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv)) as broker:
        start, got = asyncio.run(main(broker.address))
    order = [body for body, _ in got]
    assert set(order[:2]) == {b"past", b"plain"}
    assert order[2:] == [b"soon", b"mid", b"late"]
    when = {body: at - start for body, at in got}
    assert 1.2 <= when[b"soon"] < 1.2 + 1.5
    assert 2.0 <= when[b"mid"] < 2.0 + 1.5
    assert 3.5 <= when[b"late"] < 3.5 + 1.5


def test_pending_timers_survive_a_kill_and_a_restart(tmp_path, namesrv):
    conf = broker_conf(tmp_path, namesrv)

    async def send(broker):
        client = RemotingClient()
        try:
            due = int(time.time() * 1000) + 4000
            for number in range(3):
                answer = await client.invoke(broker, timer_send(
                    "TimerCrash", f"t{number}".encode(), TIMER_DELIVER_MS=str(due)))
                assert answer.code == ResponseCode.SUCCESS
            await asyncio.sleep(1.2)  # filed, and the progress saved, before the kill
            return due
        finally:
            await client.close()

    async def receive(broker):
        client = RemotingClient()
        try:
            return await arrivals(client, broker, "TimerCrash", 3, 15)
        finally:
            await client.close()

    with running("cluster.broker", "-c", conf) as broker:
        due = asyncio.run(send(broker.address))
    with running("cluster.broker", "-c", conf) as broker:
        got = asyncio.run(receive(broker.address))
    assert sorted(body for body, _ in got) == [b"t0", b"t1", b"t2"]
    assert all(at * 1000 >= due for _, at in got)


def test_timer_properties_out_of_range_are_refused(tmp_path, namesrv):
    async def main(broker):
        client = RemotingClient()
        try:
            far = int(time.time() * 1000) + 4 * 24 * 3600 * 1000  # past timerMaxDelaySec (3 days)
            for props in ({"TIMER_DELIVER_MS": str(far)}, {"TIMER_DELAY_SEC": "soon"},
                          {"TIMER_DELAY_MS": "-5"}, {"TIMER_DELIVER_MS": "9" * 40}):
                answer = await client.invoke(broker, timer_send("TimerBad", b"x", **props))
                assert answer.code == ResponseCode.MESSAGE_ILLEGAL, props
            # Nor may anyone write into the timer topic directly.
            direct = await client.invoke(broker, timer_send("rmq_sys_wheel_timer", b"x"))
            assert direct.code == ResponseCode.NO_PERMISSION
        finally:
            await client.close()

    with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv)) as broker:
        asyncio.run(main(broker.address))


def test_a_delay_level_wins_over_timer_properties(tmp_path, namesrv):
    """As RocketMQ 5 does (HookUtils.checkIfTimerMessage): a message with a delay level and a
    timer property is a delayed message, its timer properties dropped. (Parked in the timer
    too, the delay rewrite overwrote the REAL_TOPIC the timer delivers to: it was lost.)"""
    async def main(broker):
        client = RemotingClient()
        try:
            sent_at = time.time()
            far = str(int(sent_at * 1000) + 60_000)
            for body, props in ((b"by-sec", {"DELAY": "1", "TIMER_DELAY_SEC": "60"}),
                                (b"by-time", {"DELAY": "1", "TIMER_DELIVER_MS": far})):
                answer = await client.invoke(broker, timer_send("TimerDelayed", body, **props))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            got = []
            offset = 0
            while len(got) < 2 and time.time() < sent_at + 15:
                answer = await client.invoke(broker, pull("TimerDelayed", 0, offset))
                if answer.code == ResponseCode.SUCCESS:
                    for record in iter_records(answer.body):
                        got.append((record, time.time() - sent_at))
                        offset = record.queue_offset + 1
                else:
                    await asyncio.sleep(0.05)
            return got
        finally:
            await client.close()

    with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv)) as broker:
        got = asyncio.run(main(broker.address))
    assert sorted(record.body for record, _ in got) == [b"by-sec", b"by-time"]
    for record, after in got:
        assert 1.0 <= after < 1.0 + 5  # level 1: one second, not the timer's minute
        assert not [key for key in record.properties if key.startswith("TIMER_")]
