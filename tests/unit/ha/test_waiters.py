"""ReplicaWaiters (GroupTransferService) and ByteRate."""

from __future__ import annotations

import asyncio
import time

from cluster.ha.master import ReplicaWaiters
from cluster.ha.rate import ByteRate


def test_waiters_are_released_by_the_acknowledgement_covering_them():
    async def main():
        waiters = ReplicaWaiters(asyncio.get_running_loop())
        a = waiters.wait(100, acked=0, timeout=5)
        b = waiters.wait(300, acked=0, timeout=5)
        c = waiters.wait(200, acked=0, timeout=5)
        waiters.notify(250)
        assert a.result() is True
        assert c.result() is True
        assert not b.done()
        assert len(waiters) == 1
        already = waiters.wait(50, acked=250, timeout=5)
        assert already.result() is True
        waiters.notify(300)
        assert b.result() is True

    asyncio.run(main())


def test_waiters_past_their_deadline_fail():
    async def main():
        waiters = ReplicaWaiters(asyncio.get_running_loop())
        late = waiters.wait(100, acked=0, timeout=0.0)
        fine = waiters.wait(200, acked=0, timeout=60)
        assert waiters.expire(time.monotonic() + 1) == 1
        assert late.result() is False
        assert not fine.done()
        waiters.fail_all()
        assert fine.result() is False

    asyncio.run(main())


def test_byte_rate_reports_the_last_whole_second():
    now = [100.0]
    rate = ByteRate(clock=lambda: now[0])
    rate.add(10)
    rate.add(5)
    assert rate.per_second() == 0  # the second is not over
    now[0] = 101.2
    assert rate.per_second() == 15
    now[0] = 103.5  # a silent second in between
    assert rate.per_second() == 0
    assert rate.total == 15
