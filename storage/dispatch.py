"""Dispatch (RocketMQ's "reput"): turning CommitLog records into ConsumeQueue units and index keys.

The CommitLog is the only source of truth. ``ReputMessageService`` re-reads it from
``reput_from_offset`` up to the readable end and hands a :class:`DispatchRequest` per record to
each dispatcher (ConsumeQueue builder, index builder), then tells arrival listeners (the broker
wakes long-polling pulls) once a run, of the newest record of each queue the run reached: a
listener wants to know that a queue grew and how far, and a call a record cost the put path a
microsecond of a send's twenty. Masters, slaves (raw replicated bytes) and crash recovery all build
their derived views through this one path.

A dispatcher that fails (the disk is full: no new ConsumeQueue or index file) stops the round
at that record: nothing after it is dispatched out of order, the record is not counted as
dispatched, and WRITE_LOGICS_QUEUE_ERROR is raised, which refuses puts until dispatch gets
through again. Dispatch retries every round (every second, or at once when woken); dispatchers
skip what they already hold, so a record half dispatched before the failure is not doubled.
An arrival listener that fails is logged and skipped: the record is in its queue already.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

from storage.dispatch_runs import plain_run as run_length
from storage.errors import CorruptRecordError, OffsetOutOfRangeError, TornTailError, describe_os_error
from storage.message import (
    PROPERTY_TIMER_DELIVER_MS,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    dispatch_properties,
    property_from_string,
    tags_string_to_tags_code,
    timer_number,
)
from storage.record import BlankRecord, MessageRecord, decode_record
from storage.running_flags import WRITE_LOGICS_QUEUE_ERROR, LogThrottle, RunningFlags
from storage.service_thread import ServiceThread

log = logging.getLogger(__name__)

# Bytes read from the CommitLog per dispatch round; a record longer than this is read whole.
READ_WINDOW = 4 * 1024 * 1024
MAX_RUN = 256  # records of one run dispatched in one call (a batch of 32 is one run)
TIMED_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})  # their units' tags codes are times


@dataclass(slots=True)
class DispatchRequest:
    """What the derived views need to know about one record."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties_string: str


def _record_longer_than(data: bytes, window: int) -> bool:
    """Whether the record at the start of ``data`` does not fit in a read window."""
    return len(data) >= 4 and struct.unpack_from(">i", data, 0)[0] > window


def build_dispatch_request(
    topic: str, queue_id: int, offset: int, size: int, store_timestamp: int, queue_offset: int,
    sys_flag: int, prepared_transaction_offset: int, props: str, delay_levels_ms: list[int],
) -> DispatchRequest:
    """The request for one record (``CommitLog.checkMessageAndReturnSize``'s second half)."""
    tags, keys, uniq_key, level_text = dispatch_properties(props)
    tags_code = tags_string_to_tags_code(tags)
    if topic == SCHEDULE_TOPIC:
        # A parked delayed message is keyed by when it is due, not by its tag.
        level = (int(level_text) if level_text and level_text.isascii() and level_text.isdigit()
                 else 0)
        level = min(level, len(delay_levels_ms))
        if level > 0:
            tags_code = store_timestamp + delay_levels_ms[level - 1]
    elif topic == TIMER_TOPIC:
        # So is a timer message: the timer service finds due ones from the queue alone.
        deliver = timer_number(property_from_string(props, PROPERTY_TIMER_DELIVER_MS))
        if deliver is not None:
            tags_code = deliver  # (18 digits at most: a unit's signed 64-bit tags code holds it)
    return DispatchRequest(
        topic, queue_id, offset, size, tags_code, store_timestamp, queue_offset, keys, uniq_key,
        sys_flag, prepared_transaction_offset, props,
    )


def dispatch_request_of(record: MessageRecord, delay_levels_ms: list[int]) -> DispatchRequest:
    """The request for a decoded record."""
    return build_dispatch_request(
        record.topic, record.queue_id, record.commit_log_offset, record.total_size,
        record.store_timestamp, record.queue_offset, record.sys_flag,
        record.prepared_transaction_offset, record.properties_string, delay_levels_ms,
    )


_I32 = struct.Struct(">i")
_SIZE_MAGIC = struct.Struct(">iI")


def _peek_topic_queue(data: bytes, pos: int, end: int) -> tuple[str, int, int] | None:
    """(topic, queue id, size) of a whole v1 record at ``pos``, read without decoding it."""
    total, magic = _SIZE_MAGIC.unpack_from(data, pos)
    if magic != 0xDAA320A7 or total < 91 or pos + total > end:
        return None
    (queue_id,) = _I32.unpack_from(data, pos + 12)
    (sys_flag,) = _I32.unpack_from(data, pos + 36)
    body_at = pos + 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
    (body_len,) = _I32.unpack_from(data, body_at)
    topic_at = body_at + 4 + body_len
    if body_len < 0 or topic_at >= pos + total:
        return None
    topic_len = data[topic_at]
    try:
        topic = data[topic_at + 1 : topic_at + 1 + topic_len].decode()
    except UnicodeDecodeError:
        return None
    return topic, queue_id, total


def _head_of(appended) -> list:
    """The first MAX_RUN entries of ``appended``, copied. The copy is not atomic: the
    interpreter may switch threads between making the deque's iterator (``islice``) and reading
    it (``list``), and an append by the put path in between makes the iterator raise. Then it
    is copied again (the window is a few bytecodes wide)."""
    while True:
        try:
            return list(islice(appended, MAX_RUN))
        except RuntimeError:  # (deque mutated during iteration)
            continue


def _pop_if_first(appended, item) -> None:
    """Drop ``item`` from the front, unless a full deque has already pushed it out."""
    if appended and appended[0] is item:
        appended.popleft()


Dispatcher = Callable[[DispatchRequest], None]
class Arrival(NamedTuple):
    """What an arrival listener hears of the newest record of a queue: enough to wake the
    pulls held on it (a whole DispatchRequest, built for each, cost more than the wakeup)."""

    topic: str
    queue_id: int
    consume_queue_offset: int
    commit_log_offset: int


class Arrivals:
    """The queues that got records in one round of dispatch, each with its newest record, as
    arrival listeners get them: once a round, so that a listener with nothing to do (no pull
    waits) costs one call, not one a queue. Iterating gives an ``Arrival`` each."""

    __slots__ = ("_newest",)

    def __init__(self, newest: dict) -> None:
        self._newest = newest  # (topic, queue id) -> an appended entry or a DispatchRequest

    def __len__(self) -> int:
        return len(self._newest)

    def __iter__(self) -> Iterator[Arrival]:
        for newest in self._newest.values():
            # An appended entry that ``dispatch_plain`` took, or a DispatchRequest.
            if type(newest) is tuple:
                yield Arrival(newest[4], newest[5], newest[3], newest[0])
            else:
                yield Arrival(newest.topic, newest.queue_id, newest.consume_queue_offset,
                              newest.commit_log_offset)


ArrivalListener = Callable[[Arrivals], None]


class DispatchFailed(Exception):
    """A dispatcher could not take a record; the round stops there and is retried."""


class ReputMessageService(ServiceThread):
    """Follows the CommitLog and dispatches every record exactly once per process lifetime."""

    name = "ReputMessageService"

    def __init__(
        self,
        commit_log,
        dispatchers: list[Dispatcher],
        delay_levels_ms: list[int],
        flags: RunningFlags | None = None,
    ) -> None:
        super().__init__()
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.arrival_listeners: list[ArrivalListener] = []
        self.flags = flags if flags is not None else RunningFlags()
        self._listener_failures = LogThrottle()
        self.delay_levels_ms = delay_levels_ms
        self.reput_from_offset = 0
        self.stuck_reason: str | None = None
        self.last_store_timestamp = 0  # store time of the last dispatched record
        # Optional: (topic, queue_id, offset, size) -> True when every view already holds the
        # record. Recovery re-reads from the checkpoint; this lets it skip without decoding.
        self.already_dispatched: Callable[[str, int, int, int], bool] | None = None
        # Optional: what every dispatcher does for an appended entry, in one call, when the
        # entry is a plain record (True), else False having done nothing. Records the put path
        # appended are most of what a broker dispatches; a request object and a call per
        # dispatcher were half of their dispatch.
        self.dispatch_plain: Callable[[tuple], bool] | None = None
        # Optional: the same for a run of plain records of one topic (a batch's, a burst of
        # sends), in one call for all of them (storage/dispatch_runs.py): (run, count, whether
        # all are of one queue) -> False, having done nothing, to decline.
        self.dispatch_plain_run: Callable[[list, int, bool], bool] | None = None
        # Dispatch runs on whichever thread asks: the broker's event loop right after a burst
        # of puts (no other thread woken, no interpreter lock handed over), this service's own
        # thread for what nobody dispatched inline (a slave's replicated bytes, a backstop
        # round every second). The lock keeps them from dispatching one record twice.
        self._reput_lock = threading.Lock()
        # The newest request of each (topic, queue id) of the current run (under the lock).
        self._arrived: dict[tuple[str, int], DispatchRequest] = {}

    def behind(self) -> int:
        """Bytes written to the CommitLog but not yet dispatched."""
        return max(0, self.commit_log.get_max_offset() - self.reput_from_offset)

    def run_once(self) -> None:
        self.do_reput()
        self.wait_for_running(1000)

    def on_shutdown(self) -> None:
        self.do_reput()

    def do_reput(self) -> int:
        """Dispatch everything readable now; returns how many records were dispatched.

        Never raises for a dispatcher's failure: that raises WRITE_LOGICS_QUEUE_ERROR and the
        next round starts again at the record that failed."""
        with self._reput_lock:
            try:
                count = self._reput()
            except DispatchFailed:
                return 0
            finally:
                self._tell_listeners()
            self.flags.clear(WRITE_LOGICS_QUEUE_ERROR)
            return count

    def reput_inline(self) -> None:
        """Dispatch, on the caller's thread, what the put path has just appended, and nothing
        else: records that must be decoded from the log (a slave's replicated bytes, a backlog
        after a restart or a failed round) are this service's thread's work, however many,
        so a caller on the event loop is never held by them. Whatever is left, or a round
        already running elsewhere, is handed to the thread; the caller never waits."""
        if not self._reput_lock.acquire(blocking=False):
            self.wakeup()
            return
        try:
            try:
                self._dispatch_appended()
            except DispatchFailed:
                self.wakeup()  # the flag is raised; the thread retries every second
                return
            finally:
                self._tell_listeners()
            left = self.reput_from_offset < self.commit_log.get_max_offset()
            if not left:  # caught up: whatever failed before has been dispatched since
                self.flags.clear(WRITE_LOGICS_QUEUE_ERROR)
        finally:
            self._reput_lock.release()
        if left:
            self.wakeup()

    def _dispatch(self, request: DispatchRequest) -> None:
        """Hand one record to every dispatcher, then to every arrival listener."""
        for dispatcher in self.dispatchers:
            try:
                dispatcher(request)
            except Exception as exc:
                raise self._failed(request.topic, request.queue_id, request.commit_log_offset,
                                   exc) from exc
        if self.arrival_listeners:
            self._arrived[(request.topic, request.queue_id)] = request

    def _failed(self, topic: str, queue_id: int, offset: int, exc: Exception) -> DispatchFailed:
        """Raise WRITE_LOGICS_QUEUE_ERROR for a record a dispatcher could not take."""
        reason = describe_os_error(exc) if isinstance(exc, OSError) else \
            f"{type(exc).__name__}: {exc}"
        self.flags.set(WRITE_LOGICS_QUEUE_ERROR,
                       f"dispatching the message at CommitLog offset {offset} ({topic}-{queue_id}) "
                       f"failed: {reason}; dispatch retries it every second")
        if not isinstance(exc, OSError) and self._listener_failures.should_log("dispatch")[0]:
            log.error("dispatcher failed", exc_info=exc)  # a bug: show where
        return DispatchFailed()

    def _tell_listeners(self) -> None:
        """The newest record of each queue dispatched since the last call, to every listener."""
        arrived = self._arrived
        if not arrived:
            return
        self._arrived = {}
        arrivals = Arrivals(arrived)
        for listener in self.arrival_listeners:
            try:
                listener(arrivals)
            except Exception:
                if self._listener_failures.should_log("listener")[0]:
                    log.exception("an arrival listener failed; the message is dispatched "
                                  "anyway")

    def _reput(self) -> int:
        commit_log = self.commit_log
        count = 0
        if self.reput_from_offset < commit_log.get_min_offset():
            log.warning("reput offset %d is below the CommitLog minimum; skipping ahead",
                        self.reput_from_offset)
            self.reput_from_offset = commit_log.get_min_offset()
        count += self._dispatch_appended()
        while self.reput_from_offset < commit_log.get_max_offset():
            # Under steady load new records keep arriving: prefer the fast path each round.
            fast = self._dispatch_appended()
            count += fast
            if fast and self.reput_from_offset >= commit_log.get_max_offset():
                break
            start = self.reput_from_offset
            try:
                data, _ = commit_log.get_data(start, READ_WINDOW)
                if len(data) == READ_WINDOW and _record_longer_than(data, READ_WINDOW):
                    data, _ = commit_log.get_data(start)
            except OffsetOutOfRangeError:
                break
            advanced = self._dispatch_buffer(data, start)
            count += advanced
            if advanced:  # (a put notes its own time; replicated bytes are timed from here)
                commit_log.note_store_timestamp(start, self.last_store_timestamp)
            self._tell_listeners()  # a window at a time: a long catch-up keeps pulls informed
            if self.reput_from_offset == start:
                break  # a record is still being written (replication) or the log is corrupt
        return count

    def _dispatch_appended(self) -> int:
        """Fast path: dispatch what the put path just appended, without decoding it again."""
        appended = self.commit_log.appended
        readable = self.commit_log.get_max_offset()
        levels = self.delay_levels_ms
        plain = self.dispatch_plain
        plain_run = self.dispatch_plain_run
        listening = bool(self.arrival_listeners)
        count = 0
        while appended:
            item = appended[0]
            offset, size = item[0], item[1]
            if offset != self.reput_from_offset:
                if offset < self.reput_from_offset:
                    appended.popleft()  # already dispatched by decoding the log
                    continue
                break  # a gap (entries were dropped): decode the log from here
            if offset + size > readable:
                break  # not committed yet (transient store pool)
            topic = item[4]
            if topic is None:
                _pop_if_first(appended, item)
                self.reput_from_offset = self.commit_log.roll_next_file(offset)
                continue
            if plain_run is not None and not item[6] & 0xC and topic not in TIMED_TOPICS:
                following = None  # a batch's next record, or a burst's
                if len(appended) > 1:  # (a lone record raises no IndexError a dispatch)
                    try:
                        following = appended[1]
                    except IndexError:  # (a failed put took it back meanwhile)
                        pass
                if (following is not None and following[0] == offset + size
                        and following[4] == topic and not following[6] & 0xC):
                    taken = self._dispatch_run(appended, readable, plain_run, listening)
                    if taken:
                        count += taken
                        continue
            try:
                done = plain is not None and plain(item)
            except Exception as exc:  # the entry stays for the next round, as below
                raise self._failed(topic, item[5], offset, exc) from exc
            if done:
                if listening:
                    self._arrived[(topic, item[5])] = item
            else:
                request = build_dispatch_request(topic, item[5], offset, size, item[2], item[3],
                                                 item[6], item[7], item[8], levels)
                self._dispatch(request)  # on failure the entry stays for the next round
            _pop_if_first(appended, item)
            self.reput_from_offset = offset + size
            self.last_store_timestamp = item[2]
            count += 1
        return count

    def _dispatch_run(self, appended, readable: int, plain_run, listening: bool) -> int:
        """Dispatch the run of plain records of one topic at the head of ``appended`` in one
        call; how many (0: no run there, or declined: the caller goes one by one)."""
        # A copy of the head that the run's functions read; the put path may append to the
        # deque while they run.
        run = _head_of(appended)
        taken, one_queue = run_length(run, self.reput_from_offset, readable)
        if taken < 2:
            return 0
        first, last = run[0], run[taken - 1]
        try:
            if not plain_run(run, taken, one_queue):
                return 0
        except Exception as exc:  # the entries stay for the next round, as one by one
            raise self._failed(first[4], first[5], first[0], exc) from exc
        end = last[0] + last[1]
        self.reput_from_offset = end
        self.last_store_timestamp = last[2]
        if listening:
            arrived = self._arrived
            if one_queue:
                arrived[(first[4], first[5])] = last
            else:
                for entry in run[:taken]:  # the newest of each queue, for its held pulls
                    arrived[(entry[4], entry[5])] = entry
        try:
            while appended[0][0] < end:
                appended.popleft()
        except IndexError:  # all taken (a failed put may take its own entries back meanwhile)
            pass
        return taken

    def _dispatch_buffer(self, data: bytes, base: int) -> int:
        pos = 0
        count = 0
        levels = self.delay_levels_ms
        end = len(data)
        skip = self.already_dispatched
        while pos < end:
            if skip is not None and pos + 8 <= end:
                peeked = _peek_topic_queue(data, pos, end)
                if peeked is not None and skip(peeked[0], peeked[1], base + pos, peeked[2]):
                    pos += peeked[2]
                    self.reput_from_offset = base + pos
                    continue
            try:
                record = decode_record(data, pos, check_crc=False, read_body=False, base_offset=base)
            except TornTailError:
                break  # the rest of this record has not arrived yet
            except CorruptRecordError as exc:
                if self.stuck_reason is None:
                    log.error("dispatch stopped: %s", exc)
                self.stuck_reason = str(exc)
                break
            if isinstance(record, BlankRecord):
                self.reput_from_offset = self.commit_log.roll_next_file(base + pos)
                return count
            if not isinstance(record, MessageRecord):
                break  # zeros: nothing written here yet
            self._dispatch(dispatch_request_of(record, levels))
            pos += record.total_size
            self.reput_from_offset = base + pos
            self.last_store_timestamp = record.store_timestamp
            count += 1
        return count
