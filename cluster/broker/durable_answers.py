"""Answering SYNC_FLUSH and SYNC_MASTER sends once their messages are as durable as the
broker's roles ask, a burst at a time.

Every send of one event-loop iteration that must wait (for the group commit, for a slave, or
both) joins that iteration's burst, and the burst waits once: for the newest group-commit
request of its sends (flushes go in log order, so it covers every older one) and for one slave
acknowledgement of its newest offset. Then each send of it is answered with its own status, in
one pass, written in the call that learns the last of them (a DeferredAnswer each, no asyncio
future: a future's callbacks are scheduled, and each step waited a loop iteration behind every
read of it; docs/benchmarks.md, session 18). A wait of its own for each send (a task, a bridge
future and its timer, a replica future in the heap) cost the master ~36 µs a SYNC message more
than ASYNC (docs/benchmarks.md, session 11).

Statuses are RocketMQ's, per send: FLUSH_DISK_TIMEOUT when its own flush did not happen in
time, FLUSH_SLAVE_TIMEOUT when no slave acknowledged its own end offset in time (an older send
of a burst whose newest one timed out is still answered PUT_OK if its bytes were flushed or
acknowledged), SLAVE_NOT_AVAILABLE decided when it was put.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cluster.remoting.connection import Response
from cluster.remoting.deferred_answer import DeferredAnswer
from storage.errors import PutMessageStatus
from storage.flush import GroupCommitRequest

log = logging.getLogger(__name__)

# its answer, next offset, its group-commit request (or None), waits for a slave, status so
# far, and the function that builds its answer from its final status.
_Waiting = tuple[DeferredAnswer, int, GroupCommitRequest | None, bool, PutMessageStatus,
                 Callable[[PutMessageStatus], Response]]


class DurableAnswers:
    """The bursts of one broker (its loop, bridge and HA service)."""

    def __init__(self, broker) -> None:
        self._broker = broker
        self._burst: list[_Waiting] = []

    def answer_when_durable(self, next_offset: int, request: GroupCommitRequest | None,
                            replica: bool, status: PutMessageStatus,
                            respond: Callable[[PutMessageStatus], Response]) -> DeferredAnswer:
        """The send's answer, given once ``request`` (if any) is flushed and a slave (if
        ``replica``) acknowledged ``next_offset``, or either gave up."""
        answer = DeferredAnswer()
        if not self._burst:
            self._broker.bridge.loop.call_soon(self._close_burst)
        self._burst.append((answer, next_offset, request, replica, status, respond))
        return answer

    def _close_burst(self) -> None:
        burst, self._burst = self._burst, []
        try:
            _BurstWait(self._broker, burst).start()
        except BaseException as exc:  # never strand a burst: each send gets SYSTEM_ERROR
            _fail(burst, exc)
            if not isinstance(exc, Exception):
                raise


class _BurstWait:
    """One burst's wait: for the newest group-commit request of its sends (flushes go in log
    order, so it covers every older one) and for one slave acknowledgement of its newest
    offset; then each send is answered in the call that learns the last of them."""

    __slots__ = ("_broker", "_burst", "_flushed", "_left", "_replicated")

    def __init__(self, broker, burst: list[_Waiting]) -> None:
        self._broker = broker
        self._burst = burst
        self._flushed = True  # until a flush is waited for and fails
        self._replicated = True
        self._left = 0

    def start(self) -> None:
        broker = self._broker
        newest_request = None
        newest_replica = -1
        for item in self._burst:
            request = item[2]
            if request is not None and (newest_request is None
                                        or request.next_offset > newest_request.next_offset):
                newest_request = request
            if item[3] and item[1] > newest_replica:
                newest_replica = item[1]
        ha = broker.ha_service
        replica = ha.wait_for_replica(newest_replica) if newest_replica >= 0 and ha else None
        self._left = (newest_request is not None) + (replica is not None)
        if not self._left:
            self._answer(self._burst)
            return
        if replica is not None:
            replica.add_done_callback(self._replica_done)
        if newest_request is not None:
            timeout = broker.store_config.sync_flush_timeout / 1000
            broker.bridge.when_done(newest_request, timeout + 1, self._flush_done)

    def _flush_done(self, ok: bool) -> None:
        try:
            self._flushed = ok
            self._one_done()
            if self._left:  # (the slave's acknowledgement is still to come)
                # Sends that wait for the disk only (SLAVE_NOT_AVAILABLE, WAIT on a slave-less
                # moment) are answered with the flush, not with the slave's acknowledgement.
                disk_only = [item for item in self._burst if not item[3]]
                if disk_only:
                    self._answer(disk_only)
        except Exception as exc:  # never strand a burst: what is not answered gets the failure
            _fail(self._burst, exc)

    def _replica_done(self, future: asyncio.Future) -> None:
        try:
            self._replicated = not future.cancelled() and future.result() is True
            self._one_done()
        except Exception as exc:
            _fail(self._burst, exc)

    def _one_done(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._answer(self._burst)

    def _answer(self, burst: list[_Waiting]) -> None:
        flushed, replicated = self._flushed, self._replicated
        ha = self._broker.ha_service
        acked = ha.push_to_slave_max_offset if ha is not None else -1
        for answer, next_offset, request, wants_replica, put_status, respond in burst:
            if answer.done():  # answered with the flush (disk only), or its connection closed
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
                response = respond(status)
            except Exception as exc:  # answered as a processor failure by the connection
                answer.fail(exc)
                continue
            try:
                answer.answer(response)  # (written by its connection, in this call)
            except Exception:  # that connection's trouble: the burst's other sends go on
                log.exception("writing a durable send's answer failed")


def _fail(burst: list[_Waiting], exc: BaseException) -> None:
    """Answer every send of a burst not answered yet as a processor failure (the connection
    logs it and replies SYSTEM_ERROR with a sentence)."""
    for item in burst:
        item[0].fail(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
