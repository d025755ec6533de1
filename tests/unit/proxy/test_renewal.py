"""The proxy's renewal rounds (cluster/proxy/renewal.py) against a scripted broker: which
handles are changed, when, for how long, and what becomes of a renewal when its change fails or
an ack comes first. (tests/integration/test_proxy_renewal.py runs them against a real broker.)"""

from __future__ import annotations

import asyncio
import dataclasses

from cluster.pop_handle import ExtraInfo
from cluster.proxy.renewal import (
    AUTO_RENEW_INVISIBLE_MS,
    RELEASE_MS,
    RENEW_MAX_MS,
    RENEW_RETRIES,
    RENEW_STEPS_MS,
    ChangeRefused,
    HandleRenewals,
    retry_delay_ms,
)
from cluster.remoting.errors import RemotingError

NOW = 1_700_000_000_000
DUE = NOW + AUTO_RENEW_INVISIBLE_MS - 5_000  # a round 5 s before the first handles run out


def _extra(broker: str = "b1", offset: int = 0) -> ExtraInfo:
    return ExtraInfo(offset, NOW, AUTO_RENEW_INVISIBLE_MS, 0, False, broker, 0, offset)


class Broker:
    """Answers changes as a broker would (a new handle from ``at``), or as scripted."""

    def __init__(self) -> None:
        self.calls: list[tuple[ExtraInfo, int]] = []
        self.failures: list[Exception] = []  # raised by the next changes, in turn
        self.held: dict[str, asyncio.Event] = {}  # broker name -> released when set
        self.at = DUE

    async def change(self, group: str, topic: str, extra: ExtraInfo, invisible_ms: int):
        self.calls.append((extra, invisible_ms))
        if extra.broker_name in self.held:
            await self.held[extra.broker_name].wait()
        if self.failures:
            raise self.failures.pop(0)
        return dataclasses.replace(extra, pop_time=self.at, invisible_time=invisible_ms)


def _renewals(broker: Broker, **kwargs) -> HandleRenewals:
    return HandleRenewals(broker.change, **kwargs)


async def _settle() -> None:
    """Let every task that can run, run (the round's changes are tasks of their own)."""
    for _ in range(20):
        await asyncio.sleep(0)


def _known(client_id: str) -> bool:
    return client_id != "gone"


def test_a_due_handle_is_renewed_for_the_next_step_and_acked_with_the_new_one():
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra(), NOW)
        assert await renewals.renew_once(NOW, _known) == 0  # not due yet
        assert await renewals.renew_once(DUE, _known) == 1
        assert broker.calls[-1][1] == RENEW_STEPS_MS[0]
        renewal = await renewals.take("g", "h1")
        assert renewal is not None
        assert renewal.current.pop_time == DUE
        assert not renewals.table
    asyncio.run(main())


def test_a_broker_out_of_reach_keeps_the_renewal_until_it_failed_three_times_in_a_row():
    # One failed change dropped the renewal: the message came back while being consumed.
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra(), NOW)
        broker.failures = [RemotingError("unreachable")]
        assert await renewals.renew_once(DUE, _known) == 0
        assert ("g", "h1") in renewals.table  # kept, handle unchanged, tried again next round
        assert renewals.table[("g", "h1")].current == _extra()
        assert await renewals.renew_once(DUE + 5_000, _known) == 1
        assert renewals.table[("g", "h1")].failures == 0
        renewal = renewals.table[("g", "h1")]
        broker.at = renewal.current.deadline - 5_000
        broker.failures = [RemotingError("unreachable")] * RENEW_RETRIES
        for attempt in range(RENEW_RETRIES):
            assert ("g", "h1") in renewals.table, attempt
            await renewals.renew_once(broker.at + attempt, _known)
        assert ("g", "h1") not in renewals.table  # given up: it comes back when its time is up
    asyncio.run(main())


def test_a_refused_change_ends_the_renewal():
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra(), NOW)
        broker.failures = [ChangeRefused("the handle is stale")]
        assert await renewals.renew_once(DUE, _known) == 0
        assert not renewals.table
    asyncio.run(main())


def test_one_slow_broker_does_not_hold_back_the_others_renewals():
    # The changes ran one after another: a broker slow to answer delayed every renewal behind
    # it, past their handles' time.
    async def main():
        broker = Broker()
        broker.held["slow"] = asyncio.Event()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h-slow", _extra("slow"), NOW)
        renewals.add("c1", "g", "T", "h-fast", _extra("fast", 1), NOW)
        round_ = asyncio.ensure_future(renewals.renew_once(DUE, _known))
        await _settle()
        assert renewals.table[("g", "h-fast")].current.pop_time == DUE  # renewed meanwhile
        broker.held["slow"].set()
        assert await round_ == 2
    asyncio.run(main())


def test_an_ack_during_a_change_waits_and_gets_the_new_handle():
    async def main():
        broker = Broker()
        broker.held["b1"] = asyncio.Event()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra(), NOW)
        round_ = asyncio.ensure_future(renewals.renew_once(DUE, _known))
        await _settle()
        taking = asyncio.ensure_future(renewals.take("g", "h1"))
        await _settle()
        assert not taking.done()
        broker.held["b1"].set()
        renewal = await taking
        assert renewal is not None
        assert renewal.current.pop_time == DUE
        await round_
        assert not renewals.table
    asyncio.run(main())


def test_a_renewal_acked_while_its_round_waits_is_not_changed():
    # The round worked from a list taken before its first await: a renewal acked meanwhile
    # was still changed, with the handle the ack had just used.
    async def main():
        broker = Broker()
        broker.held["b1"] = asyncio.Event()
        renewals = _renewals(broker, concurrency=1)
        renewals.add("c1", "g", "T", "h1", _extra("b1", 0), NOW)
        renewals.add("c1", "g", "T", "h2", _extra("b2", 1), NOW)
        round_ = asyncio.ensure_future(renewals.renew_once(DUE, _known))
        await _settle()
        assert len(broker.calls) == 1  # h1's change holds the one slot
        assert await renewals.take("g", "h2") is not None
        broker.held["b1"].set()
        assert await round_ == 1
        assert [extra.broker_name for extra, _ in broker.calls] == ["b1"]
    asyncio.run(main())


def test_a_gone_clients_messages_go_back_in_a_second():
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("gone", "g", "T", "h1", _extra(), NOW)
        await renewals.renew_once(DUE, _known)
        assert broker.calls[-1][1] == RELEASE_MS
        assert not renewals.table
    asyncio.run(main())


def test_a_client_that_leaves_has_its_messages_released_at_once_and_no_one_elses():
    # A FIFO push consumer that shut down held its queues until its handles' next round.
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra("b1", 0), NOW)
        renewals.add("c1", "g", "T", "h2", _extra("b1", 1), NOW)
        renewals.add("c2", "g", "T", "h3", _extra("b1", 2), NOW)
        assert await renewals.release_client("c1") == 2
        assert [ms for _, ms in broker.calls] == [RELEASE_MS, RELEASE_MS]
        assert list(renewals.table) == [("g", "h3")]
    asyncio.run(main())


def test_a_message_renewed_for_three_hours_comes_back_after_its_groups_retry_delay():
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra(), NOW, reconsume_times=1)
        assert await renewals.renew_once(NOW + RENEW_MAX_MS, _known) == 1
        assert broker.calls[-1][1] == retry_delay_ms(1) == 30_000  # the 4th level, as RocketMQ
        assert not renewals.table
    asyncio.run(main())


def test_a_renewal_taken_for_an_ack_that_failed_is_renewed_again_once_restored():
    async def main():
        broker = Broker()
        renewals = _renewals(broker)
        renewals.add("c1", "g", "T", "h1", _extra(), NOW)
        renewal = await renewals.take("g", "h1")
        assert renewal is not None
        renewals.restore("g", "h1", renewal)
        assert await renewals.renew_once(DUE, _known) == 1
    asyncio.run(main())


def test_one_client_cannot_take_the_tables_room_from_the_others():
    # 200,000 handles in all: one client receiving with auto_renew, without end, left no room
    # for any other push consumer's messages, which then came back while being consumed.
    async def main():
        broker = Broker()
        renewals = _renewals(broker, client_limit=3)
        for number in range(5):
            renewals.add("greedy", "g", "T", f"h{number}", _extra(offset=number), NOW)
        renewals.add("other", "g", "T", "mine", _extra(offset=9), NOW)
        assert len(renewals.table) == 4
        assert ("g", "mine") in renewals.table
        await renewals.take("g", "h0")
        renewals.add("greedy", "g", "T", "h5", _extra(offset=5), NOW)  # room again
        assert ("g", "h5") in renewals.table
        await renewals.release_client("greedy")
        broker.failures = [ChangeRefused("stale")]
        await renewals.renew_once(DUE, _known)  # the other's renewal refused: dropped
        assert not renewals.table
        assert not renewals._of_client  # every way out counted
    asyncio.run(main())
