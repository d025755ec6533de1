"""ScheduleMessageService: delayed messages come back to their real topic when due.

A message with delay level L is stored in ``SCHEDULE_TOPIC_XXXX`` queue L-1, its ConsumeQueue
unit carrying the delivery time instead of a tag hash. This service walks each level's queue
from its offset; a unit that is due is read, rebuilt for ``REAL_TOPIC``/``REAL_QID`` without
the delay, and stored as a normal message. Offsets per level go to ``config/delayOffset.json``
every 10 s and at shutdown, so a restart neither loses nor repeats what was delivered. It runs
on masters only (slaves copy the offsets).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from cluster.broker.json_config import JsonConfigFile
from cluster.remoting import fastjson
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SCHEDULE_TOPIC,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
)

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1  # RocketMQ re-checks a level every 100 ms
PERSIST_INTERVAL = 10.0


class ScheduleMessageService:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.file = JsonConfigFile(os.path.join(broker.store_config.store_path_root_dir, "config",
                                                "delayOffset.json"))
        self.levels = len(broker.store_config.delay_levels_ms())
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        self._dirty = False
        self._task: asyncio.Task | None = None

    def load(self) -> None:
        data = self.file.load() or {}
        self.offsets = {int(level): int(offset) for level, offset in (data.get("offsetTable") or {}).items()}

    def persist(self) -> None:
        self.file.persist(fastjson.dumps_legacy({"offsetTable": dict(sorted(self.offsets.items()))}))
        self._dirty = False

    def start(self) -> None:
        self.load()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._dirty or not os.path.exists(self.file.path):
            self.persist()

    async def _run(self) -> None:
        last_persist = time.monotonic()
        while True:
            try:
                self.deliver_due()
            except Exception:
                log.exception("delivering delayed messages failed; trying again")
            if self._dirty and time.monotonic() - last_persist >= PERSIST_INTERVAL:
                self.persist()
                last_persist = time.monotonic()
            await asyncio.sleep(POLL_INTERVAL)

    def deliver_due(self, now_ms: int | None = None) -> int:
        """Deliver every message whose time has come; returns how many."""
        store = self.broker.store
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        count = 0
        for level in range(1, self.levels + 1):
            queue = store.find_consume_queue(SCHEDULE_TOPIC, level - 1, create=False)
            if queue is None:
                continue
            offset = max(self.offsets.get(level, 0), queue.get_min_offset_in_queue())
            end = queue.get_max_offset_in_queue()
            while offset < end:
                unit = queue.get_unit(offset)
                if unit is None or unit.tags_code > now_ms:
                    break  # units are in delivery order within a level
                try:
                    self._redeliver(store.look_message_by_offset(unit.commit_log_offset, unit.size))
                except PutMessageError as exc:
                    log.warning("delayed message at %d not delivered yet: %s", unit.commit_log_offset, exc)
                    break
                except StoreError as exc:  # the record is gone (expired): skip it
                    log.warning("delayed message at %d is gone: %s", unit.commit_log_offset, exc)
                offset += 1
                count += 1
            if offset != self.offsets.get(level, 0):
                self.offsets[level] = offset
                self._dirty = True
        self.delivered += count
        return count

    def _redeliver(self, record) -> None:
        props = string_to_properties(record.properties_string)
        topic = props.get(PROPERTY_REAL_TOPIC, record.topic)
        queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, record.queue_id))
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        msg = MessageExtBrokerInner(
            topic=topic, body=record.body, queue_id=queue_id, flag=record.flag, properties=props,
            properties_string=properties_to_string(props), sys_flag=record.sys_flag,
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            reconsume_times=record.reconsume_times,
            prepared_transaction_offset=record.prepared_transaction_offset)
        self.broker.store.put_message_nowait(msg)
