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
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import os
import struct
import time
from array import array

from cluster.broker.json_config import JsonConfigFile
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
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


class TimerMessageService:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.file = JsonConfigFile(os.path.join(broker.store_config.store_path_root_dir,
                                                "config", "timercheck.json"))
        self.slots: dict[int, array] = {}
        self._seconds: list[int] = []  # a heap of the slots' seconds
        self.scan_offset = 0
        self.delivered_up_to = 0
        self.min_pending_offset = 0
        self.pending = 0
        self.delivered = 0
        self.rolled = 0  # records stored again in the timer topic (see ROLL_WINDOW_MS)
        self._dirty = False
        self._task: asyncio.Task | None = None

    # -- life ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.broker.topics.create_in_send_message_back_method(TIMER_TOPIC, 1, PERM_READ | PERM_WRITE)
        self.recover()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.save(refresh_min=True)

    def recover(self) -> None:
        """File again what was pending when the broker stopped (see the module's docstring)."""
        data = self.file.load() or {}
        saved_scan = int(data.get("scanOffset", 0))
        self.delivered_up_to = int(data.get("deliveredUpTo", 0))
        start = int(data.get("minPendingOffset", 0))
        self.min_pending_offset = start
        queue = self._queue()
        if queue is None:
            return
        self.scan_offset = max(start, queue.get_min_offset_in_queue())
        # Before saved_scan, units due by deliveredUpTo went out already; after it, everything
        # is new (a unit filed and delivered just before a crash may go out twice).
        self.scan(now_ms=None, skip_before=saved_scan)
        log.info("timer: %d messages pending after start", self.pending)

    async def _run(self) -> None:
        last_save = last_min = time.monotonic()
        while True:
            try:
                now = int(time.time() * 1000)
                self.scan(now)
                self.deliver_due(now, budget=ROUND_BUDGET)
            except Exception:  # one bad round must not stop timers for good
                log.exception("timer messages: a round failed; trying again")
            if time.monotonic() - last_save >= SAVE_INTERVAL:
                refresh = time.monotonic() - last_min >= MIN_PENDING_INTERVAL
                self.save(refresh_min=refresh)
                last_save = time.monotonic()
                if refresh:
                    last_min = last_save
            await asyncio.sleep(POLL_INTERVAL)

    def _queue(self):
        return self.broker.store.find_consume_queue(TIMER_TOPIC, TIMER_QUEUE_ID, create=False)

    # -- filing -------------------------------------------------------------------------------------
    def scan(self, now_ms: int | None, skip_before: int = -1) -> int:
        """File the units written since the last scan; deliver at once those already due."""
        queue = self._queue()
        if queue is None:
            return 0
        end = queue.get_max_offset_in_queue()
        filed = 0
        wall_ms = int(time.time() * 1000)
        commit_log = self.broker.store.commit_log
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
                    # (what was due by deliveredUpTo before a restart went out, or rolled)
                    if not (offset < skip_before and due <= self.delivered_up_to):
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
            slot = self.slots[second]
            done = 0
            for offset in slot:
                if budget is not None and count + done >= budget:
                    break
                if not self._deliver(queue, offset, now_ms):
                    break
                done += 1
            count += done
            self.pending -= done
            if done < len(slot):
                # The budget ran out, or the store refused one: the rest waits for the next round.
                del slot[:done]
                break
            heapq.heappop(self._seconds)
            del self.slots[second]
            self.delivered_up_to = max(self.delivered_up_to, second * 1000)
            self._dirty = True
        self.delivered += count - (self.rolled - rolled)
        return count

    def _deliver(self, queue, offset: int, now_ms: int) -> bool:
        unit = queue.get_unit(offset) if queue is not None else None
        if unit is None:
            return True  # expired with its file: nothing to deliver
        store = self.broker.store
        try:
            record = store.look_message_by_offset(unit.commit_log_offset, unit.size)
        except StoreError as exc:
            log.warning("timer message at %d is gone: %s", unit.commit_log_offset, exc)
            return True
        if unit.tags_code > now_ms:  # filed for a roll (ROLL_WINDOW_MS), not due yet
            return self._roll(record, unit.commit_log_offset)
        props = string_to_properties(record.properties_string)
        topic = props.pop(PROPERTY_REAL_TOPIC, None)
        queue_id = props.pop(PROPERTY_REAL_QUEUE_ID, "0")
        if topic is None:
            return True
        msg = MessageExtBrokerInner(
            topic=topic, body=record.body,
            queue_id=int(queue_id) if queue_id.isascii() and queue_id.isdigit() else 0,
            flag=record.flag, properties=props, properties_string=properties_to_string(props),
            sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
            born_host=record.born_host, reconsume_times=record.reconsume_times)
        try:
            store.put_message_nowait(msg)
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

    # -- progress -----------------------------------------------------------------------------------
    def save(self, refresh_min: bool = False) -> None:
        if refresh_min:
            # Each slot's offsets ascend (filed in queue order), so its first is its oldest.
            self.min_pending_offset = min((slot[0] for slot in self.slots.values() if slot),
                                          default=self.scan_offset)
            self._dirty = True
        if not self._dirty:
            return
        self._dirty = False
        scan = self.scan_offset
        if self._seconds and self._seconds[0] * 1000 <= self.delivered_up_to:
            # A timer filed after its time had passed, and not delivered yet (the store refused
            # it): a restart must file it again, so the saved scan stops before it.
            scan = min([scan] + [self.slots[s][0] for s in self._seconds
                                 if s * 1000 <= self.delivered_up_to and self.slots[s]])
        self.file.persist(json.dumps({
            "scanOffset": scan, "minPendingOffset": self.min_pending_offset,
            "deliveredUpTo": self.delivered_up_to}))

    def next_due(self) -> int | None:
        """When the next pending timer falls due (ms), or None."""
        return self._seconds[0] * 1000 if self._seconds else None
