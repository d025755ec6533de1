"""Queue locks for orderly consumption (``RebalanceLockManager``): one client per queue, 60 s."""

from __future__ import annotations

import time

LOCK_MAX_LIVE_SECONDS = 60.0  # rocketmq.broker.rebalance.lockMaxLiveTime


class RebalanceLockManager:
    def __init__(self, clock=time.monotonic, max_live_seconds: float = LOCK_MAX_LIVE_SECONDS) -> None:
        self._locks: dict[tuple[str, str, str, int], tuple[str, float]] = {}
        self._clock = clock
        self.max_live_seconds = max_live_seconds

    def _key(self, group: str, mq: dict) -> tuple[str, str, str, int]:
        return (group, str(mq.get("topic")), str(mq.get("brokerName")), int(mq.get("queueId", 0)))

    def try_lock_batch(self, group: str, mqs: list[dict], client_id: str) -> list[dict]:
        """Lock what is free, expired or already ours; returns the queues this client holds."""
        now = self._clock()
        locked = []
        for mq in mqs:
            key = self._key(group, mq)
            holder = self._locks.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > self.max_live_seconds:
                self._locks[key] = (client_id, now)
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, mqs: list[dict], client_id: str) -> None:
        for mq in mqs:
            key = self._key(group, mq)
            holder = self._locks.get(key)
            if holder is not None and holder[0] == client_id:
                del self._locks[key]

    def holder(self, group: str, mq: dict) -> str | None:
        holder = self._locks.get(self._key(group, mq))
        if holder is None or self._clock() - holder[1] > self.max_live_seconds:
            return None
        return holder[0]
