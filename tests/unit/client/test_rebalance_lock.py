"""Orderly-consumption queue locks: one holder per queue, expiring after 60 s."""

from cluster.broker.rebalance_lock import RebalanceLockManager

MQ = {"topic": "T", "brokerName": "b", "queueId": 1}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_locked_queue_goes_to_nobody_else_until_it_expires_or_is_unlocked():
    clock = Clock()
    locks = RebalanceLockManager(clock)
    assert locks.try_lock_batch("g", [MQ], "c1") == [MQ]
    assert locks.try_lock_batch("g", [MQ], "c2") == []
    assert locks.try_lock_batch("g", [MQ], "c1") == [MQ]  # renewing is allowed
    clock.now += 61
    assert locks.try_lock_batch("g", [MQ], "c2") == [MQ]
    locks.unlock_batch("g", [MQ], "c1")  # not the holder: nothing happens
    assert locks.holder("g", MQ) == "c2"
    locks.unlock_batch("g", [MQ], "c2")
    assert locks.holder("g", MQ) is None
    assert locks.try_lock_batch("other-group", [MQ], "c3") == [MQ]
