"""Timer messages (RocketMQ 5): any delivery time, kept across restarts, about a second late at most.

A send whose properties ask for a delivery time (``TIMER_DELIVER_MS``, or ``TIMER_DELAY_SEC`` /
``TIMER_DELAY_MS`` from now) is parked in ``rmq_sys_wheel_timer`` with its real topic and queue
beside it (see :func:`park`); its ConsumeQueue unit carries the delivery time in place of a tag
hash, so the queue itself is the timer log: append-only, durable, replicated.

This service reads that queue behind the writer and files each unit under the second it falls
due (rounded up: never early) — a wheel of one-second slots holding queue offsets, 8 bytes a
pending timer. Every 100 ms it delivers the slots whose second has come, in time order: each
record is read back, rebuilt for its real topic and stored as a normal message.

A timer further off than ROLL_WINDOW_MS from when it was stored is *rolled*, as RocketMQ rolls
it (``timerRollWindowSlots``): filed under the end of that window, where its record is stored
again in the timer topic, unchanged, and filed afresh. So no pending timer's record is older
than two days, and a timer of three (timerMaxDelaySec) outlives its first CommitLog file, which
expires after fileReservedTime (72 h): it was silently dropped.

Restart: ``config/timercheck.json`` says how far the queue was filed (``scanOffset``), the
oldest offset still pending (``minPendingOffset``, refreshed every 10 s) and up to when every
timer has been delivered (``deliveredUpTo``, each second). Filing starts again at the oldest
pending offset, skipping what was due by ``deliveredUpTo``: what was pending is pending again,
and a crash repeats at most the last second's deliveries (at-least-once, as RocketMQ).

A slave acting for its master while the master is down (``enableSlaveActingMaster``, see
acting_master.py) runs this service too, with an EscapeBridge, as RocketMQ 5 runs its timer's
dequeue there: a slave never writes its own CommitLog (a byte copy of its master's), so what is
due goes to another group's master, and a roll hands that master the timer itself. As with
delayed messages (schedule.py), nothing goes out twice when timers change hands:

* a slave keeps a copy of its master's progress (slave_sync.py), so it starts about where the
  master stopped; a timer that fell due before it started is looked for in its store, the
  master's copy, by UNIQ_KEY, and not delivered again when the master had;
* a master that comes back takes its slaves' progress (what they delivered is in other groups'
  stores, out of its sight) once none of them acts any more, and files nothing any of them
  had delivered.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import struct
import time
from array import array
from collections.abc import Sequence

from cluster.broker.hand_back import (
    ACTING_MASTER_FIELD,
    ask_delay_offsets,
    delivered_before,
    take_over_from_slaves,
    wait_for_dispatch,
)
from cluster.broker.json_config import JsonConfigFile
from cluster.broker.timer_progress import TimerProgress, read_timer_progress, timer_check_path
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMER_TOPIC,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
    timer_number,
)

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
SAVE_INTERVAL = 1.0
MIN_PENDING_INTERVAL = 10.0
SCAN_BATCH = 4096  # units filed per read of the queue
# Deliveries a round at most: a million timers due at once go out over many rounds, not in one
# multi-second stall of the broker's event loop (about 25,000 a second at POLL_INTERVAL).
ROUND_BUDGET = 2500
TIMER_QUEUE_ID = 0
ROLL_WINDOW_MS = 2 * 24 * 3600 * 1000
_UNIT = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode (= delivery time)
_MAX_TS = 2**62
class TimerError(ValueError):
    """A timer message the broker refuses (a delay that is not a number, or too far away)."""


def delivery_time(props: dict[str, str], now_ms: int, max_delay_sec: int) -> int | None:
    """When a message asks to be delivered (ms since the epoch), or None for no timer. With
    more than one timer property, TIMER_DELAY_SEC wins, then TIMER_DELAY_MS, then
    TIMER_DELIVER_MS, as in RocketMQ 5 (``HookUtils.transformTimerMessage``)."""
    if (raw := props.get(PROPERTY_TIMER_DELAY_SEC)) is not None:
        base, scale = now_ms, 1000
    elif (raw := props.get(PROPERTY_TIMER_DELAY_MS)) is not None:
        base, scale = now_ms, 1
    elif (raw := props.get(PROPERTY_TIMER_DELIVER_MS)) is not None:
        base, scale = 0, 1
    else:
        return None
    number = timer_number(raw)
    if number is None:
        raise TimerError(f"the timer property {raw.strip()[:30]!r} is not a whole number")
    deliver = base + number * scale
    if deliver - now_ms > max_delay_sec * 1000:
        raise TimerError(f"the delivery time is more than {max_delay_sec} s away "
                         "(timerMaxDelaySec)")
    return deliver


def yield_to_delay_level(props: dict[str, str]) -> None:
    """A message with a delay level (``DELAY``) and timer properties too is a delayed message:
    its timer properties are dropped, as RocketMQ 5 drops them (``HookUtils.checkIfTimerMessage``).
    Parked in the timer as well, the store's delay rewrite would overwrite the REAL_TOPIC the
    timer delivers to, and the message would be lost."""
    level = props.get(PROPERTY_DELAY_TIME_LEVEL, "")
    try:
        delayed = int(level) > 0  # (the store's reading of the level: anything else is none)
    except ValueError:
        return
    if delayed:
        for key in (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS):
            props.pop(key, None)


def park(props: dict[str, str], topic: str, queue_id: int, deliver_ms: int) -> None:
    """Rewrite a message's properties for the timer topic (the caller stores it there)."""
    props.pop(PROPERTY_TIMER_DELAY_SEC, None)
    props.pop(PROPERTY_TIMER_DELAY_MS, None)
    props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)


def _slot(deliver_ms: int) -> int:
    return -(-deliver_ms // 1000)  # the second it falls due, rounded up


def _delivered_steps(delivered: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(scanOffset, deliveredUpTo) pairs of saved progress as steps, the lowest offset last:
    a unit below a step's offset (and not below the next's) went out when it fell due by the
    step's time, the latest of the pairs whose scans passed it."""
    steps = []
    latest = -1
    for scanned, up_to in sorted(delivered, reverse=True):
        latest = max(latest, up_to)
        steps.append((scanned, latest))
    return steps


class TimerMessageService:
    def __init__(self, broker, escape=None) -> None:
        """``escape`` (an EscapeBridge) makes this the service of a slave acting as master."""
        self.broker = broker
        self.escape = escape
        self.file = JsonConfigFile(timer_check_path(broker))
        self.slots: dict[int, array] = {}
        self._seconds: list[int] = []  # a heap of the slots' seconds
        self.scan_offset = 0
        self.delivered_up_to = 0
        self.min_pending_offset = 0
        self.pending = 0
        self.delivered = 0
        self.rolled = 0  # records stored again in the timer topic (see ROLL_WINDOW_MS)
        self.skipped_duplicates = 0  # due before an acting slave started, and delivered then
        self.started_ms = 0
        # Until recover() ran, nothing is known: no progress is saved or handed out.
        self._recovering = False
        self._dirty = False
        self._task: asyncio.Task | None = None
        self._writing: asyncio.Future | None = None  # the last periodic save, in a thread

    # -- life ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.started_ms = int(time.time() * 1000)
        if self.escape is None:
            self.broker.topics.create_in_send_message_back_method(TIMER_TOPIC, 1,
                                                                  PERM_READ | PERM_WRITE)
        # A master a slave may have acted for recovers once it has the slaves' progress; an
        # acting slave once dispatch has caught up with what it replicated (its checks read
        # the index). Both in the service's task; any other master at once, as always.
        self._recovering = self.escape is not None or self.broker.config.enable_slave_acting_master
        if not self._recovering:
            self.recover()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._writing is not None:  # (its older progress must not land after this one)
            await asyncio.gather(self._writing, return_exceptions=True)
        self.save(refresh_min=True)

    def recover(self, handed_back: Sequence[TimerProgress] = ()) -> None:
        """File again what was pending when the broker stopped (see the module's docstring),
        less what slaves delivered while acting for it (``handed_back``: their progress)."""
        own = read_timer_progress(self.file) or TimerProgress()
        self._recovering = False
        self.delivered_up_to = max([own.delivered_up_to]
                                   + [progress.delivered_up_to for progress in handed_back])
        self.min_pending_offset = own.min_pending_offset
        queue = self._queue()
        if queue is None:
            return
        # Never past the queue's end: a crash can cost the queue units the saved progress
        # counted, and the timers parked next take those offsets again: started past them,
        # filing would never see them.
        self.scan_offset = min(max(own.min_pending_offset, queue.get_min_offset_in_queue()),
                               queue.get_max_offset_in_queue())
        self.min_pending_offset = self.scan_offset
        delivered = [(progress.scan_offset, progress.delivered_up_to)
                     for progress in (own, *handed_back)]
        # Below each saved scan, units due by its deliveredUpTo went out already; past them all,
        # everything is new (a unit filed and delivered just before a crash may go out twice).
        self.scan(now_ms=None, delivered=delivered)
        log.info("timer: %d messages pending after start", self.pending)

    async def _run(self) -> None:
        if self._recovering:
            handed_back = await self._take_over_from_slaves() if self.escape is None else []
            await wait_for_dispatch(self.broker.store)
            self.recover(handed_back)
        last_save = last_min = time.monotonic()
        while True:
            try:
                now = int(time.time() * 1000)
                self.scan(now)
                if self.escape is None:
                    self.deliver_due(now, budget=ROUND_BUDGET)
                else:
                    await self.deliver_due_escaping(now, budget=ROUND_BUDGET)
            except Exception:  # one bad round must not stop timers for good
                log.exception("timer messages: a round failed; trying again")
            if time.monotonic() - last_save >= SAVE_INTERVAL:
                refresh = time.monotonic() - last_min >= MIN_PENDING_INTERVAL
                await self._save_aside(refresh)
                last_save = time.monotonic()
                if refresh:
                    last_min = last_save
            await asyncio.sleep(POLL_INTERVAL)

    def _queue(self):
        return self.broker.store.find_consume_queue(TIMER_TOPIC, TIMER_QUEUE_ID, create=False)

    # -- taking over from slaves that acted -----------------------------------------------------------
    async def _take_over_from_slaves(self) -> list[TimerProgress]:
        """Each slave's last progress, once none of them delivers for this master any more
        (or after TAKE_OVER_TIMEOUT): what they delivered is in other groups' stores, out of
        this store's sight."""
        latest: dict[str, TimerProgress] = {}

        async def take(client, address: str) -> bool | None:
            answer = await self._slave_progress(client, address)
            if answer is None:
                return None
            acting, progress = answer
            if progress is not None:
                latest[address] = progress  # (it grows while the slave acts: the last counts)
            return acting

        await take_over_from_slaves(self.broker, take)
        own = read_timer_progress(self.file) or TimerProgress()
        for address, progress in latest.items():
            if not own.covers(progress):
                log.info("timer: the slave %s delivered timers due by %d up to queue offset %d; "
                         "they are not delivered again", address, progress.delivered_up_to,
                         progress.scan_offset)
        return list(latest.values())

    @staticmethod
    async def _slave_progress(client, address: str) -> tuple[bool, TimerProgress | None] | None:
        """Whether a slave acts as master, and its timer progress; None when it did not answer."""
        response = await ask_delay_offsets(client, address)
        if response is None:
            return None
        return (response.field(ACTING_MASTER_FIELD) == "true",
                TimerProgress.from_ext_fields(response.ext_fields))

    # -- filing -------------------------------------------------------------------------------------
    def scan(self, now_ms: int | None, delivered: Sequence[tuple[int, int]] = ()) -> int:
        """File the units written since the last scan; deliver at once those already due.
        ``delivered``: (scanOffset, deliveredUpTo) pairs of saved progress, whose units are
        not filed again."""
        queue = self._queue()
        if queue is None:
            return 0
        end = queue.get_max_offset_in_queue()
        filed = 0
        wall_ms = int(time.time() * 1000)
        commit_log = self.broker.store.commit_log
        # Below ``bound``, units due by ``up_to`` went out (or were rolled) before a restart.
        steps = _delivered_steps(delivered)
        bound, up_to = steps.pop() if steps else (_MAX_TS, -_MAX_TS)
        while self.scan_offset < end:
            raw = queue.get_units_raw(self.scan_offset, min(SCAN_BATCH, end - self.scan_offset))
            if not raw:
                # Below the queue's minimum (expired files): nothing left there to deliver.
                self.scan_offset = max(self.scan_offset + 1, queue.get_min_offset_in_queue())
                continue
            offset = self.scan_offset
            for commit_log_offset, size, deliver in _UNIT.iter_unpack(raw):
                if size > 0:
                    due = deliver
                    if deliver > wall_ms:  # (one due already is never rolled)
                        stored = commit_log.pickup_store_timestamp(commit_log_offset, size)
                        if stored is not None and deliver - stored > ROLL_WINDOW_MS:
                            due = stored + ROLL_WINDOW_MS
                    while offset >= bound:
                        bound, up_to = steps.pop() if steps else (_MAX_TS, -_MAX_TS)
                    if due > up_to:
                        self._file(_slot(due), offset)
                        filed += 1
                offset += 1
            self.scan_offset = offset
            self._dirty = True
        return filed

    def _file(self, second: int, offset: int) -> None:
        slot = self.slots.get(second)
        if slot is None:
            slot = self.slots[second] = array("q")
            heapq.heappush(self._seconds, second)
        slot.append(offset)
        self.pending += 1

    # -- delivering ---------------------------------------------------------------------------------
    # A master stores what is due itself, without an await a message (deliver_due); a slave
    # acting for it hands each to another group's master (deliver_due_escaping). Both walk the
    # slots alike and share the rest (_timer_record, _real_message, _settle).
    def deliver_due(self, now_ms: int, budget: int | None = None) -> int:
        """Deliver the slots whose second has come, oldest first (at most ``budget`` messages;
        the rest at the next round); how many messages (rolled ones too)."""
        count = 0
        rolled = self.rolled
        queue = self._queue()
        while self._seconds and self._seconds[0] * 1000 <= now_ms:
            if budget is not None and count >= budget:
                break
            second = self._seconds[0]
            done = 0
            for offset in self.slots[second]:
                if budget is not None and count + done >= budget:
                    break
                if not self._deliver(queue, offset, now_ms):
                    break
                done += 1
            count += done
            if not self._settle(second, done):
                break
        self.delivered += count - (self.rolled - rolled)
        return count

    async def deliver_due_escaping(self, now_ms: int, budget: int | None = None) -> int:
        """deliver_due on a slave acting as master: through the EscapeBridge (a slave never
        writes its own CommitLog, its master's copy); skipped duplicates count too."""
        count = 0
        rolled, skipped = self.rolled, self.skipped_duplicates
        queue = self._queue()
        try:
            while self._seconds and self._seconds[0] * 1000 <= now_ms:
                if budget is not None and count >= budget:
                    break
                second = self._seconds[0]
                done = 0
                try:
                    for offset in self.slots[second]:
                        if budget is not None and count + done >= budget:
                            break
                        if not await self._escape(queue, offset, now_ms, second):
                            break
                        done += 1
                finally:
                    # (Also when the slave stands down mid-slot: what went out is not saved,
                    # and handed back, as still pending.)
                    count += done
                    emptied = self._settle(second, done)
                if not emptied:
                    break
        finally:
            self.delivered += count - (self.rolled - rolled) - (self.skipped_duplicates - skipped)
        return count

    def _settle(self, second: int, done: int) -> bool:
        """The first ``done`` timers of a slot went out: True when that emptied it."""
        slot = self.slots[second]
        self.pending -= done
        if done < len(slot):
            # The budget ran out, or a put was refused: the rest waits for the next round.
            del slot[:done]
            return False
        heapq.heappop(self._seconds)
        del self.slots[second]
        self.delivered_up_to = max(self.delivered_up_to, second * 1000)
        self._dirty = True
        return True

    def _timer_record(self, queue, offset: int):
        """(unit, record) of a timer, or None when it is gone with its file."""
        unit = queue.get_unit(offset) if queue is not None else None
        if unit is None:
            return None
        try:
            return unit, self.broker.store.look_message_by_offset(unit.commit_log_offset, unit.size)
        except StoreError as exc:
            log.warning("timer message at %d is gone: %s", unit.commit_log_offset, exc)
            return None

    def _deliver(self, queue, offset: int, now_ms: int) -> bool:
        found = self._timer_record(queue, offset)
        if found is None:
            return True  # nothing to deliver
        unit, record = found
        if unit.tags_code > now_ms:  # filed for a roll (ROLL_WINDOW_MS), not due yet
            return self._roll(record, unit.commit_log_offset)
        msg = _real_message(record)
        if msg is None:
            return True
        try:
            self.broker.store.put_message_nowait(msg)
        except PutMessageError as exc:
            log.warning("timer message at %d not delivered yet: %s", unit.commit_log_offset, exc)
            return False
        return True

    def _roll(self, record, commit_log_offset: int) -> bool:
        """Store the timer's record again in the timer topic, as it is: the new copy is filed
        by the next scan, for its delivery or its next roll."""
        try:
            self.broker.store.put_message_nowait(MessageExtBrokerInner(
                topic=TIMER_TOPIC, body=record.body, queue_id=TIMER_QUEUE_ID, flag=record.flag,
                properties_string=record.properties_string, sys_flag=record.sys_flag,
                born_timestamp=record.born_timestamp, born_host=record.born_host,
                reconsume_times=record.reconsume_times))
        except PutMessageError as exc:
            log.warning("timer message at %d not rolled yet: %s", commit_log_offset, exc)
            return False
        self.rolled += 1
        return True

    async def _escape(self, queue, offset: int, now_ms: int, second: int) -> bool:
        """One timer of the slot of ``second`` through the EscapeBridge: False when no other
        group's master took it (it waits for the next round)."""
        found = self._timer_record(queue, offset)
        if found is None:
            return True
        unit, record = found
        msg = _real_message(record)
        if msg is None:
            return True
        # A roll cannot store the record again here: the timer itself goes to another group's
        # master, which parks it once more (its TIMER_DELIVER_MS is still ahead) and keeps it.
        roll = unit.tags_code > now_ms
        # The master delivered (or rolled) up to when it died, and the progress this slave
        # copied from it is up to 10 s older: what fell due before this service started is
        # looked for in this store, the master's copy. (A slot opens at its second's end, so
        # one whose second came later was never the master's to deliver.)
        if second * 1000 <= self.started_ms and self._delivered_before(msg, record, roll):
            self.skipped_duplicates += 1
            return True
        if not await self.escape.put(msg):
            return False
        if roll:
            self.rolled += 1
        return True

    def _delivered_before(self, msg: MessageExtBrokerInner, record, roll: bool) -> bool:
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        # A delivered timer's copy is in its real topic; a rolled one's, in the timer topic.
        if uniq and delivered_before(self.broker.store, TIMER_TOPIC if roll else msg.topic,
                                     uniq, record):
            log.info("timer message %s was %s before; not again", uniq,
                     "rolled" if roll else "delivered")
            return True
        return False

    # -- progress -----------------------------------------------------------------------------------
    def progress(self) -> TimerProgress | None:
        """What save() would write now; None before recovery, when nothing is known yet."""
        return None if self._recovering else self._progress()

    def _progress(self) -> TimerProgress:
        scan = self.scan_offset
        if self._seconds and self._seconds[0] * 1000 <= self.delivered_up_to:
            # A timer filed after its time had passed, and not delivered yet (the store refused
            # it): a restart must file it again, so the saved scan stops before it.
            scan = min([scan] + [self.slots[s][0] for s in self._seconds
                                 if s * 1000 <= self.delivered_up_to and self.slots[s]])
        return TimerProgress(scan, self.min_pending_offset, self.delivered_up_to)

    def save(self, refresh_min: bool = False) -> None:
        text = self._progress_to_save(refresh_min)
        if text is not None:
            self.file.persist(text)

    async def _save_aside(self, refresh_min: bool) -> None:
        """``save``, the file written in a worker thread: the periodic save (every second
        while timers move) waited on the event loop for its fsync, 1.4 ms typically and up
        to 20 ms under load."""
        text = self._progress_to_save(refresh_min)
        if text is not None:
            self._writing = asyncio.ensure_future(asyncio.to_thread(self.file.persist, text))
            await asyncio.shield(self._writing)

    def _progress_to_save(self, refresh_min: bool) -> str | None:
        """The progress file's new text, or None when it holds the progress already."""
        if self._recovering:
            return None  # (the file's progress stands)
        if refresh_min:
            # Each slot's offsets ascend (filed in queue order), so its first is its oldest.
            self.min_pending_offset = min((slot[0] for slot in self.slots.values() if slot),
                                          default=self.scan_offset)
            self._dirty = True
        if not self._dirty:
            return None
        self._dirty = False
        return self._progress().to_json()

    def next_due(self) -> int | None:
        """When the next pending timer falls due (ms), or None."""
        return self._seconds[0] * 1000 if self._seconds else None

    def runtime_info(self) -> dict[str, str]:
        """This service's keys of GET_BROKER_RUNTIME_INFO (5.x: timers waiting for their time)."""
        return {"timerPendingNum": str(self.pending),
                "timerNextDueTimestamp": str(self.next_due() or 0)}


def _real_message(record) -> MessageExtBrokerInner | None:
    """A timer's record rebuilt for its real topic and queue (None without one)."""
    props = string_to_properties(record.properties_string)
    topic = props.pop(PROPERTY_REAL_TOPIC, None)
    queue_id = props.pop(PROPERTY_REAL_QUEUE_ID, "0")
    if topic is None:
        return None
    return MessageExtBrokerInner(
        topic=topic, body=record.body,
        queue_id=int(queue_id) if queue_id.isascii() and queue_id.isdigit() else 0,
        flag=record.flag, properties=props, properties_string=properties_to_string(props),
        sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
        born_host=record.born_host, reconsume_times=record.reconsume_times)

