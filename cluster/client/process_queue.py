"""ProcessQueue: the state of one queue a push consumer owns (RocketMQ's ``ProcessQueue``):
where its next pull starts, which pulled offsets are still being consumed, whether a rebalance
dropped it, and, for orderly consumption, whether its broker lock is held.

The committed offset of a queue is the smallest offset still in flight (or the next offset
when none is): what a listener still runs on when the queue is dropped is consumed again by
its next owner.
"""

from __future__ import annotations

# RebalanceImpl's REBALANCE_LOCK_MAX_LIVE_TIME: a lock not renewed for 30 s is not trusted to be
# held any more (the renewals failed: the broker may have given the queue to another client).
ORDERLY_LOCK_MAX_LIVE = 30.0
# Flow control of a queue (pullThresholdForQueue, consumeConcurrentlyMaxSpan): messages waiting
# to be consumed again hold the committed offset back; past these the queue pulls no more.
PULL_THRESHOLD_FOR_QUEUE = 1000
CONSUME_MAX_SPAN = 2000


class ProcessQueue:
    """Offsets of one queue being consumed: what was pulled and is not yet done."""

    def __init__(self, offset: int) -> None:
        self.next_offset = offset
        self.in_flight: set[int] = set()
        self.dropped = False
        self.consumed = 0
        self.suggest_broker_id = 0  # where the broker said to pull next (pullFromWhichNodeTable)
        # Orderly: whether the broker granted this client the queue at the last ask, and when.
        self.locked = False
        self.last_lock_time = 0.0  # time.monotonic()
        # The pull task is inside the listener: a drop lets it finish (see consumer.py's rules).
        self.consuming = False
        self.unlock_when_done = False  # orderly, dropped mid-listener: unlock once it returns

    def committed_offset(self) -> int:
        return min(self.in_flight) if self.in_flight else self.next_offset

    def lock_fresh(self, now: float) -> bool:
        return self.locked and now - self.last_lock_time < ORDERLY_LOCK_MAX_LIVE

    def flow_controlled(self) -> bool:
        in_flight = self.in_flight
        return len(in_flight) >= PULL_THRESHOLD_FOR_QUEUE or (
            bool(in_flight) and max(in_flight) - min(in_flight) > CONSUME_MAX_SPAN)
