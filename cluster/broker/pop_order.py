"""FIFO POP: a queue's next messages go out only after the ones before them are acked
(RocketMQ 5's ConsumerOrderInfoManager, config/consumerOrderInfo.json).

An orderly group (``consumeMessageOrderly``) popping a queue takes a *lock* on it for the group:
the offsets handed out and until when. While the lock holds, the queue is skipped; acks move the
group's offset over the acked prefix, and the last ack lets the queue go. A lock whose time runs
out lets the queue go too, and its unacked messages are handed out again, in the same order, with
their delivery counted; a message delivered as often as the group allows goes to the DLQ instead,
and the queue moves on. Nothing passes through a retry topic, so the order holds across
redeliveries, consumer restarts and broker restarts (the locks and counts are saved with the
offsets).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from cluster.broker.json_config import JsonConfigFile

QueueKey = tuple[str, str, int]  # group, topic, queue


@dataclass(slots=True)
class OrderLock:
    offsets: list[int]
    next_offset: int  # where the group reads once every offset here is acked
    pop_time: int  # the POP's: every handle of this delivery carries it
    deadline: int
    acked: set[int] = field(default_factory=set)
    # Offsets whose invisible time a client changed -> when they become visible (RocketMQ's
    # per-offset next visible time): shorter or longer than the POP's.
    visible: dict[int, int] = field(default_factory=dict)
    attempt_id: str = ""  # the POP's attemptId: its retry (a lost answer) is not a new delivery

    @property
    def done(self) -> bool:
        return all(o in self.acked for o in self.offsets)

    def holds_until(self) -> int:
        """The queue is held while any unacked message of it is still invisible."""
        return max((self.visible.get(o, self.deadline) for o in self.offsets
                    if o not in self.acked), default=self.deadline)

    def committed(self) -> int:
        """The group's offset after the acked prefix of the handed-out offsets."""
        for offset in self.offsets:
            if offset not in self.acked:
                return offset
        return self.next_offset


class OrderInfoManager:
    def __init__(self, path: str) -> None:
        self.file = JsonConfigFile(path)
        self.locks: dict[QueueKey, OrderLock] = {}
        self.counts: dict[QueueKey, dict[int, int]] = {}  # deliveries that ran out, per offset
        # Acked while one before them was not, when their lock ran out: not handed out again.
        self.acked_ahead: dict[QueueKey, set[int]] = {}
        self._dirty = False
        self._writing: asyncio.Future | None = None  # the last periodic write, in a thread

    # -- the rules ----------------------------------------------------------------------------
    def available(self, key: QueueKey, now: int, attempt_id: str | None = None) -> bool:
        """Whether the group may pop the queue now; a lock that ran out is released here, its
        unacked offsets counted as one more delivery each. A POP retrying the attempt that
        took the lock (the same ``attempt_id``: its answer was lost) may take the queue at
        once, and its delivery is not counted again (RocketMQ's checkBlock)."""
        lock = self.locks.get(key)
        if lock is None:
            return True
        retried = bool(attempt_id) and attempt_id == lock.attempt_id
        if lock.holds_until() > now and not lock.done and not retried:
            return False
        counts = self.counts.setdefault(key, {})
        for offset in lock.offsets:
            if offset not in lock.acked and not retried:
                counts[offset] = counts.get(offset, 0) + 1
        if not counts:
            del self.counts[key]
        committed = lock.committed()
        ahead = {o for o in lock.acked if o > committed}
        if ahead:
            self.acked_ahead.setdefault(key, set()).update(ahead)
        del self.locks[key]
        self._dirty = True
        return True

    def delivered(self, key: QueueKey, offset: int) -> int:
        """How many deliveries of this message ran out before."""
        return self.counts.get(key, {}).get(offset, 0)

    def was_acked(self, key: QueueKey, offset: int) -> bool:
        """Acked in an earlier delivery that ran out: skipped, never handed out again."""
        return offset in self.acked_ahead.get(key, ())

    def lock(self, key: QueueKey, offsets: list[int], next_offset: int, pop_time: int,
             invisible_time: int, acked: set[int] | None = None, attempt_id: str = "") -> None:
        """Hold the queue for ``offsets`` (``acked``: those among them acked before)."""
        self.locks[key] = OrderLock(offsets, next_offset, pop_time, pop_time + invisible_time,
                                    set(acked or ()), attempt_id=attempt_id)
        self._dirty = True

    def holds(self, key: QueueKey, offset: int, pop_time: int | None = None) -> bool:
        """Whether the lock holds ``offset`` unacked (for the delivery of ``pop_time``)."""
        lock = self.locks.get(key)
        return (lock is not None and offset in lock.offsets and offset not in lock.acked
                and (pop_time is None or pop_time == lock.pop_time))

    def ack(self, key: QueueKey, offset: int, pop_time: int | None = None) -> int | None:
        """Ack one message of the delivery of ``pop_time``; the group's new offset, or None if
        the lock does not hold it. An ack from an earlier delivery (its time ran out, the
        queue was popped again) is not this one's: taken, it would let the queue go while the
        new holder still works on it, and the order would break (RocketMQ ignores it too)."""
        if not self.holds(key, offset, pop_time):
            return None
        lock = self.locks[key]
        lock.acked.add(offset)
        committed = lock.committed()
        self.passed(key, committed)
        if lock.done:
            del self.locks[key]
        self._dirty = True
        return committed

    def passed(self, key: QueueKey, committed: int) -> None:
        """The group's offset reached ``committed``: forget what lies before it."""
        counts = self.counts.get(key)
        if counts:
            for done in [o for o in counts if o < committed]:
                del counts[done]
            if not counts:
                del self.counts[key]
        ahead = self.acked_ahead.get(key)
        if ahead:
            ahead.difference_update([o for o in ahead if o < committed])
            if not ahead:
                del self.acked_ahead[key]
        self._dirty = True

    def settle(self, key: QueueKey, offset: int) -> None:
        """A message that went to the DLQ: forget its count."""
        counts = self.counts.get(key)
        if counts is not None:
            counts.pop(offset, None)
            if not counts:
                del self.counts[key]
            self._dirty = True

    def change_invisible(self, key: QueueKey, offset: int, pop_time: int,
                         visible_at: int) -> int | None:
        """A changed invisible time of one message of the delivery of ``pop_time``: it becomes
        visible at ``visible_at``, sooner or later than before; the delivery's pop time, or
        None when the lock does not hold it."""
        if not self.holds(key, offset, pop_time):
            return None
        lock = self.locks[key]
        lock.visible[offset] = visible_at
        self._dirty = True
        return lock.pop_time

    def in_flight_by_queue(self, group: str) -> dict[tuple[str, int], int]:
        return {(topic, queue): len(lock.offsets) - len(lock.acked)
                for (g, topic, queue), lock in self.locks.items() if g == group}

    def in_flight(self) -> int:
        return sum(len(lock.offsets) - len(lock.acked) for lock in self.locks.values())

    # -- persistence --------------------------------------------------------------------------
    def load(self) -> None:
        data = self.file.load() or {}
        for entry in data.get("locks") or []:
            try:
                key = (str(entry["group"]), str(entry["topic"]), int(entry["queueId"]))
                self.locks[key] = OrderLock([int(o) for o in entry["offsets"]],
                                            int(entry["nextOffset"]), int(entry["popTime"]),
                                            int(entry["deadline"]),
                                            {int(o) for o in entry.get("acked", [])},
                                            {int(o): int(t) for o, t in
                                             (entry.get("visible") or {}).items()},
                                            str(entry.get("attemptId") or ""))
            except (KeyError, ValueError, TypeError):
                continue
        for entry in data.get("counts") or []:
            try:
                key = (str(entry["group"]), str(entry["topic"]), int(entry["queueId"]))
                table = {int(o): int(c) for o, c in entry["counts"].items()}
                ahead = {int(o) for o in entry.get("ackedAhead", [])}
            except (KeyError, ValueError, TypeError, AttributeError):
                continue
            if table:
                self.counts[key] = table
            if ahead:
                self.acked_ahead[key] = ahead

    def persist(self, force: bool = False) -> None:
        """Write the file if anything changed (``force``: anyway), on the calling thread."""
        text = self._text_to_write(force)
        if text is not None:
            self._write(text)

    async def persist_aside(self) -> None:
        """``persist``, the file written in a worker thread: the periodic write (every 5 s
        while FIFO POPs move) waited on the event loop for its fsync, 1.4 ms typically and up
        to 20 ms under load. The text is made here, on the loop that changes the tables."""
        text = self._text_to_write(False)
        if text is not None:
            self._writing = asyncio.ensure_future(asyncio.to_thread(self._write, text))
            await asyncio.shield(self._writing)

    async def persist_last(self) -> None:
        """The write at shutdown, after the periodic one under way (whose older text must not
        land after it)."""
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)
        self.persist()

    def _write(self, text: str) -> None:
        if not self.file.persist(text):
            self._dirty = True  # not on disk: the next round writes it again

    def _text_to_write(self, force: bool) -> str | None:
        if not self._dirty and not force:
            return None
        self._dirty = False
        locks = [{"group": g, "topic": t, "queueId": q, "offsets": lock.offsets,
                  "nextOffset": lock.next_offset, "popTime": lock.pop_time,
                  "deadline": lock.deadline, "acked": sorted(lock.acked),
                  "visible": {str(o): t for o, t in lock.visible.items()},
                  "attemptId": lock.attempt_id}
                 for (g, t, q), lock in self.locks.items()]
        counts = [{"group": g, "topic": t, "queueId": q,
                   "counts": {str(o): c for o, c in self.counts.get((g, t, q), {}).items()},
                   "ackedAhead": sorted(self.acked_ahead.get((g, t, q), ()))}
                  for (g, t, q) in set(self.counts) | set(self.acked_ahead)]
        return json.dumps({"locks": locks, "counts": counts}, indent=1)
