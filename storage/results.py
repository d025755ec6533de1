"""Value objects the store answers with, named as RocketMQ names them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from storage.errors import PutMessageStatus
from storage.message import tags_string_to_tags_code


@dataclass(slots=True)
class AppendMessageResult:
    """Where a put landed (RocketMQ's ``AppendMessageResult``); batches list every msgId."""

    wrote_offset: int
    wrote_bytes: int
    store_timestamp: int
    logics_offset: int
    msg_num: int = 1
    msg_ids: list[str] = field(default_factory=list)
    topic: str = ""
    queue_id: int = 0
    page_cache_rt_ms: float = 0.0

    @property
    def msg_id(self) -> str:
        return ",".join(self.msg_ids)

    @property
    def next_offset(self) -> int:
        """End of the written bytes: what a flush or a slave must reach."""
        return self.wrote_offset + self.wrote_bytes


@dataclass(slots=True)
class PutMessageResult:
    """Status of a put and where it landed (``append`` is None only for refused puts)."""

    status: PutMessageStatus
    append: AppendMessageResult | None

    @property
    def ok(self) -> bool:
        """Stored (possibly not yet confirmed durable: FLUSH_DISK_TIMEOUT and friends)."""
        return self.append is not None


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    """Records read from one queue: raw stored bytes, ready to be a pull response body."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    # A pull's read (read_queue's ``joined``): ``messages`` are chunks of records one after
    # another, this many records in all, and ``queue_offsets`` is left empty.
    joined_count: int | None = None

    @property
    def message_count(self) -> int:
        return len(self.messages) if self.joined_count is None else self.joined_count

    @property
    def buffer_total_size(self) -> int:
        return sum(map(len, self.messages))

    @property
    def body(self) -> bytes:
        return b"".join(self.messages)


@dataclass(slots=True)
class QueryMessageResult:
    """Records found by key, with the index's last update (QUERY_MESSAGE's response header)."""

    messages: list[bytes]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int

    @property
    def body(self) -> bytes:
        return b"".join(self.messages)


class MessageFilter(Protocol):
    """What ``get_message`` asks of a subscription (RocketMQ's ``MessageFilter``)."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: bytes) -> bool: ...


class TagsFilter:
    """A tag subscription: ``*`` (or empty) matches all, else ``TagA || TagB`` by tag hash."""

    def __init__(self, expression: str | None) -> None:
        expression = (expression or "").strip()
        if expression in ("", "*"):
            self.codes: set[int] | None = None
        else:
            tags = [t.strip() for t in expression.split("||") if t.strip()]
            self.codes = {tags_string_to_tags_code(t) for t in tags}

    @property
    def matches_all(self) -> bool:
        """``*``: every record passes (the read path may then skip asking record by record)."""
        return self.codes is None

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        return True
