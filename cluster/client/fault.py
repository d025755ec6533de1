"""The producer's latency fault tolerance (``LatencyFaultToleranceImpl`` / ``MQFaultStrategy``).

Every send updates its broker's item: the call's latency on success, 30 s ("isolation") on
failure; the broker is then unavailable for the duration the latency falls into:

    latencyMax           50   100   550     1000    2000     3000     15000   (ms)
    notAvailableDuration  0     0   30000   60000   120000   180000   600000  (ms)

so a failed send keeps a broker out for 10 minutes. ``items()`` is what the console charts.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from cluster.client.route import MessageQueue

LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
ISOLATION_LATENCY = 30_000


# (bound, duration) from the largest bound down; below the first bound with a duration, none.
_STEPS = tuple(zip(reversed(LATENCY_MAX), reversed(NOT_AVAILABLE_DURATION), strict=True))
_FREE_BELOW = min(b for b, d in zip(LATENCY_MAX, NOT_AVAILABLE_DURATION, strict=True) if d)


def compute_not_available_duration(latency_ms: float) -> int:
    if latency_ms < _FREE_BELOW:  # every send that went well: asked once a send
        return 0
    for bound, duration in _STEPS:
        if latency_ms >= bound:
            return duration
    return 0


@dataclass(slots=True)
class FaultItem:
    name: str
    current_latency: float
    start_timestamp: float  # ms: when the broker is expected to be available again

    def is_available(self, now_ms: float | None = None) -> bool:
        now_ms = time.time() * 1000 if now_ms is None else now_ms
        return now_ms - self.start_timestamp >= 0

    def sort_key(self, now_ms: float):
        return (not self.is_available(now_ms), self.current_latency, self.start_timestamp)


class LatencyFaultTolerance:
    def __init__(self, clock=time.time) -> None:
        self._items: dict[str, FaultItem] = {}
        self._lock = threading.Lock()
        self._which_item_worst = 0
        self._clock = clock
        # No item is unavailable past this time (ms): only a penalty (a failure, a slow send)
        # moves it, so while a producer's sends go well, choosing a queue asks no item.
        self.penalties_until = 0.0

    def _now_ms(self) -> float:
        return self._clock() * 1000

    def update_fault_item(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record a send's outcome for ``broker_name``."""
        latency = ISOLATION_LATENCY if isolation else latency_ms
        until = self._clock() * 1000  # (every send: the common case's arithmetic inline)
        penalty = latency >= _FREE_BELOW
        if penalty:
            until += compute_not_available_duration(latency)
        item = self._items.get(broker_name)
        if item is not None and not penalty:
            # A send that went well, on a broker already listed: in place, without the lock
            # (each attribute is set whole; a reader on another thread sorts and shows the
            # item either way).
            item.current_latency = latency
            item.start_timestamp = until
            return
        with self._lock:
            # (first: a queue chosen meanwhile on another thread asks the items)
            self.penalties_until = max(self.penalties_until, until)
            item = self._items.get(broker_name)
            if item is None:
                self._items[broker_name] = FaultItem(broker_name, latency, until)
            else:  # updated in place: a send a broker does not need an object
                item.current_latency = latency
                item.start_timestamp = until

    def is_available(self, broker_name: str) -> bool:
        item = self._items.get(broker_name)
        # (FaultItem.is_available, inline: asked for every send)
        return item is None or self._clock() * 1000 - item.start_timestamp >= 0

    def remove(self, broker_name: str) -> None:
        with self._lock:
            self._items.pop(broker_name, None)

    def pick_one_at_least(self) -> str | None:
        """The most likely available broker: shuffle, sort, rotate through the better half."""
        with self._lock:
            items = list(self._items.values())
        if not items:
            return None
        now = self._now_ms()
        random.shuffle(items)
        items.sort(key=lambda item: item.sort_key(now))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        self._which_item_worst += 1
        return items[self._which_item_worst % half].name

    def items(self) -> list[dict]:
        """Snapshot for display: broker, current latency, available-at time, available now."""
        now = self._now_ms()
        with self._lock:
            items = list(self._items.values())
        return [{"brokerName": i.name, "currentLatency": i.current_latency,
                 "notAvailableUntil": i.start_timestamp, "available": i.is_available(now)}
                for i in sorted(items, key=lambda i: i.name)]


def select_queue(info, last_broker_name: str | None, faults: LatencyFaultTolerance | None):
    """``MQFaultStrategy.selectOneMessageQueue``: with fault tolerance when ``faults`` is given."""
    if faults is None:
        return info.select_one(last_broker_name)
    queues = info.message_queues
    index = next(info.send_which_queue)
    if last_broker_name is None and queues and faults._clock() * 1000 >= faults.penalties_until:
        # No broker is penalized now (a producer's usual state): the loop below would take
        # this queue, asking each item on the way.
        return queues[abs(index) % len(queues)]
    for _ in range(len(queues)):
        mq = queues[abs(index) % len(queues)]
        index += 1
        # Unlike the 4.3 code the seed quotes (which kept a retry on the failed broker), a
        # retry here goes to another available broker, as 4.9 effectively does.
        if faults.is_available(mq.broker_name) and mq.broker_name != last_broker_name:
            return mq
    not_best = faults.pick_one_at_least()
    if not_best is not None:
        write_queues = info.write_queue_nums_of(not_best)
        if write_queues > 0:
            return MessageQueue(info.topic, not_best, next(info.send_which_queue) % write_queues)
        faults.remove(not_best)
    return info.select_one()
