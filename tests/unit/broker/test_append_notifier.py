"""Dispatch on the event loop: a burst of puts is dispatched once, after the burst, without
the store's dispatch thread (issue 14: no thread handoff per message)."""

from __future__ import annotations

import asyncio
import threading

from cluster.broker.append_notifier import AppendNotifier
from cluster.broker.long_polling import PullRequestHoldService
from tests.conftest import make_message


def _queue_max(store, topic="TopicTest", queue_id=0) -> int:
    return store.get_max_offset_in_queue(topic, queue_id)


def test_a_burst_is_dispatched_on_the_loop_after_the_burst(store_factory):
    # Not started: no dispatch thread runs, so only the loop can dispatch these.
    store = store_factory(start=False)
    woken = []
    store.reput.wakeup = lambda: woken.append(threading.get_ident())

    async def scenario() -> tuple[int, int, int]:
        notifier = AppendNotifier(asyncio.get_running_loop(), store)
        store.commit_log.on_append = notifier.on_append
        rounds = []
        notifier.after_dispatch.append(lambda: rounds.append(_queue_max(store)))
        for i in range(10):
            store.put_message_nowait(make_message(body=b"m%d" % i, keys=f"k{i}"))
        during = _queue_max(store)  # the burst is not dispatched while it is being put
        await asyncio.sleep(0)
        return during, _queue_max(store), len(rounds)

    during, after, rounds = asyncio.run(scenario())
    assert during == 0
    assert after == 10
    assert rounds == 1  # one dispatch (and one HA wakeup) for the whole burst
    assert woken == []  # the dispatch thread was not woken
    assert store.query_message("TopicTest", "k7", 4).messages  # the index too


def test_appends_from_another_thread_wake_the_dispatch_thread(store_factory):
    store = store_factory(start=False)
    woken = []
    store.reput.wakeup = lambda: woken.append(True)

    async def scenario() -> None:
        notifier = AppendNotifier(asyncio.get_running_loop(), store)
        store.commit_log.on_append = notifier.on_append
        await asyncio.to_thread(store.put_message_nowait, make_message())

    asyncio.run(scenario())
    assert woken == [True]


def test_an_arrival_on_the_loop_wakes_a_held_pull_at_once():
    async def scenario() -> bool:
        hold = PullRequestHoldService(asyncio.get_running_loop())
        waiting = asyncio.ensure_future(hold.wait_for_arrival("T", 0, 5, timeout=5))
        await asyncio.sleep(0)
        hold.notify_from_thread("T", 1, 9)  # another queue: nothing happens
        hold.notify_from_thread("T", 0, 6)
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(scenario()) is True


def test_a_round_of_arrivals_wakes_the_pulls_held_on_its_queues_and_costs_nothing_idle():
    from storage.dispatch import Arrivals

    class Untouchable:
        def __iter__(self):
            raise AssertionError("arrivals read with no pull waiting")

    async def scenario() -> bool:
        hold = PullRequestHoldService(asyncio.get_running_loop())
        hold.notify_arrivals(Untouchable())  # nobody waits: not even read
        waiting = asyncio.ensure_future(hold.wait_for_arrival("T", 0, 5, timeout=5))
        await asyncio.sleep(0)
        # (an appended entry: offset, size, store time, queue offset, topic, queue id, ...)
        hold.notify_arrivals(Arrivals({("T", 1): (100, 10, 0, 8, "T", 1, 0, 0, ""),
                                       ("T", 0): (110, 10, 0, 4, "T", 0, 0, 0, "")}))
        assert not waiting.done()  # (queue 0 now ends at 5: nothing past the pull's offset)
        hold.notify_arrivals(Arrivals({("T", 0): (120, 10, 0, 5, "T", 0, 0, 0, "")}))
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(scenario()) is True


def test_a_backlog_in_the_log_is_left_to_the_dispatch_thread(store_factory):
    # Records the put path did not just hand over (a restart's backlog, a slave's replicated
    # bytes) must be decoded from the log: however many, that is the thread's work, never the
    # event loop's.
    store = store_factory(start=False)
    for i in range(20):
        store.put_message_nowait(make_message(body=b"old%d" % i))
    store.commit_log.appended.clear()  # only the log holds them now
    woken = []
    store.reput.wakeup = lambda: woken.append(True)

    async def scenario() -> None:
        notifier = AppendNotifier(asyncio.get_running_loop(), store)
        store.commit_log.on_append = notifier.on_append
        store.put_message_nowait(make_message(body=b"new"))
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert _queue_max(store) == 0  # nothing dispatched on the loop
    assert woken  # the thread was told
    assert store.reput.do_reput() == 21  # and it dispatches the backlog and the new record
    assert _queue_max(store) == 21


def test_a_wait_whose_queue_check_fails_leaves_no_waiter_behind():
    async def scenario() -> int:
        hold = PullRequestHoldService(asyncio.get_running_loop())

        def broken() -> int:
            raise OSError("the queue's file is gone")

        try:
            await hold.wait_for_arrival("T", 0, 5, timeout=5, max_offset=broken)
        except OSError:
            pass
        return hold.held_count()

    assert asyncio.run(scenario()) == 0


def test_a_wait_for_what_already_landed_ends_at_once():
    async def scenario() -> tuple[bool, int]:
        hold = PullRequestHoldService(asyncio.get_running_loop())
        landed = await asyncio.wait_for(
            hold.wait_for_arrival("T", 0, 5, timeout=5, max_offset=lambda: 6), 1)
        return landed, hold.held_count()

    assert asyncio.run(scenario()) == (True, 0)


def test_arrivals_from_the_dispatch_thread_wake_held_pulls_and_pops():
    from storage.dispatch import Arrivals

    async def scenario() -> tuple[bool, bool]:
        hold = PullRequestHoldService(asyncio.get_running_loop())
        pull = asyncio.ensure_future(hold.wait_for_arrival("T", 2, 0, timeout=5))
        pop = asyncio.ensure_future(hold.wait_for_topics(["P"], timeout=5))
        await asyncio.sleep(0)
        arrivals = Arrivals({("T", 2): (0, 10, 0, 0, "T", 2, 0, 0, ""),
                             ("P", 5): (10, 10, 0, 0, "P", 5, 0, 0, "")})
        await asyncio.to_thread(hold.notify_arrivals, arrivals)
        return await asyncio.wait_for(pull, 1), await asyncio.wait_for(pop, 1)

    assert asyncio.run(scenario()) == (True, True)


def test_a_queue_whose_wakeup_fails_leaves_the_rest_of_the_round_woken(monkeypatch):
    from storage.dispatch import Arrivals

    async def scenario() -> bool:
        hold = PullRequestHoldService(asyncio.get_running_loop())
        waiting = asyncio.ensure_future(hold.wait_for_arrival("T", 1, 0, timeout=5))
        await asyncio.sleep(0)
        notify = hold.notify_from_thread

        def failing_for_queue_0(topic, queue_id, max_offset):
            if queue_id == 0:
                raise RuntimeError("wakeup bug")
            notify(topic, queue_id, max_offset)

        monkeypatch.setattr(hold, "notify_from_thread", failing_for_queue_0)
        hold.notify_arrivals(Arrivals({("T", 0): (0, 10, 0, 0, "T", 0, 0, 0, ""),
                                       ("T", 1): (10, 10, 0, 0, "T", 1, 0, 0, "")}))
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(scenario()) is True


def test_a_slave_copies_its_masters_topics_when_dispatch_meets_one_it_lacks():
    from types import SimpleNamespace

    from cluster.broker.controller import BrokerController
    from storage.dispatch import Arrivals

    synced = []
    broker = SimpleNamespace(
        slave_sync=SimpleNamespace(sync_soon=lambda: synced.append(True)),
        topics=SimpleNamespace(select=lambda topic: None if topic == "New" else object()))
    BrokerController._on_replicated_topics(
        broker, Arrivals({("Known", 0): (0, 10, 0, 0, "Known", 0, 0, 0, "")}))
    assert synced == []
    BrokerController._on_replicated_topics(
        broker, Arrivals({("Known", 0): (0, 10, 0, 0, "Known", 0, 0, 0, ""),
                          ("New", 1): (10, 10, 0, 0, "New", 1, 0, 0, "")}))
    assert synced == [True]
