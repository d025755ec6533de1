"""Answering SYNC_FLUSH and SYNC_MASTER sends once their messages are as durable as the
broker's roles ask, a burst at a time.

Every send of one event-loop iteration that must wait (for the group commit, for a slave, or
both) joins that iteration's burst, and the burst waits once: for the newest group-commit
request of its sends (flushes go in log order, so it covers every older one) and for one slave
acknowledgement of its newest offset. Then each send of it is answered with its own status, in
one pass. A wait of its own for each send (a task, a bridge future and its timer, a replica
future in the heap) cost the master ~36 µs a SYNC message more than ASYNC
(docs/benchmarks.md, session 11).

Statuses are RocketMQ's, per send: FLUSH_DISK_TIMEOUT when its own flush did not happen in
time, FLUSH_SLAVE_TIMEOUT when no slave acknowledged its own end offset in time (an older send
of a burst whose newest one timed out is still answered PUT_OK if its bytes were flushed or
acknowledged), SLAVE_NOT_AVAILABLE decided when it was put.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cluster.remoting.connection import Response
from storage.errors import PutMessageStatus
from storage.flush import GroupCommitRequest

# future, next offset, its group-commit request (or None), waits for a slave, status so far,
# and the function that builds its answer from its final status.
_Waiting = tuple[asyncio.Future, int, GroupCommitRequest | None, bool, PutMessageStatus,
                 Callable[[PutMessageStatus], Response]]


class DurableAnswers:
    """The bursts of one broker (its loop, bridge and HA service)."""

    def __init__(self, broker) -> None:
        self._broker = broker
        self._burst: list[_Waiting] = []

    def answer_when_durable(self, next_offset: int, request: GroupCommitRequest | None,
                            replica: bool, status: PutMessageStatus,
                            respond: Callable[[PutMessageStatus], Response]) -> asyncio.Future:
        """A future of the send's answer, once ``request`` (if any) is flushed and a slave (if
        ``replica``) acknowledged ``next_offset``, or either gave up."""
        loop = self._broker.bridge.loop
        future = loop.create_future()
        if not self._burst:
            loop.call_soon(self._close_burst)
        self._burst.append((future, next_offset, request, replica, status, respond))
        return future

    def _close_burst(self) -> None:
        burst, self._burst = self._burst, []
        try:
            self._wait_for(burst)
        except BaseException as exc:  # never strand a burst: each send gets SYSTEM_ERROR
            _fail(burst, exc)
            if not isinstance(exc, Exception):
                raise

    def _wait_for(self, burst: list[_Waiting]) -> None:
        broker = self._broker
        waits: list[asyncio.Future] = []
        flush = replica = None
        newest_request = None
        newest_replica = -1
        for item in burst:
            request = item[2]
            if request is not None and (newest_request is None
                                        or request.next_offset > newest_request.next_offset):
                newest_request = request
            if item[3] and item[1] > newest_replica:
                newest_replica = item[1]
        if newest_request is not None:
            timeout = broker.store_config.sync_flush_timeout / 1000
            flush = broker.bridge.future_of(newest_request, timeout + 1)
            waits.append(flush)
        ha = broker.ha_service
        if newest_replica >= 0 and ha is not None:
            replica = ha.wait_for_replica(newest_replica)
            waits.append(replica)
        if not waits:
            self._answer(burst, None, None)
            return
        left = len(waits)

        def one_done(_future: asyncio.Future) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                try:
                    self._answer(burst, flush, replica)
                except Exception as exc:
                    _fail(burst, exc)

        for wait in waits:
            wait.add_done_callback(one_done)
        if flush is not None and replica is not None:
            # Sends that wait for the disk only (SLAVE_NOT_AVAILABLE, WAIT on a slave-less
            # moment) are answered with the flush, not with the slave's acknowledgement.
            disk_only = [item for item in burst if not item[3]]
            if disk_only:
                flush.add_done_callback(lambda _done: self._answer_safely(disk_only, flush))

    def _answer_safely(self, burst: list[_Waiting], flush: asyncio.Future) -> None:
        try:
            self._answer(burst, flush, None)
        except Exception as exc:
            _fail(burst, exc)

    def _answer(self, burst: list[_Waiting], flush: asyncio.Future | None,
                replica: asyncio.Future | None) -> None:
        flushed = flush is None or (not flush.cancelled() and flush.result() is True)
        replicated = replica is None or (not replica.cancelled() and replica.result() is True)
        ha = self._broker.ha_service
        acked = ha.push_to_slave_max_offset if ha is not None else -1
        for future, next_offset, request, wants_replica, put_status, respond in burst:
            if future.done():  # cancelled: its connection closed
                continue
            status = put_status
            if request is not None and not flushed and not (request.done() and (
                    request.flush_ok or request.flushed_to >= next_offset)):
                # (its own end: sends of a round share one request, GroupCommitService.
                # request_flush, and an older one's bytes may be flushed when the newest's are not)
                status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            elif wants_replica and not replicated and acked < next_offset:
                status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            try:
                future.set_result(respond(status))
            except Exception as exc:  # answered as a processor failure by the connection
                future.set_exception(exc)


def _fail(burst: list[_Waiting], exc: BaseException) -> None:
    """Answer every send of a burst not answered yet as a processor failure (the connection
    logs it and replies SYSTEM_ERROR with a sentence)."""
    for item in burst:
        if not item[0].done():
            item[0].set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
