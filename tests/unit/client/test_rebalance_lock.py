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


def test_heartbeat_enums_are_read_as_names_or_ordinals():
    from cluster.broker.client_processor import CONSUME_FROM, CONSUME_TYPES, MESSAGE_MODELS, enum_name

    assert enum_name(1, CONSUME_TYPES, "?") == "CONSUME_PASSIVELY"  # the C++ client's form
    assert enum_name("CLUSTERING", MESSAGE_MODELS, "?") == "CLUSTERING"  # Java's
    assert enum_name(1, MESSAGE_MODELS, "?") == "CLUSTERING"
    assert enum_name(4, CONSUME_FROM, "?") == "CONSUME_FROM_FIRST_OFFSET"
    assert enum_name(None, CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET") == "CONSUME_FROM_LAST_OFFSET"
