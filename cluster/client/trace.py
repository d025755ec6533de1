"""Message trace: what a producer sent and what consumers did with it, as RocketMQ clients
record it in ``RMQ_SYS_TRACE_TOPIC``.

Records are RocketMQ's text format (fields split by \\x01, records ended by \\x02): ``Pub``
(time, region, group, topic, msgId, tags, keys, store host, body length, cost, message type,
offset msgId, success), ``SubBefore`` (time, region, group, request id, msgId, retry times,
keys) and ``SubAfter`` (request id, msgId, cost, success, keys, context code, time, group).
Each trace message is keyed by the traced msgIds and keys, so the index finds a message's
trace by its id. A dispatcher batches records and sends them with its own producer, off the
sending and consuming paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass

from cluster.client.message import Message

log = logging.getLogger(__name__)

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
REGION = "DefaultRegion"
C, F = "\x01", "\x02"  # RocketMQ's CONTENT_SPLITOR and FIELD_SPLITOR
NORMAL_MSG = 0


def encode_pub(group: str, topic: str, msg_id: str, tags: str | None, keys: str | None,
               store_host: str, body_length: int, cost_ms: int, offset_msg_id: str, success: bool,
               timestamp: int | None = None) -> str:
    fields = ["Pub", timestamp or int(time.time() * 1000), REGION, group, topic, msg_id, tags or "",
              keys or "", store_host, body_length, cost_ms, NORMAL_MSG, offset_msg_id,
              str(success).lower()]
    return C.join(str(f) for f in fields) + F


def encode_sub_before(group: str, request_id: str, msg_id: str, retry_times: int, keys: str | None,
                      timestamp: int | None = None) -> str:
    fields = ["SubBefore", timestamp or int(time.time() * 1000), REGION, group, request_id, msg_id,
              retry_times, keys or ""]
    return C.join(str(f) for f in fields) + F


def encode_sub_after(group: str, request_id: str, msg_id: str, cost_ms: int, success: bool,
                     keys: str | None, timestamp: int | None = None) -> str:
    fields = ["SubAfter", request_id, msg_id, cost_ms, str(success).lower(), keys or "",
              0 if success else 1, timestamp or int(time.time() * 1000), group]
    return C.join(str(f) for f in fields) + F


@dataclass(slots=True)
class TraceEvent:
    kind: str
    timestamp: int
    group: str
    msg_id: str
    success: bool | None = None
    cost_ms: int | None = None
    detail: str = ""


def decode(text: str) -> list[TraceEvent]:
    """The records of one trace message body (unknown or short records are skipped)."""
    events = []
    for record in text.split(F):
        parts = record.split(C)
        try:
            if parts[0] == "Pub" and len(parts) >= 12:
                events.append(TraceEvent("Pub", int(parts[1]), parts[3], parts[5],
                                         parts[13] == "true" if len(parts) > 13 else None,
                                         int(parts[10]), f"topic {parts[4]} on {parts[8]}"))
            elif parts[0] == "SubBefore" and len(parts) >= 8:
                events.append(TraceEvent("SubBefore", int(parts[1]), parts[3], parts[5],
                                         detail=f"delivery {int(parts[6]) + 1}"))
            elif parts[0] == "SubAfter" and len(parts) >= 6:
                timestamp = int(parts[7]) if len(parts) >= 9 else 0
                group = parts[8] if len(parts) >= 9 else ""
                events.append(TraceEvent("SubAfter", timestamp, group, parts[2], parts[4] == "true",
                                         int(parts[3])))
        except (ValueError, IndexError):
            continue
    return events


def trace_keys(msg_id: str, keys: str | None) -> list[str]:
    return [msg_id, *(keys or "").split()]


def inner_producer_group(owner_group: str) -> str:
    """The group of the producer that sends a client's traces (RocketMQ's _INNER_TRACE_PRODUCER)."""
    return f"_INNER_TRACE_PRODUCER-{owner_group}"


_STOP = object()  # (TraceDispatcher's queue: send what came before, then end)
STOP_WAIT_SECONDS = 5.0  # how long a stop waits for what was submitted before it to be sent


class TraceDispatcher:
    """Collects trace records and sends them in batches with its own producer.

    The producer is handed in (the traced client makes it), so that this module, which the
    producer uses to encode traces, does not import the producer back.
    """

    def __init__(self, producer) -> None:
        self.producer = producer
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=20000)
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.producer.start()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def submit(self, record: str, keys: list[str]) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # tracing never slows the traced path down
            self.queue.put_nowait((record, keys))

    async def _run(self) -> None:
        while True:
            first = await self.queue.get()
            if first is _STOP:
                return
            batch = [first]
            while not self.queue.empty() and len(batch) < 100:
                item = self.queue.get_nowait()
                if item is _STOP:
                    await self._send(batch)
                    return
                batch.append(item)
            await self._send(batch)

    async def _send(self, batch) -> None:
        body = "".join(record for record, _ in batch).encode()
        keys = sorted({k for _, ks in batch for k in ks if k})
        try:
            await self.producer.send(Message(TRACE_TOPIC, body, keys=" ".join(keys)[:8000]))
        except Exception as exc:  # traces are best effort: the traced messages went through
            log.debug("trace batch lost: %s", exc)

    async def stop(self) -> None:
        """Send what was submitted, then stop. The batch being sent is waited for, not
        cancelled: a consumer's SubBefore/SubAfter records, taken off the queue a moment
        before its shutdown, were lost that way under load."""
        task = self._task
        if task is not None:
            with contextlib.suppress(asyncio.QueueFull):  # (full: the wait below times out)
                self.queue.put_nowait(_STOP)
            with contextlib.suppress(Exception):  # (wait_for cancels it past the limit)
                await asyncio.wait_for(task, STOP_WAIT_SECONDS)
        rest = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not _STOP:
                rest.append(item)
        if rest:
            await self._send(rest)
        await self.producer.shutdown()


def new_request_id() -> str:
    return uuid.uuid4().hex
