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
    import json

    from cluster.broker.client_bodies import parse_heartbeat

    def consumer(**fields):
        body = json.dumps({"clientID": "c", "consumerDataSet": [dict(groupName="g", **fields)]})
        return parse_heartbeat(body.encode(), "peer").consumers[0]

    assert consumer(consumeType=1).consume_type == "CONSUME_PASSIVELY"  # the C++ client's form
    assert consumer(messageModel="CLUSTERING").message_model == "CLUSTERING"  # Java's
    assert consumer(messageModel=1).message_model == "CLUSTERING"
    assert consumer(consumeFromWhere=4).consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    assert consumer(consumeFromWhere=None).consume_from_where == "CONSUME_FROM_LAST_OFFSET"
