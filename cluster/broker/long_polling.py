"""Long polling: a pull that finds nothing new waits until a message lands or time runs out.

Mirrors RocketMQ's ``PullRequestHoldService``, on the event loop: a held pull is a future keyed
by (topic, queueId) and the offset it waits past. Dispatch reports arrivals: on the loop
they wake the pulls waiting on that queue at once; from the store's dispatch thread they are
handed to the loop once per burst (not once per message).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class PullRequestHoldService:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # (topic, queueId) -> the pulls held on it, each the offset it waits past. (Dicts:
        # thousands of pulls held on one queue, as many connections' worth as a client opens,
        # each leave in one step; a list made every timeout walk all the others.)
        self._waiting: dict[tuple[str, int], dict[asyncio.Future, int]] = {}
        # POP waits on every queue of its topics at once: any arrival there wakes it. (Sets:
        # thousands of held POPs leaving together each leave in one step.)
        self._topic_waiting: dict[str, set[asyncio.Future]] = {}
        self.pops_held = 0  # POPs waiting (each on its topic and retry topic)
        self._arrived: dict[tuple[str, int], int] = {}
        self._arrived_lock = threading.Lock()
        self._scheduled = False
        self._loop_thread = threading.get_ident()  # built on the loop it serves

    async def wait_for_arrival(self, topic: str, queue_id: int, offset: int, timeout: float,
                               max_offset: Callable[[], int] | None = None) -> bool:
        """Wait until the queue's max offset passes ``offset``; False on timeout.

        ``max_offset`` (the queue's now) is asked once the wait is registered: a caller that
        found the queue empty a moment before (a pull answered outside this coroutine) learns
        of what landed in between, which no arrival will report again."""
        future = self.loop.create_future()
        key = (topic, queue_id)
        self._waiting.setdefault(key, {})[future] = offset
        try:
            if max_offset is not None and max_offset() > offset:
                return True
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            return False
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.pop(future, None)
                if not waiters:
                    del self._waiting[key]

    async def wait_for_topics(self, topics: list[str], timeout: float) -> bool:
        """Wait until a message lands in any queue of ``topics``; False on timeout."""
        future = self.loop.create_future()
        for topic in topics:
            self._topic_waiting.setdefault(topic, set()).add(future)
        self.pops_held += 1
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            return False
        finally:
            self.pops_held -= 1
            for topic in topics:
                waiters = self._topic_waiting.get(topic)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._topic_waiting[topic]

    def pops_held_on(self, topic: str) -> int:
        return len(self._topic_waiting.get(topic, ()))

    def wake_topic(self, topic: str) -> None:
        """Wake the POPs waiting on ``topic`` (on the loop): a FIFO queue of it was let go."""
        for future in self._topic_waiting.get(topic, ()):
            if not future.done():
                future.set_result(True)

    def notify_arrivals(self, arrivals) -> None:
        """Dispatch's arrival listener (storage.dispatch.Arrivals: a round's queues, each with
        its newest record), on the loop or on the dispatch thread."""
        if threading.get_ident() == self._loop_thread and not self._waiting \
                and not self._topic_waiting:
            return  # (on the loop nothing starts waiting meanwhile: nobody to wake)
        for arrival in arrivals:
            try:
                self.notify_from_thread(arrival.topic, arrival.queue_id,
                                        arrival.consume_queue_offset + 1)
            except Exception:  # (one queue's failure must not keep the others' pulls waiting)
                log.exception("waking the pulls held on %s-%d failed", arrival.topic,
                              arrival.queue_id)

    def notify_from_thread(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called by dispatch for every new message, on the loop or on the dispatch thread."""
        if threading.get_ident() == self._loop_thread:
            # On the loop nothing can start waiting between this check and the wakeup, so a
            # queue nobody waits on costs nothing (the common case under a steady load).
            if (topic, queue_id) in self._waiting or topic in self._topic_waiting:
                self.notify(topic, queue_id, max_offset)
            return
        with self._arrived_lock:
            key = (topic, queue_id)
            if max_offset > self._arrived.get(key, -1):
                self._arrived[key] = max_offset
            if self._scheduled:
                return
            self._scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._arrived_lock:
            arrived, self._arrived = self._arrived, {}
            self._scheduled = False
        for key, max_offset in arrived.items():
            self.notify(key[0], key[1], max_offset)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Wake pulls on the queue waiting for offsets below ``max_offset``."""
        for future, offset in self._waiting.get((topic, queue_id), {}).items():
            if max_offset > offset and not future.done():
                future.set_result(True)
        for future in self._topic_waiting.get(topic, ()):
            if not future.done():
                future.set_result(True)

    def held_count(self) -> int:
        return sum(len(v) for v in self._waiting.values()) + self.pops_held
