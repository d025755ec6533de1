"""ScheduleMessageService: delayed messages come back to their real topic when due.

A message with delay level L is stored in ``SCHEDULE_TOPIC_XXXX`` queue L-1, its ConsumeQueue
unit carrying the delivery time instead of a tag hash. This service walks each level's queue
from its offset; a unit that is due is read, rebuilt for ``REAL_TOPIC``/``REAL_QID`` without
the delay, and stored as a normal message. Offsets per level go to ``config/delayOffset.json``
every 10 s and at shutdown.

It runs on masters, and on a slave acting for a master that is down (``enableSlaveActingMaster``),
which hands what is due to another group's master through the :class:`EscapeBridge`. Two things
keep a message from being delivered twice when the service changes hands:

* whoever starts (a restarted master, or a slave that begins acting) may find offsets up to 10 s
  old; a unit that was already due before it started is delivered only if its real topic holds
  no copy with the same UNIQ_KEY stored after it was scheduled (the index answers that);
* a master that comes back takes, level by level, the furthest of its own offsets and those of
  its slaves, and waits until none of them is acting any more before delivering.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from cluster.broker.hand_back import (
    ACTING_MASTER_FIELD,
    ask_delay_offsets,
    delivered_before,
    take_over_from_slaves,
    wait_for_dispatch,
)
from cluster.broker.json_config import JsonConfigFile
from cluster.remoting import fastjson
from cluster.remoting.client import RemotingClient
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SCHEDULE_TOPIC,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
)

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1  # RocketMQ re-checks a level every 100 ms
PERSIST_INTERVAL = 10.0


class ScheduleMessageService:
    def __init__(self, broker, escape=None) -> None:
        """``escape`` (an EscapeBridge) makes this the service of a slave acting as master."""
        self.broker = broker
        self.escape = escape
        self.file = JsonConfigFile(delay_offset_path(broker))
        self.levels = len(broker.store_config.delay_levels_ms())
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        self.skipped_duplicates = 0
        self.started_ms = 0
        self._dirty = False
        self._task: asyncio.Task | None = None
        self._writing: asyncio.Future | None = None  # the last periodic persist, in a thread

    def load(self) -> None:
        self.offsets = read_delay_offsets(self.file)

    def persist(self) -> None:
        self.file.persist(delay_offsets_json(self.offsets))
        self._dirty = False

    async def _persist_aside(self) -> None:
        """``persist``, the file written in a worker thread, not on the event loop (its fsync:
        1.4 ms typically, up to 20 ms under load); the offsets' text is taken here."""
        text = delay_offsets_json(self.offsets)
        self._dirty = False
        self._writing = asyncio.ensure_future(asyncio.to_thread(self.file.persist, text))
        await asyncio.shield(self._writing)

    def start(self) -> None:
        self.load()
        self._clamp_to_queues()
        self.started_ms = int(time.time() * 1000)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _clamp_to_queues(self) -> None:
        """No level's offset past its queue's end (RocketMQ's correctDelayOffset). The offsets
        are written every few seconds; a crash or a cut tail can cost a schedule queue messages
        they counted, and the delayed messages put next take those queue offsets again: left
        ahead, they would never be delivered. (At start, recovery's dispatch is complete.)"""
        store = self.broker.store
        for level, saved in list(self.offsets.items()):
            queue = store.find_consume_queue(SCHEDULE_TOPIC, level - 1, create=False)
            end = queue.get_max_offset_in_queue() if queue is not None else 0
            if saved > end:
                log.warning("delay level %d: offset %d is past its queue's end %d; from %d on",
                            level, saved, end, end)
                self.offsets[level] = end
                self._dirty = True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._writing is not None:  # (its older offsets must not land after the last ones)
            await asyncio.gather(self._writing, return_exceptions=True)
        if self._dirty or not os.path.exists(self.file.path):
            self.persist()

    async def _run(self) -> None:
        if self.escape is None and self.broker.config.enable_slave_acting_master:
            await take_over_from_slaves(self.broker, self._take_slave_offsets)
            # (a slave's offsets may count messages this store's queues lost in a crash)
            self._clamp_to_queues()
        # Units already due are checked against the index: a delivered copy must be indexed.
        await wait_for_dispatch(self.broker.store)
        last_persist = time.monotonic()
        while True:
            try:
                await self.deliver_due()
            except Exception:
                log.exception("delivering delayed messages failed; trying again")
            if self._dirty and time.monotonic() - last_persist >= PERSIST_INTERVAL:
                await self._persist_aside()
                last_persist = time.monotonic()
            await asyncio.sleep(POLL_INTERVAL)

    async def _take_slave_offsets(self, client: RemotingClient, address: str) -> bool | None:
        """Level by level, the further of this master's offsets and a slave's; whether that
        slave still acts as master (None: it did not answer)."""
        answer = await self._slave_offsets(client, address)
        if answer is None:
            return None
        acting, offsets = answer
        for level, offset in offsets.items():
            if offset > self.offsets.get(level, 0):
                log.info("delay level %d: a slave delivered up to %d; going on from there",
                         level, offset)
                self.offsets[level] = offset
                self._dirty = True
        return acting

    @staticmethod
    async def _slave_offsets(client, address: str) -> tuple[bool, dict[int, int]] | None:
        response = await ask_delay_offsets(client, address)
        if response is None:
            return None
        offsets = parse_delay_offsets(fastjson.loads(response.body.decode()) if response.body else {})
        return response.field(ACTING_MASTER_FIELD) == "true", offsets

    async def deliver_due(self, now_ms: int | None = None) -> int:
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
                    record = store.look_message_by_offset(unit.commit_log_offset, unit.size)
                except StoreError as exc:  # the record is gone (expired): skip it
                    log.warning("delayed message at %d is gone: %s", unit.commit_log_offset, exc)
                else:
                    msg = real_message(record)
                    if unit.tags_code <= self.started_ms and self._delivered_before(msg, record):
                        self.skipped_duplicates += 1
                    elif not await self._put(msg, unit.commit_log_offset):
                        break
                    else:
                        count += 1
                offset += 1
            if offset != self.offsets.get(level, 0):
                self.offsets[level] = offset
                self._dirty = True
        self.delivered += count
        return count

    async def _put(self, msg: MessageExtBrokerInner, where: int) -> bool:
        if self.escape is not None:
            return await self.escape.put(msg)
        try:
            self.broker.store.put_message_nowait(msg)
        except PutMessageError as exc:
            log.warning("delayed message at %d not delivered yet: %s", where, exc)
            return False
        return True

    def _delivered_before(self, msg: MessageExtBrokerInner, record) -> bool:
        """Whether the real topic already holds this message, put there by whoever delivered
        before this service started (a master's last 10 s of progress may not be on disk)."""
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq and delivered_before(self.broker.store, msg.topic, uniq, record):
            log.info("delayed message %s was delivered before; not again", uniq)
            return True
        return False


def delay_offset_path(broker) -> str:
    return os.path.join(broker.store_config.store_path_root_dir, "config", "delayOffset.json")


def read_delay_offsets(file: JsonConfigFile) -> dict[int, int]:
    return parse_delay_offsets(file.load() or {})


def parse_delay_offsets(data: dict) -> dict[int, int]:
    """delayOffset.json's ``{"offsetTable": {level: offset}}`` (unquoted keys parsed already)."""
    return {int(level): int(offset) for level, offset in (data.get("offsetTable") or {}).items()}


def delay_offsets_json(offsets: dict[int, int]) -> str:
    return fastjson.dumps_legacy({"offsetTable": dict(sorted(offsets.items()))})


def real_message(record) -> MessageExtBrokerInner:
    """The scheduled record rebuilt for its real topic and queue, without the delay."""
    props = string_to_properties(record.properties_string)
    topic = props.get(PROPERTY_REAL_TOPIC, record.topic)
    queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, record.queue_id))
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    return MessageExtBrokerInner(
        topic=topic, body=record.body, queue_id=queue_id, flag=record.flag, properties=props,
        properties_string=properties_to_string(props), sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp, born_host=record.born_host,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset)
