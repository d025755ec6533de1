"""Message ids: the broker's offset msgId and the client's UNIQ_KEY id.

* offset msgId = store host IP (4 or 16 bytes) + port (int32) + CommitLog offset (int64), as
  uppercase hex: 32 characters for IPv4, 56 for IPv6 (``MessageDecoder.createMessageId``).
* UNIQ_KEY id = client IP (4 or 16) + pid (int16) + class-loader hash (int32) + milliseconds since
  the start of the month (int32) + counter (int16) (``MessageClientIDSetter``). It has the same
  length as an offset msgId but cannot be decoded as one.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import struct
import time
from datetime import datetime
from functools import lru_cache
from typing import NamedTuple

_OFFSET_TAIL = struct.Struct(">iq")
_UNIQ_TAIL = struct.Struct(">hiIH")


@lru_cache(maxsize=4096)  # every put parses its client's address: a few µs each
def host_to_bytes(ip: str, port: int) -> bytes:
    """The 8- or 20-byte form of an (ip, port) pair in records and msgIds."""
    return ipaddress.ip_address(ip).packed + struct.pack(">i", port)


def bytes_to_host(raw: bytes) -> tuple[str, int]:
    """Inverse of :func:`host_to_bytes`."""
    (port,) = struct.unpack(">i", raw[-4:])
    return str(ipaddress.ip_address(raw[:-4])), port


def is_ipv6(ip: str) -> bool:
    """Whether an address needs the 16-byte host form."""
    return ":" in ip


def create_message_id(store_host: bytes, offset: int) -> str:
    """The offset msgId of the record at ``offset`` on the broker ``store_host`` (8/20 bytes)."""
    return (store_host + offset.to_bytes(8, "big", signed=True)).hex().upper()


class OffsetMessageId(NamedTuple):
    ip: str
    port: int
    offset: int


_HEX_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}")


def decode_message_id(msg_id: str) -> OffsetMessageId:
    """Decode an offset msgId; raises ``ValueError`` for anything that is not one."""
    if not _HEX_ID.fullmatch(msg_id):
        raise ValueError(f"a msgId is 32 or 56 hex digits, not {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(raw) == 16 else 16
    port, offset = _OFFSET_TAIL.unpack(raw[ip_len:])
    return OffsetMessageId(str(ipaddress.ip_address(raw[:ip_len])), port, offset)


class UniqMessageId(NamedTuple):
    ip: str
    pid: int
    class_loader_hash: int
    millis_since_month_start: int
    counter: int


def decode_uniq_message_id(msg_id: str) -> UniqMessageId:
    """Decode a client UNIQ_KEY id; raises ``ValueError`` for a malformed one."""
    if not _HEX_ID.fullmatch(msg_id):
        raise ValueError(f"a UNIQ_KEY id is 32 or 56 hex digits, not {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(raw) == 16 else 16
    pid, loader, millis, counter = _UNIQ_TAIL.unpack(raw[ip_len:])
    return UniqMessageId(str(ipaddress.ip_address(raw[:ip_len])), pid, loader, millis, counter)


def uniq_id_timestamp(msg_id: str, now_ms: int | None = None) -> int:
    """Approximate born time of a UNIQ_KEY id (``MessageClientIDSetter.getNearlyTimeFromID``)."""
    millis = decode_uniq_message_id(msg_id).millis_since_month_start
    now = datetime.fromtimestamp((now_ms if now_ms is not None else time.time() * 1000) / 1000)
    month_start = _month_start_ms(now.year, now.month)
    guess = month_start + millis
    if now_ms is not None and guess > now_ms:
        year, month = (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)
        guess = _month_start_ms(year, month) + millis
    return guess


def _month_start_ms(year: int, month: int) -> int:
    # Local time, as Java's MessageClientIDSetter takes the month start from its default zone.
    return int(datetime(year, month, 1).timestamp() * 1000)


class UniqIdGenerator:
    """Makes UNIQ_KEY ids for one process, as a RocketMQ producer does."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        prefix = ipaddress.ip_address(ip).packed + struct.pack(
            ">hi", os.getpid() & 0x7FFF, id(self) & 0x7FFFFFFF
        )
        self._prefix_hex = prefix.hex().upper()
        # next() of an itertools.count is one step under the interpreter lock: threads sharing
        # a generator never get the same number (and need no lock of ours for it).
        self._counter = itertools.count(1)
        self._month_start = self._next_month_start = 0
        # The last millisecond's head, (ms, text): sends in one millisecond share it, so most
        # ids format only their counter. One tuple, swapped whole: threads never pair one
        # millisecond with another's text.
        self._last_head: tuple[int, str] = (-1, "")

    def next_id(self, now_ms: int | None = None) -> str:
        """A new id; unique within this process for 65,536 ids per millisecond."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        last = self._last_head
        if last[0] != now_ms:
            last = self._last_head = (now_ms, self._head(now_ms))
        return f"{last[1]}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, count: int, now_ms: int | None = None) -> list[str]:
        """``count`` new ids of one millisecond (a batch's), as ``next_id`` makes them one by
        one: the clock read and the head formatted once."""
        return ids_of(*self.reserve(count, now_ms), count)

    def reserve(self, count: int, now_ms: int | None = None) -> tuple[str, int]:
        """The head and first counter value of ``count`` new ids (:func:`ids_of` writes them;
        so does the producer's compiled batch body)."""
        head = self._head(now_ms)
        # ``count`` numbers taken in one C-level step (no other thread takes one in between):
        # consecutive.
        numbers = list(itertools.islice(self._counter, count))
        return head, numbers[0] if numbers else 0

    def _head(self, now_ms: int | None) -> str:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if not self._month_start <= now_ms < self._next_month_start:
            now = datetime.fromtimestamp(now_ms / 1000)
            self._month_start = _month_start_ms(now.year, now.month)
            year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
            self._next_month_start = _month_start_ms(year, month)
        # Java writes the low 32 bits and reads them back unsigned (past day 24 they need bit 31).
        return f"{self._prefix_hex}{(now_ms - self._month_start) & 0xFFFFFFFF:08X}"


def ids_of(head: str, first: int, count: int) -> list[str]:
    """The ``count`` ids :meth:`UniqIdGenerator.reserve` gave ``head`` and ``first`` for."""
    return [f"{head}{n & 0xFFFF:04X}" for n in range(first, first + count)]
