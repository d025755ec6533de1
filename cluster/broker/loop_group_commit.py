"""SYNC_FLUSH's group commit driven from the broker's event loop, synced by a native thread.

``GroupCommitService`` (flush.py) runs the rounds on a Python thread. On a broker that thread
takes the interpreter lock to wake up, to pick the round's requests, around its msync and to
hand the completions back to the loop; on two busy cores the loop holds the lock, and about a
third of a round was spent waiting for it and handing it back (docs/benchmarks.md, session 18).
Here the loop, which files the requests anyway, decides each round itself: which requests it
answers and which file ranges it syncs (up to the end of what is written, as a thread round
does). ``RangeSyncer`` (common/_range_sync.c) msyncs those ranges on a thread that never takes
the lock and makes its eventfd readable; the loop reads it like a socket, counts the bytes
flushed, answers the requests in that same callback and starts the next round if requests
wait. The rounds, their rule for which requests share one (``request_flush``), the running flag
a failed flush raises and what counts as flushed are the thread's
(tests/unit/broker/test_loop_group_commit.py holds the two to the same outcomes).

A broker hands it to its store (``DefaultMessageStore.start(group_commit=...)``) under
SYNC_FLUSH with no transient pool, where the compiled core runs on Linux; otherwise, or with
``ROCKETDESK_PURE=1``, the thread service runs. Puts from
other threads (a tool, a blocking ``put_message``) hand their request to the loop; nothing may
block the loop's own thread waiting for a flush (it is the loop that completes them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from common import speedups
from storage.checkpoint import StoreCheckpoint
from storage.errors import describe_os_error
from storage.flush import RETRY_TIMES_OVER, GroupCommitRequest, join_window
from storage.mapped_file import MappedFile
from storage.mapped_file_queue import MappedFileQueue
from storage.running_flags import FLUSH_COMMIT_LOG_ERROR, RunningFlags

log = logging.getLogger(__name__)

# Files one round syncs at most: a round starts at the file holding the flushed offset and goes
# on only past files that are full, so more than two is a backlog after a stall; the rest wait
# for the next round.
_FILES_A_ROUND = 4
# How often the loop looks for bytes nobody asked to wait for (WAIT=false puts, a slave's
# replicated appends), as the thread's 10 ms wait does.
_IDLE_ROUND_S = 0.01

RangeSyncer = getattr(speedups.store_core, "RangeSyncer", None) if sys.platform == "linux" else None


def native_sync_available() -> bool:
    """True where the rounds can be synced without a Python thread (compiled core, Linux)."""
    return RangeSyncer is not None


_Span = tuple[MappedFile, int, int]  # a file held for the round, from, to (file positions)
_Answer = tuple[GroupCommitRequest, bool]

class LoopGroupCommitService:
    """The group commit of a store whose puts run on ``loop`` (see the module's docstring)."""

    name = "GroupCommitService"

    def __init__(self, queue: MappedFileQueue, checkpoint: StoreCheckpoint,
                 flags: RunningFlags, *, loop: asyncio.AbstractEventLoop,
                 syncer_factory: Callable[[], Any] | None = None,
                 idle_round_s: float = _IDLE_ROUND_S) -> None:
        self.queue = queue
        self.checkpoint = checkpoint
        self.flags = flags
        self._loop = loop
        self._loop_thread = threading.get_ident()
        factory = syncer_factory or RangeSyncer
        if factory is None:
            raise RuntimeError("no native syncer here (see native_sync_available)")
        self._syncer = factory()
        # The loop's state, and other threads' (their requests, shutdown): uncontended on the
        # loop; completions run after it is let go (a callback may put again).
        self._lock = threading.Lock()
        self._waiting: list[GroupCommitRequest] = []
        self._round: list[GroupCommitRequest] = []  # the requests the round in flight answers
        self._spans: list[_Span] | None = None  # what it syncs; None: no round in flight
        self._round_timestamp = 0
        self._again = False  # bytes nobody waits for came during the round: go on after it
        self._scheduled = False
        self._started = False
        self._shutting = False  # a shutdown has begun (a second one waits for it to end)
        self._shut_down = threading.Event()
        self._stopped = False
        # The round in flight outlived shutdown's wait (a disk that hangs): the store must not
        # flush or sync those files again on its way out (that would hang the same way).
        self.abandoned = False
        self._timer: asyncio.TimerHandle | None = None
        self._idle_round_s = idle_round_s
        self.rounds = 0  # rounds that flushed something (tests, stats)

    # -- filing requests (any thread) -----------------------------------------------------------
    def request_flush(self, next_offset: int, timeout_ms: int) -> GroupCommitRequest:
        """A wait for everything before ``next_offset`` to be flushed: joined to the newest
        request not yet in a round when that one is recent (GroupCommitService.request_flush's
        rule), else a new one."""
        on_loop = threading.get_ident() == self._loop_thread
        with self._lock:
            stopped = self._stopped  # (read once: a shutdown between two reads strands it)
            if not stopped:
                waiting = self._waiting
                if on_loop and waiting:
                    last = waiting[-1]
                    if not last._done and join_window(last, timeout_ms):
                        last.next_offset = max(last.next_offset, next_offset)
                        return last
                request = GroupCommitRequest(next_offset, timeout_ms)
                waiting.append(request)
                if on_loop:
                    self._schedule()
        if not stopped:
            if not on_loop:  # (in the list already: a closed loop leaves it to shutdown)
                self._wake_from_thread()
            return request
        request = GroupCommitRequest(next_offset, timeout_ms)
        request.complete(False)  # (after shutdown's last flush: not counted flushed)
        return request

    def put_request(self, request: GroupCommitRequest) -> None:
        """File a request made elsewhere (any thread)."""
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._waiting.append(request)
        if stopped:
            request.complete(False)
        else:
            self.wakeup()

    def wakeup(self) -> None:
        """Start a round soon even with nobody waiting (bytes put with WAIT=false)."""
        if threading.get_ident() != self._loop_thread:
            self._wake_from_thread()
            return
        if self._spans is not None:
            self._again = True  # (after the round in flight, which did not cover them)
        self._schedule()

    def _wake_from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self.wakeup)
        except RuntimeError:  # the loop is closed: shutdown's final flush answers what waits
            pass

    def _schedule(self) -> None:
        # After the loop iteration's puts (call_soon), so one round takes the whole burst.
        if not self._scheduled and self._spans is None and not self._stopped:
            self._scheduled = True
            self._loop.call_soon(self._start_round)

    # -- the service's life ---------------------------------------------------------------------
    def start(self) -> None:
        """Watch the syncer and the idle timer; call on the loop's thread."""
        if self._started:
            return
        self._started = True
        self._loop_thread = threading.get_ident()
        self._loop.add_reader(self._syncer.fileno(), self._on_synced)
        self._timer = self._loop.call_later(self._idle_round_s, self._idle_round)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the rounds, let the one in flight end, flush the rest here and answer every
        request (from any thread; the store's shutdown runs in a worker thread). Once: a
        second call waits for the first to end (up to ``timeout`` and a second). A round
        still in flight after ``timeout`` (a disk that hangs) is abandoned: its requests are
        answered FLUSH_DISK_TIMEOUT, the syncer is left to its msync, and ``abandoned`` tells
        the store not to sync anything again."""
        with self._lock:
            shutting, self._shutting = self._shutting, True
        if shutting:
            self._shut_down.wait(timeout + 1.0)
            return
        try:
            self._shut_down_once(timeout)
        finally:
            self._shut_down.set()

    def _shut_down_once(self, timeout: float) -> None:
        if threading.get_ident() == self._loop_thread:
            self._detach()
        elif self._started:
            detached = threading.Event()

            def detach() -> None:
                self._detach()
                detached.set()

            try:
                self._loop.call_soon_threadsafe(detach)
            except RuntimeError:
                pass  # the loop is closed, and its watchers with it
            else:
                detached.wait(1.0)  # (a stopped loop never runs it: the lock still orders us)
        with self._lock:
            self._stopped = True
        if not self._syncer.wait(timeout):
            # The disk hangs: the thread is still in msync on these mappings. Keep it, and
            # the files it holds, as they are; a final flush would hang the same way.
            log.error("the CommitLog flush in progress did not end within %.1f s; its "
                      "requests are answered FLUSH_DISK_TIMEOUT", timeout)
            self._syncer.abandon()
            self.abandoned = True
            with self._lock:
                left, self._waiting = self._round + self._waiting, []
                self._round = []
            _complete([(request, False) for request in left])
            return
        # (The loop may not have let go of the eventfd yet, if it was busy: whichever of the two
        # takes the round's outcome settles it, under the lock.)
        _complete(self._settle())
        self._syncer.stop()
        queue = self.queue
        for _ in range(RETRY_TIMES_OVER):
            try:
                moved = not queue.flush(0)
            except OSError as exc:
                self.flags.set(FLUSH_COMMIT_LOG_ERROR,
                               f"flushing the CommitLog failed: {describe_os_error(exc)}")
                break
            if not moved or queue.flushed_where >= queue.get_max_offset():
                break
        if queue.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = queue.store_timestamp
        with self._lock:
            left, self._waiting = self._waiting, []
        flushed = queue.flushed_where
        for request in left:
            request.flushed_to = flushed
        _complete([(request, flushed >= request.next_offset) for request in left])

    def _detach(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._started:
            try:
                self._loop.remove_reader(self._syncer.fileno())
            except (ValueError, RuntimeError):  # closed already
                pass

    # -- rounds (on the loop) -------------------------------------------------------------------
    def _idle_round(self) -> None:
        self._timer = self._loop.call_later(self._idle_round_s, self._idle_round)
        queue = self.queue
        if self._spans is None and (self._waiting
                                    or queue.flushed_where < queue.get_max_offset()):
            self._start_round()

    def _start_round(self) -> None:
        self._scheduled = False
        answered: list[_Answer] = []
        with self._lock:
            if self._spans is not None or self._stopped:
                return
            self._again = False
            requests, self._waiting = self._waiting, []
            spans: list[_Span] = []
            try:
                spans, timestamp, reach = self._spans_to_sync()
                if not spans:  # nothing to sync: what is covered is answered now
                    self._count_flushed(reach, timestamp)
                    answered = self._judge(requests, ok=True)
                else:
                    self._syncer.sync([(mapped.mm, start, end) for mapped, start, end in spans])
                    self._spans = spans
                    self._round = requests
                    self._round_timestamp = timestamp
            except OSError as exc:  # rewriting a failed flush's pages: a failed round
                _let_go(spans)
                self.flags.set(FLUSH_COMMIT_LOG_ERROR,
                               f"flushing the CommitLog failed: {describe_os_error(exc)}")
                answered = self._judge(requests, ok=False)
            except Exception:  # nothing started: let go of the files, the requests wait on
                _let_go(spans)
                self._waiting[:0] = requests
                log.exception("starting a CommitLog flush failed")
        _complete(answered)

    def _spans_to_sync(self) -> tuple[list[_Span], int, int]:
        """From the flushed offset to the end of what is written: the file holding it, and the
        next ones while the one before is full, each held for the round; the newest store
        time among them (read before their ends, as the thread service does, so it never
        names a message the round does not cover); and the log offset they reach. A file
        being destroyed is counted flushed unsynced, as MappedFile.flush counts it. On an
        error the files held so far are let go."""
        queue = self.queue
        first = queue.find_mapped_file_by_offset(queue.flushed_where, queue.flushed_where == 0)
        spans: list[_Span] = []
        timestamp = 0
        reach = queue.flushed_where
        if first is None:
            return spans, timestamp, reach
        files = queue.mapped_files
        at = files.index(first) if first in files else len(files)
        try:
            for mapped in files[at:at + _FILES_A_ROUND]:
                timestamp = max(timestamp, mapped.store_timestamp)
                start, end = mapped.flushed_position, mapped.read_position
                if end > start:
                    if not mapped.hold():  # being destroyed
                        mapped.flushed_position = end
                    else:
                        spans.append((mapped, start, end))
                        if mapped._flush_failed:  # its failed pages may count as clean now
                            mapped._redirty(start, end)
                reach = max(reach, mapped.file_from_offset + end)
                if end < mapped.file_size:
                    break
        except BaseException:
            _let_go(spans)
            raise
        return spans, timestamp, reach

    def _on_synced(self) -> None:
        answered = self._settle()
        # The next round first: its msync runs while this one's answers are written.
        if (self._waiting or self._again) and not self._stopped:
            self._start_round()
        _complete(answered)

    def _settle(self) -> list[_Answer]:
        """Take the ended round's outcome from the syncer, count what it flushed (ranges before
        a failed one count) and judge its requests; returns those to complete, outside the
        lock. Nothing when no round ended. Taking the outcome and settling are one step under
        the lock: the loop and a shutdown on another thread may both try."""
        with self._lock:
            if self._spans is None:
                return []
            rc = self._syncer.result()
            if rc is None:  # still in progress, or the other side settled it
                return []
            spans, self._spans = self._spans, None
            requests, self._round = self._round, []
            synced = len(spans) if rc == 0 else self._syncer.synced
            reach = -1
            for index, (mapped, _, end) in enumerate(spans):
                if index < synced:
                    mapped.flushed_position = end
                    mapped._flush_failed = False
                    reach = mapped.file_from_offset + end
                else:
                    mapped._flush_failed = True
            _let_go(spans)
            if reach >= 0:
                self._count_flushed(reach, self._round_timestamp if rc == 0 else 0)
            if rc == 0:
                self.flags.clear(FLUSH_COMMIT_LOG_ERROR)
            else:
                error = OSError(rc, os.strerror(rc))
                self.flags.set(FLUSH_COMMIT_LOG_ERROR,
                               f"flushing the CommitLog failed: {describe_os_error(error)}")
            return self._judge(requests, ok=rc == 0)

    def _count_flushed(self, reach: int, timestamp: int) -> None:
        queue = self.queue
        if reach <= queue.flushed_where:
            return
        queue.flushed_where = reach
        queue.flush_count += 1
        self.rounds += 1
        if timestamp > 0:
            queue.store_timestamp = timestamp
            self.checkpoint.physic_msg_timestamp = timestamp

    def _judge(self, requests: list[GroupCommitRequest], ok: bool) -> list[_Answer]:
        """GroupCommitService's rule: flushed → yes; the disk refused or too late → no (at
        once, FLUSH_DISK_TIMEOUT); else the next round. Under the lock."""
        flushed = self.queue.flushed_where
        now = time.monotonic()
        answered: list[_Answer] = []
        later = []
        for request in requests:
            request.flushed_to = flushed
            if flushed >= request.next_offset:
                answered.append((request, True))
            elif not ok or now >= request.deadline:
                answered.append((request, False))
            else:
                later.append(request)
        if later:
            self._waiting[:0] = later
        return answered


def _let_go(spans: list[_Span]) -> None:
    """Release every file a round held; one that fails to unmap must not keep the others."""
    for mapped, _, _ in spans:
        try:
            mapped.release()
        except Exception:
            log.exception("releasing %s after a flush failed", mapped.path)


def _complete(answered: list[_Answer]) -> None:
    for request, ok in answered:
        try:
            request.complete(ok)
        except Exception:  # one broken waiter must not strand the others
            log.exception("answering a group-commit request failed")


__all__ = ["LoopGroupCommitService", "native_sync_available"]
