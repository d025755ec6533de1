"""POP consumption over remoting against a real broker: POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, redelivery through the retry topic, a restart, hostile headers."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.client.route import parse_mq_table
from cluster.pop_handle import ExtraInfo, parse_start_offsets
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.record import iter_records
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf, send_v2

pytestmark = pytest.mark.integration


def pop(topic, group="CID-pop", invisible_ms=2000, max_nums=32, poll_ms=0, **extra):
    fields = {"consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": max_nums,
              "invisibleTime": invisible_ms, "pollTime": poll_ms, "bornTime": int(time.time() * 1000),
              "initMode": 0, "expType": "TAG", "exp": "*", "order": False}
    fields.update(extra)
    return request(RequestCode.POP_MESSAGE, fields)


def handles(answer, broker_name="broker-a") -> list[tuple[str, object]]:
    """(extraInfo, record) of every message a POP answer handed out."""
    starts = parse_start_offsets(answer.ext_fields.get("startOffsetInfo", ""))
    pop_time, invisible = int(answer.ext_fields["popTime"]), int(answer.ext_fields["invisibleTime"])
    out = []
    for record in iter_records(answer.body):
        retry = record.topic.startswith("%RETRY%")
        out.append((ExtraInfo(starts[(retry, record.queue_id)], pop_time, invisible, 0, retry,
                              broker_name, record.queue_id, record.queue_offset).encode(), record))
    return out


def ack(topic, extra: str, record, group="CID-pop", code=RequestCode.ACK_MESSAGE, **more):
    return request(code, {"consumerGroup": group, "topic": topic, "queueId": record.queue_id,
                          "extraInfo": extra, "offset": record.queue_offset, **more})


@pytest.fixture
def namesrv(tmp_path):
    with running("cluster.namesrv", "-p", "0", env={"HOME": str(tmp_path)}) as node:
        yield node.address


async def _send(client, broker, topic, count):
    for number in range(count):
        answer = await client.invoke(broker, send_v2(topic, f"m{number}".encode(), queue_id=0))
        assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_pop_ack_change_and_redelivery(tmp_path, namesrv):
    conf = broker_conf(tmp_path, namesrv)

    async def main(broker):
        client = RemotingClient()
        try:
            await _send(client, broker, "PopTopic", 3)
            first = await client.invoke(broker, pop("PopTopic"))
            assert first.code == ResponseCode.SUCCESS, first.remark
            got = handles(first)
            assert sorted(r.body for _, r in got) == [b"m0", b"m1", b"m2"]
            # Invisible now: a second POP finds nothing, and the group's stats count them.
            assert (await client.invoke(broker, pop("PopTopic"))).code == ResponseCode.PULL_NOT_FOUND
            stats = await client.invoke(broker, request(RequestCode.GET_CONSUME_STATS, {
                "consumerGroup": "CID-pop", "topic": "PopTopic"}))
            table = parse_mq_table(stats.body.decode())
            assert sum(v["inFlight"] for v in table.values()) == 3
            assert sum(v["consumerOffset"] for v in table.values()) == 3  # moved past them
            by_body = {r.body: (e, r) for e, r in got}
            extra, record = by_body[b"m0"]
            assert (await client.invoke(broker, ack("PopTopic", extra, record))).code == \
                ResponseCode.SUCCESS
            extra, record = by_body[b"m1"]
            changed = await client.invoke(broker, ack(
                "PopTopic", extra, record, code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                invisibleTime=20_000))
            assert changed.code == ResponseCode.SUCCESS, changed.remark
            # m2 comes back once its 2 s are up, with one more delivery counted, and only m2.
            began = time.monotonic()
            again = await client.invoke(broker, pop("PopTopic", poll_ms=5000), timeout=10)
            while again.code != ResponseCode.SUCCESS and time.monotonic() - began < 10:
                again = await client.invoke(broker, pop("PopTopic", poll_ms=5000), timeout=10)
            [(extra, record)] = handles(again)
            assert (record.body, record.reconsume_times, record.topic) == (
                b"m2", 1, "%RETRY%CID-pop_PopTopic")
            assert record.properties["RETRY_TOPIC"] == "PopTopic"
            assert (await client.invoke(broker, ack("PopTopic", extra, record))).code == \
                ResponseCode.SUCCESS
        finally:
            await client.close()

    with running("cluster.broker", "-c", conf) as broker:
        asyncio.run(main(broker.address))


def test_in_flight_messages_of_a_killed_broker_come_back_after_a_restart(tmp_path, namesrv):
    conf = broker_conf(tmp_path, namesrv)

    async def send_and_pop(broker):
        client = RemotingClient()
        try:
            await _send(client, broker, "PopCrash", 2)
            answer = await client.invoke(broker, pop("PopCrash", invisible_ms=3000))
            assert len(handles(answer)) == 2
        finally:
            await client.close()

    async def receive_again(broker):
        client = RemotingClient()
        bodies = set()
        try:
            began = time.monotonic()
            while bodies != {b"m0", b"m1"} and time.monotonic() - began < 20:
                answer = await client.invoke(broker, pop("PopCrash", poll_ms=2000), timeout=5)
                for extra, record in handles(answer) if answer.code == ResponseCode.SUCCESS else []:
                    bodies.add(record.body)
                    await client.invoke(broker, ack("PopCrash", extra, record))
        finally:
            await client.close()
        return bodies

    with running("cluster.broker", "-c", conf) as broker:
        asyncio.run(send_and_pop(broker.address))
    # (the context killed it with SIGKILL: nothing was flushed on the way out)
    with running("cluster.broker", "-c", conf) as broker:
        assert asyncio.run(receive_again(broker.address)) == {b"m0", b"m1"}


def test_hostile_pop_headers_get_codes_and_change_nothing(tmp_path, namesrv):
    conf = broker_conf(tmp_path, namesrv)

    async def main(broker):
        client = RemotingClient()
        try:
            await _send(client, broker, "PopHostile", 1)
            for bad in (pop("PopHostile", invisible_ms=0), pop("PopHostile", max_nums=100_000),
                        pop("PopHostile", invisible_ms=10**13), pop("PopHostile", poll_ms=-5),
                        pop("PopHostile", queueId=4096), pop("PopHostile", group="bad group!")):
                answer = await client.invoke(broker, bad)
                assert answer.code != ResponseCode.SUCCESS, bad.ext_fields
            nothing = await client.invoke(broker, pop("NoSuchTopic"))
            assert nothing.code == ResponseCode.TOPIC_NOT_EXIST
            answer = await client.invoke(broker, pop("PopHostile", invisible_ms=60_000))
            [(extra, record)] = handles(answer)
            missing = await client.invoke(broker, ack("PopHostile", "", record))
            assert missing.code == ResponseCode.SYSTEM_ERROR  # a missing field, as in Java
            for mangled in ("1 2 3", "a b c d e f g h", extra.replace("broker-a", "broker-z"),
                            "-1 " + extra.split(" ", 1)[1]):
                refused = await client.invoke(broker, ack("PopHostile", mangled, record))
                assert refused.code == ResponseCode.MESSAGE_ILLEGAL, mangled
            # The broker still serves, and the message is still in flight (not acked by any).
            assert (await client.invoke(broker, pop("PopHostile"))).code == \
                ResponseCode.PULL_NOT_FOUND
            assert (await client.invoke(broker, ack("PopHostile", extra, record))).code == \
                ResponseCode.SUCCESS
        finally:
            await client.close()

    with running("cluster.broker", "-c", conf) as broker:
        asyncio.run(main(broker.address))


def test_batch_ack_settles_what_its_bit_sets_name(tmp_path, namesrv):
    import base64
    import json

    async def main(broker):
        client = RemotingClient()
        try:
            await _send(client, broker, "PopBatch", 4)
            answer = await client.invoke(broker, pop("PopBatch", invisible_ms=1500))
            got = handles(answer)
            start = parse_start_offsets(answer.ext_fields["startOffsetInfo"])[(False, 0)]
            acked = {r.queue_offset for _, r in got if r.body in (b"m0", b"m2", b"m3")}
            bits = bytearray(1)
            for offset in acked:
                bits[0] |= 1 << (offset - start)
            body = {"brokerName": "broker-a", "acks": [{
                "c": "CID-pop", "t": "PopBatch", "r": "0", "so": start, "q": 0, "rq": 0,
                "pt": int(answer.ext_fields["popTime"]), "it": 1500,
                "b": base64.b64encode(bytes(bits)).decode()}]}
            done = await client.invoke(broker, request(RequestCode.BATCH_ACK_MESSAGE,
                                                       body=json.dumps(body).encode()))
            assert done.code == ResponseCode.SUCCESS, done.remark
            bad = await client.invoke(broker, request(RequestCode.BATCH_ACK_MESSAGE,
                                                      body=b'{"acks": [{"c": "x", "b": 7}]}'))
            assert bad.code == ResponseCode.MESSAGE_ILLEGAL
            # Only the one not in the bit set comes back.
            began = time.monotonic()
            back = []
            while not back and time.monotonic() - began < 10:
                again = await client.invoke(broker, pop("PopBatch", poll_ms=3000), timeout=6)
                if again.code == ResponseCode.SUCCESS:
                    back = [r.body for _, r in handles(again)]
            return back
        finally:
            await client.close()

    with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv)) as broker:
        assert asyncio.run(main(broker.address)) == [b"m1"]


def test_fifo_pop_holds_the_queue_and_redelivers_only_what_was_not_acked(tmp_path, namesrv):
    import json

    async def main(broker):
        client = RemotingClient()
        try:
            group = {"groupName": "CID-fifo", "consumeMessageOrderly": True, "retryMaxTimes": 16}
            made = await client.invoke(broker, request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(group).encode()))
            assert made.code == ResponseCode.SUCCESS, made.remark
            await _send(client, broker, "PopFifo", 3)
            first = await client.invoke(broker, pop("PopFifo", group="CID-fifo", order=True,
                                                    invisible_ms=1500))
            got = {r.body: (e, r) for e, r in handles(first)}
            assert sorted(got) == [b"m0", b"m1", b"m2"]
            # Held: nothing more while the lock lasts.
            held = await client.invoke(broker, pop("PopFifo", group="CID-fifo", order=True))
            assert held.code == ResponseCode.PULL_NOT_FOUND
            extra, record = got[b"m1"]
            assert (await client.invoke(broker, ack("PopFifo", extra, record,
                                                    group="CID-fifo"))).code == ResponseCode.SUCCESS
            await asyncio.sleep(1.7)  # the lock runs out with m0 and m2 unacked
            again = await client.invoke(broker, pop("PopFifo", group="CID-fifo", order=True))
            redelivered = handles(again)
            assert [r.body for _, r in redelivered] == [b"m0", b"m2"]
            # As RocketMQ's clients parse it: each message's count, then the queue's fewest.
            m0, m2 = (r.queue_offset for _, r in redelivered)
            queue_id = redelivered[0][1].queue_id
            assert again.ext_fields["orderCountInfo"] == (
                f"0 qo{queue_id}%{m0} 1;0 qo{queue_id}%{m2} 1;0 {queue_id} 1")
            for extra, record in redelivered:
                await client.invoke(broker, ack("PopFifo", extra, record, group="CID-fifo"))
            stats = await client.invoke(broker, request(RequestCode.GET_CONSUME_STATS, {
                "consumerGroup": "CID-fifo", "topic": "PopFifo"}))
            table = parse_mq_table(stats.body.decode())
            assert sum(v["consumerOffset"] for v in table.values()) == 3
            assert sum(v["inFlight"] for v in table.values()) == 0
        finally:
            await client.close()

    with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv)) as broker:
        asyncio.run(main(broker.address))


def test_a_message_popped_far_past_its_checkpoints_start_is_acked(tmp_path, namesrv):
    # A sparse tag: the one message of tag A sits 2,500 units past where the POP began to read.
    # The ack's bit set (a 5.x client's, as the proxy builds it) reaches that far; it was
    # refused as longer than a checkpoint, and the message came back after its invisible time.
    from cluster.proxy.receiving import batch_ack_body

    async def main(broker):
        client = RemotingClient()
        try:
            for first in range(0, 2500, 100):
                answers = await asyncio.gather(*(client.invoke(broker, send_v2(
                    "PopSparse", f"b{n}".encode(), queue_id=0, tags="B"))
                    for n in range(first, first + 100)))
                assert all(a.code == ResponseCode.SUCCESS for a in answers)
            await _send_tagged(client, broker, "PopSparse", b"the-one", "A")
            answer = await client.invoke(broker, pop("PopSparse", invisible_ms=1500, exp="A"))
            [(extra, record)] = handles(answer)
            assert record.body == b"the-one"
            handle = ExtraInfo.parse(extra)
            assert handle.offset - handle.start_offset == 2500
            body = batch_ack_body("broker-a", "CID-pop", "PopSparse", {
                (False, 0, handle.start_offset, handle.pop_time, handle.invisible_time):
                    [handle.offset - handle.start_offset]})
            done = await client.invoke(broker, request(RequestCode.BATCH_ACK_MESSAGE, body=body))
            assert done.code == ResponseCode.SUCCESS, done.remark
            again = await client.invoke(broker, pop("PopSparse", poll_ms=3000, exp="A"), timeout=6)
            return [r.body for _, r in handles(again)] if again.code == ResponseCode.SUCCESS else []
        finally:
            await client.close()

    with running("cluster.broker", "-c", broker_conf(tmp_path, namesrv)) as broker:
        assert asyncio.run(main(broker.address)) == []  # acked: not handed out again


async def _send_tagged(client, broker, topic, body, tags):
    answer = await client.invoke(broker, send_v2(topic, body, queue_id=0, tags=tags))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
