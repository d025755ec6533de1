"""FIFO POP's queue locks: a queue waits for the acks of what it handed out; a lock that runs out
counts one more delivery of each unacked message; acks move the offset over the acked prefix;
everything reads back from consumerOrderInfo.json, written periodically off the event loop."""

from __future__ import annotations

import asyncio

from cluster.broker.controller import BrokerController
from cluster.broker.pop_order import OrderInfoManager
from tests.unit.broker.periodic_writes import write_aside_then_stop

KEY = ("CID-fifo", "TopicTest", 0)


def test_a_locked_queue_waits_until_everything_is_acked(tmp_path):
    order = OrderInfoManager(str(tmp_path / "consumerOrderInfo.json"))
    assert order.available(KEY, now=1_000)
    order.lock(KEY, [5, 6, 7], next_offset=8, pop_time=1_000, invisible_time=30_000)
    assert not order.available(KEY, now=2_000)
    assert order.ack(KEY, 6) == 5  # out of order: the offset stays before the unacked 5
    assert order.ack(KEY, 5) == 7
    assert not order.available(KEY, now=3_000)
    assert order.ack(KEY, 7) == 8  # the last one: the queue is free and the offset past it
    assert order.available(KEY, now=3_000)
    assert order.ack(KEY, 7) is None  # not held any more


def test_a_lock_that_runs_out_counts_a_delivery_of_each_unacked_message(tmp_path):
    order = OrderInfoManager(str(tmp_path / "consumerOrderInfo.json"))
    order.lock(KEY, [5, 6], next_offset=7, pop_time=1_000, invisible_time=2_000)
    order.ack(KEY, 5)
    assert order.available(KEY, now=3_000)  # ran out: released
    assert (order.delivered(KEY, 5), order.delivered(KEY, 6)) == (0, 1)
    order.lock(KEY, [6], next_offset=7, pop_time=3_000, invisible_time=2_000)
    assert order.available(KEY, now=5_000)
    assert order.delivered(KEY, 6) == 2
    order.settle(KEY, 6)  # dead-lettered
    assert order.delivered(KEY, 6) == 0


def test_a_changed_invisible_time_moves_the_lock_either_way(tmp_path):
    order = OrderInfoManager(str(tmp_path / "consumerOrderInfo.json"))
    order.lock(KEY, [5, 6], next_offset=7, pop_time=1_000, invisible_time=2_000)
    assert order.change_invisible(KEY, 5, 1_000, visible_at=10_000) == 1_000
    assert not order.available(KEY, now=5_000)  # 5 is invisible until 10 s
    assert order.change_invisible(KEY, 5, 1_000, visible_at=2_500) == 1_000  # sooner
    assert order.available(KEY, now=3_500)  # both visible again: the queue is let go
    order.lock(KEY, [5], next_offset=6, pop_time=4_000, invisible_time=2_000)
    assert order.change_invisible(KEY, 9, 4_000, visible_at=20_000) is None  # not in the lock
    assert order.change_invisible(KEY, 5, 1_000, visible_at=20_000) is None  # an old delivery's


def test_locks_and_counts_read_back_after_a_restart(tmp_path):
    path = str(tmp_path / "consumerOrderInfo.json")
    order = OrderInfoManager(path)
    order.lock(KEY, [5, 6], next_offset=7, pop_time=1_000, invisible_time=2_000)
    order.available(KEY, now=4_000)
    order.lock(KEY, [5, 6], next_offset=7, pop_time=4_000, invisible_time=60_000)
    order.ack(KEY, 5)
    order.persist()
    again = OrderInfoManager(path)
    again.load()
    assert not again.available(KEY, now=5_000)
    assert again.delivered(KEY, 6) == 1
    assert again.in_flight() == 1
    assert again.ack(KEY, 6) == 7


def test_what_was_acked_out_of_order_is_not_handed_out_again(tmp_path):
    path = str(tmp_path / "consumerOrderInfo.json")
    order = OrderInfoManager(path)
    order.lock(KEY, [5, 6, 7], next_offset=8, pop_time=1_000, invisible_time=2_000)
    assert order.ack(KEY, 6) == 5  # 5 not acked: the offset stays
    assert order.available(KEY, now=4_000)  # ran out
    assert order.was_acked(KEY, 6)
    assert not order.was_acked(KEY, 5)
    assert not order.was_acked(KEY, 7)
    order.persist()
    again = OrderInfoManager(path)
    again.load()
    assert again.was_acked(KEY, 6)
    # Redelivered: 5 and 7 go out, 6 is held as acked; acking 5 and 7 moves the offset past all.
    again.lock(KEY, [5, 6, 7], next_offset=8, pop_time=4_000, invisible_time=2_000, acked={6})
    assert again.ack(KEY, 5) == 7
    assert again.ack(KEY, 7) == 8
    assert not again.was_acked(KEY, 6)


def test_the_periodic_write_is_off_the_loop_and_the_last_write_keeps_the_newest(tmp_path):
    # The periodic write's fsync runs in a worker thread; the write at shutdown waits for it,
    # so the file ends with the locks as they were last, not as the slow write saw them.
    path = str(tmp_path / "consumerOrderInfo.json")
    order = OrderInfoManager(path)
    order.lock(KEY, [5, 6], next_offset=7, pop_time=1_000, invisible_time=30_000)
    written = write_aside_then_stop(order.file, order.persist_aside,
                                    lambda: order.ack(KEY, 5), order.persist_last)
    assert len(written) == 2
    again = OrderInfoManager(path)
    again.load()
    assert again.locks[KEY].acked == {5}  # the newest, written last


def test_the_brokers_periodic_round_runs_a_write_made_aside(tmp_path):
    path = str(tmp_path / "consumerOrderInfo.json")
    order = OrderInfoManager(path)
    order.lock(KEY, [5], next_offset=6, pop_time=1_000, invisible_time=30_000)

    async def scenario() -> None:
        every = asyncio.ensure_future(BrokerController._every(None, 0.01, order.persist_aside))
        await asyncio.sleep(0.3)
        every.cancel()
        await asyncio.gather(every, return_exceptions=True)

    asyncio.run(scenario())
    again = OrderInfoManager(path)
    again.load()
    assert KEY in again.locks
