"""POP as RocketMQ's own clients use it: acks naming the retry topic, FIFO acks and
invisible-time changes, checkpoints changed in the millisecond they were made."""

from __future__ import annotations

import asyncio

from cluster.broker.pop_processor import PopMessageProcessor
from cluster.pop_handle import ExtraInfo
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.conftest import make_message
from tests.unit.broker.test_pop_refusals import _broker


def _pop(invisible_ms=5000, order=False, topic="PopT", **more):
    return request(RequestCode.POP_MESSAGE, {
        "consumerGroup": "CID-r", "topic": topic, "queueId": -1, "maxMsgNums": 8,
        "invisibleTime": invisible_ms, "pollTime": 0, "bornTime": 0, "initMode": 0,
        "expType": "TAG", "exp": "*", "order": order, **more})


def _setup(store_factory, tmp_path, *bodies, topic="PopT"):
    store = store_factory()
    for body in bodies:
        store.put_message_nowait(make_message(topic, body))
    store.wait_dispatched(timeout=10)
    broker = _broker(store, tmp_path)
    return broker, PopMessageProcessor(broker)


def _revive_all(broker):
    for ck in list(broker.pop_revive.table.values()):
        broker.pop_revive.revive_due(ck.deadline + 1)
    broker.store.wait_dispatched(timeout=10)


def test_an_ack_naming_the_retry_topic_settles_a_redelivered_message(store_factory, tmp_path):
    # RocketMQ's Java push consumer and its proxy put the retry topic itself in the header of
    # an ack for a message that came back. It was wrapped again (%RETRY%G_%RETRY%G_T): the ack
    # answered SUCCESS, found nothing, and the message came back until the DLQ.
    broker, processor = _setup(store_factory, tmp_path, b"m0")
    asyncio.run(processor.pop(None, _pop(invisible_ms=1000)))
    _revive_all(broker)
    again = asyncio.run(processor.pop(None, _pop(invisible_ms=60_000)))
    assert again.code == ResponseCode.SUCCESS
    [ck] = broker.pop_revive.table.values()
    extra = ExtraInfo(ck.start_offset, ck.pop_time, ck.invisible_time, 0, True, "broker-a",
                      ck.queue_id, ck.offsets[0]).encode()
    fields = {"consumerGroup": "CID-r", "topic": "%RETRY%CID-r_PopT", "queueId": ck.queue_id,
              "extraInfo": extra, "offset": ck.offsets[0]}
    changed = asyncio.run(processor.change_invisible_time(None, request(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**fields, "invisibleTime": 5000})))
    assert changed.code == ResponseCode.SUCCESS, changed.remark
    [moved] = broker.pop_revive.table.values()
    extra = ExtraInfo(moved.start_offset, moved.pop_time, moved.invisible_time, 0, True,
                      "broker-a", moved.queue_id, moved.offsets[0]).encode()
    acked = asyncio.run(processor.ack(None, request(RequestCode.ACK_MESSAGE,
                                                    {**fields, "extraInfo": extra})))
    assert acked.code == ResponseCode.SUCCESS
    assert broker.pop_revive.in_flight() == 0


def test_a_message_put_straight_into_the_retry_topic_comes_back_there(store_factory, tmp_path):
    # It has no RETRY_TOPIC property: it was revived into a retry topic of the retry topic,
    # which nobody reads.
    broker, processor = _setup(store_factory, tmp_path)
    broker.topics.create_in_send_message_back_method("%RETRY%CID-r_PopT", 1, 6)
    broker.store.put_message_nowait(make_message("%RETRY%CID-r_PopT", b"direct"))
    broker.store.wait_dispatched(timeout=10)
    first = asyncio.run(processor.pop(None, _pop(invisible_ms=1000)))
    assert first.code == ResponseCode.SUCCESS
    _revive_all(broker)
    assert [t for t in broker.topics.table if t.startswith("%RETRY%")] == ["%RETRY%CID-r_PopT"]
    again = asyncio.run(processor.pop(None, _pop()))
    assert again.code == ResponseCode.SUCCESS


def test_a_change_in_the_millisecond_of_the_pop_keeps_every_message(store_factory, tmp_path,
                                                                     monkeypatch):
    # The moved checkpoint took the original's key (same group, topic, queue, start offset and
    # pop time): the original was replaced, then acked away, and all three messages were lost.
    from cluster.broker import pop_processor

    monkeypatch.setattr(pop_processor, "now_ms", lambda: 1_700_000_000_000)
    broker, processor = _setup(store_factory, tmp_path, b"m0", b"m1", b"m2")
    handed = asyncio.run(processor.pop(None, _pop(invisible_ms=60_000)))
    assert handed.code == ResponseCode.SUCCESS
    [ck] = broker.pop_revive.table.values()
    extra = ExtraInfo(ck.start_offset, ck.pop_time, ck.invisible_time, 0, False, "broker-a",
                      ck.queue_id, ck.offsets[0]).encode()
    changed = asyncio.run(processor.change_invisible_time(None, request(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": "CID-r", "topic": "PopT", "queueId": ck.queue_id,
            "extraInfo": extra, "offset": ck.offsets[0], "invisibleTime": 5000})))
    assert changed.code == ResponseCode.SUCCESS
    assert broker.pop_revive.in_flight() == 3
    revived_before = broker.pop_revive.revived
    _revive_all(broker)
    assert broker.pop_revive.revived - revived_before == 3


def test_acks_naming_nothing_make_no_group_and_get_rocketmqs_codes(store_factory, tmp_path):
    # Acks were checked like a POP, which makes the group it names: each made-up name became
    # a group written to the broker's config, and every ack answered SUCCESS.
    broker, processor = _setup(store_factory, tmp_path, b"m0")
    before = set(broker.subscription_groups.table)

    def ack(group, queue_id=0, offset=0):
        return asyncio.run(processor.ack(None, request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": group, "topic": "PopT", "queueId": queue_id,
            "extraInfo": ExtraInfo(0, 1, 60_000, 0, False, "broker-a", queue_id,
                                   offset).encode(), "offset": offset}))).code

    assert [ack(f"made-up-{n}") for n in range(20)] == [ResponseCode.SUCCESS] * 20
    assert set(broker.subscription_groups.table) == before
    assert ack("g", queue_id=5) == ResponseCode.MESSAGE_ILLEGAL  # the topic has one queue
    assert ack("g", offset=7) == ResponseCode.NO_MESSAGE  # past the queue's end
    batch = asyncio.run(processor.batch_ack(None, request(
        RequestCode.BATCH_ACK_MESSAGE, body=(
            b'{"brokerName": "broker-a", "acks": [{"c": "made-up-x", "t": "PopT", "r": "0",'
            b' "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 60000, "b": [1]}]}'))))
    assert batch.code == ResponseCode.SUCCESS
    assert set(broker.subscription_groups.table) == before


def test_a_pop_as_the_brokers_own_consumers_is_refused_and_moves_nothing(store_factory,
                                                                        tmp_path):
    # A POP as the revive group on the revive log moved the revive offset past checkpoints
    # still in flight: after a restart they were forgotten and never came back.
    broker, processor = _setup(store_factory, tmp_path, b"m0")
    handed = asyncio.run(processor.pop(None, _pop(invisible_ms=60_000)))
    assert handed.code == ResponseCode.SUCCESS
    revive_topic = broker.pop_revive.topic
    before = broker.offsets.query_offset("CID_RMQ_SYS_REVIVE_GROUP", revive_topic, 0)
    hostile = asyncio.run(processor.pop(None, request(RequestCode.POP_MESSAGE, {
        "consumerGroup": "CID_RMQ_SYS_REVIVE_GROUP", "topic": revive_topic, "queueId": 0,
        "maxMsgNums": 8, "invisibleTime": 5000, "pollTime": 0, "bornTime": 0, "initMode": 0,
        "expType": "TAG", "exp": "*", "order": False})))
    assert hostile.code == ResponseCode.NO_PERMISSION
    assert broker.offsets.query_offset("CID_RMQ_SYS_REVIVE_GROUP", revive_topic, 0) == before


def _fifo(broker):
    from cluster.broker.subscription_group import SubscriptionGroupConfig

    broker.subscription_groups.update(SubscriptionGroupConfig("CID-r",
                                                              consume_message_orderly=True))


def _handles(answer):
    """(extraInfo, queue offset) of what a POP answer handed out, as a client builds them."""
    from cluster.pop_handle import parse_start_offsets
    from storage.record import iter_records

    starts = parse_start_offsets(answer.ext_fields["startOffsetInfo"])
    pop_time, invisible = int(answer.ext_fields["popTime"]), int(answer.ext_fields["invisibleTime"])
    return [(ExtraInfo(starts[(False, r.queue_id)], pop_time, invisible, 0, False, "broker-a",
                       r.queue_id, r.queue_offset).encode(), r.queue_offset)
            for r in iter_records(answer.body)]


def _ack(processor, extra, offset):
    return asyncio.run(processor.ack(None, request(RequestCode.ACK_MESSAGE, {
        "consumerGroup": "CID-r", "topic": "PopT", "queueId": 0, "extraInfo": extra,
        "offset": offset}))).code


def _change(processor, extra, offset, invisible_ms):
    return asyncio.run(processor.change_invisible_time(None, request(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": "CID-r", "topic": "PopT", "queueId": 0, "extraInfo": extra,
            "offset": offset, "invisibleTime": invisible_ms})))


def test_a_fifo_ack_from_a_delivery_that_ran_out_does_not_free_the_next_one(
        store_factory, tmp_path, monkeypatch):
    # Consumer A's time ran out, B popped the queue again; A's late ack let the queue go while
    # B still worked on it, and C got the next message: the order broke.
    from cluster.broker import pop_processor

    clock = [1_700_000_000_000]
    monkeypatch.setattr(pop_processor, "now_ms", lambda: clock[0])
    broker, processor = _setup(store_factory, tmp_path, b"m0", b"m1")
    _fifo(broker)
    first = _handles(asyncio.run(processor.pop(None, _pop(1000, order=True, maxMsgNums=1))))
    clock[0] += 1500
    second = asyncio.run(processor.pop(None, _pop(60_000, order=True, maxMsgNums=1)))
    assert _handles(second)[0][1] == first[0][1]  # the same message, delivered again
    assert _ack(processor, *first[0]) == ResponseCode.SUCCESS  # (answered, as RocketMQ does)
    third = asyncio.run(processor.pop(None, _pop(60_000, order=True, maxMsgNums=1)))
    assert third.code == ResponseCode.PULL_NOT_FOUND  # still held by the second delivery
    assert _ack(processor, *_handles(second)[0]) == ResponseCode.SUCCESS
    fourth = asyncio.run(processor.pop(None, _pop(60_000, order=True, maxMsgNums=1)))
    assert [o for _, o in _handles(fourth)] == [1]


def test_a_fifo_message_made_visible_sooner_frees_the_queue_sooner(store_factory, tmp_path,
                                                                    monkeypatch):
    # The lock only ever grew: a consumer could not hand a message back early (and the
    # proxy's release of messages a cancelled receive never delivered did nothing).
    from cluster.broker import pop_processor

    clock = [1_700_000_000_000]
    monkeypatch.setattr(pop_processor, "now_ms", lambda: clock[0])
    broker, processor = _setup(store_factory, tmp_path, b"m0", b"m1")
    _fifo(broker)
    [(extra, offset)] = _handles(asyncio.run(processor.pop(None, _pop(60_000, order=True,
                                                                     maxMsgNums=1))))
    clock[0] += 100
    changed = _change(processor, extra, offset, 1000)
    assert changed.code == ResponseCode.SUCCESS
    # As RocketMQ answers: the delivery's pop time, the invisible time counted from it.
    assert changed.ext_fields["popTime"] == str(1_700_000_000_000)
    assert changed.ext_fields["invisibleTime"] == "1100"
    clock[0] += 1500
    again = asyncio.run(processor.pop(None, _pop(60_000, order=True, maxMsgNums=1)))
    assert [o for _, o in _handles(again)] == [offset]  # handed out again, 58 s early
    counts = again.ext_fields["orderCountInfo"]
    assert counts == f"0 qo0%{offset} 1;0 0 1"  # three fields an entry, as clients parse


def test_order_counts_read_back_as_rocketmqs_clients_read_them():
    from cluster.pop_handle import order_count_info, parse_order_counts

    text = order_count_info([(0, [5, 6]), (3, [9])], [(0, 5, 2)])
    assert text == "0 qo0%5 2;0 0 0;0 3 0"
    assert all(len(entry.split(" ")) == 3 for entry in text.split(";"))
    assert parse_order_counts(text) == {(0, 5): 2}


def test_a_held_fifo_pop_wakes_when_the_queue_is_let_go_and_times_out_as_polling_timeout(
        store_factory, tmp_path):
    # It waited for new arrivals only, the whole pollTime, then answered PULL_NOT_FOUND
    # without looking again (its POLLING_TIMEOUT could not be reached).
    import time

    from cluster.broker.long_polling import PullRequestHoldService

    broker, processor = _setup(store_factory, tmp_path, b"m0", b"m1", b"m2")
    _fifo(broker)

    async def main():
        broker.pull_hold = PullRequestHoldService(asyncio.get_running_loop())
        first = await processor.pop(None, _pop(60_000, order=True, maxMsgNums=2))
        held = asyncio.ensure_future(processor.pop(None, _pop(60_000, order=True,
                                                             maxMsgNums=2, pollTime=5000)))
        await asyncio.sleep(0.1)
        began = time.monotonic()
        for extra, offset in _handles(first):
            assert (await processor.ack(None, request(RequestCode.ACK_MESSAGE, {
                "consumerGroup": "CID-r", "topic": "PopT", "queueId": 0, "extraInfo": extra,
                "offset": offset}))).code == ResponseCode.SUCCESS
        woken = await held
        waited = time.monotonic() - began
        empty = await processor.pop(None, _pop(60_000, topic="PopT", order=False,
                                               consumerGroup="CID-other", pollTime=300,
                                               exp="nothing-has-this-tag"))
        return woken, waited, empty

    woken, waited, empty = asyncio.run(main())
    assert [o for _, o in _handles(woken)] == [2]
    assert waited < 1.0
    assert empty.code == ResponseCode.POLLING_TIMEOUT


def test_a_fifo_pop_retried_with_its_attempt_id_gets_the_same_messages_at_once(
        store_factory, tmp_path):
    # The proxy retries a receive whose answer was lost with the same attemptId; the queue
    # stayed locked for the whole invisible time, and that delivery counted as a failed one.
    broker, processor = _setup(store_factory, tmp_path, b"m0", b"m1")
    _fifo(broker)
    first = asyncio.run(processor.pop(None, _pop(60_000, order=True, attemptId="attempt-1")))
    again = asyncio.run(processor.pop(None, _pop(60_000, order=True, attemptId="attempt-1")))
    assert again.code == ResponseCode.SUCCESS
    assert [o for _, o in _handles(again)] == [o for _, o in _handles(first)]
    assert "qo" not in again.ext_fields["orderCountInfo"]  # not counted as delivered before
    other = asyncio.run(processor.pop(None, _pop(60_000, order=True, attemptId="attempt-2")))
    assert other.code == ResponseCode.PULL_NOT_FOUND  # another attempt waits for the lock


def test_pops_held_past_the_groups_limit_are_answered_polling_full(store_factory, tmp_path):
    # Held POPs were uncapped: a client pipelining thousands of them on many connections held
    # the broker's memory and had every arrival wake them all.
    from cluster.broker.long_polling import PullRequestHoldService

    broker, processor = _setup(store_factory, tmp_path)
    broker.config.pop_polling_size = 3

    async def main():
        broker.pull_hold = PullRequestHoldService(asyncio.get_running_loop())
        held = [asyncio.ensure_future(processor.pop(None, _pop(60_000, pollTime=300)))
                for _ in range(3)]
        await asyncio.sleep(0.05)
        full = await processor.pop(None, _pop(60_000, pollTime=300))
        other = asyncio.ensure_future(processor.pop(None, _pop(
            60_000, pollTime=300, consumerGroup="CID-other")))  # (its own limit)
        answers = await asyncio.gather(*held, other)
        return full, answers, broker.pull_hold.held_count()

    full, answers, left = asyncio.run(main())
    assert full.code == ResponseCode.POLLING_FULL
    assert {a.code for a in answers} == {ResponseCode.POLLING_TIMEOUT}
    assert left == 0
