"""Typed errors of the message store.

::

    StoreError
    ├── ConfigError                      a store setting has a bad value (names the key)
    ├── PutMessageError                  a put was refused; .status is RocketMQ's PutMessageStatus
    │   ├── MessageIllegalError            a field does not fit the record, topic too long, bad batch
    │   │   └── PropertiesSizeExceededError  properties string longer than 32,767 bytes
    │   ├── ServiceNotAvailableError       shut down, slave role, disk nearly full, a store
    │   │   │                                service cannot write (RunningFlags)
    │   │   └── DiskNotWritableError         the disk refused the put's bytes (full, read-only)
    │   ├── CreateMappedFileError          the next CommitLog file could not be created
    │   ├── OSPageCacheBusyError           a put has held the lock for too long
    │   └── AppendMessageError             the append failed midway; it was rolled back
    ├── RecordError                      a CommitLog record could not be decoded
    │   ├── TornTailError                  bytes end inside a record: truncate and carry on
    │   └── CorruptRecordError             bad magic, size or CRC: stop and report
    ├── OffsetOutOfRangeError            a physical offset outside the CommitLog
    └── StoreLockedError                 another process holds the store's lock file

Nothing in storage returns ``None`` or ``False`` to mean "broken": "not found" and "broken" are
different answers.
"""

from __future__ import annotations

import errno
from enum import Enum
from typing import TypeGuard

from common.errors import RocketDeskError

# errno values that mean "this disk takes no more writes for now": writes are refused with
# SERVICE_NOT_AVAILABLE until a later attempt succeeds, rather than failing as a bug would.
DISK_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG,
})


def is_disk_error(exc: BaseException) -> TypeGuard[OSError]:
    """Whether ``exc`` is the disk refusing a write (full, read-only, …) rather than a bug."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def describe_os_error(exc: OSError) -> str:
    """``No space left on device (ENOSPC) on /store/commitlog/…``: the reason, its errno name
    (what an operator searches for) and the file, without Python's ``[Errno 28]`` noise."""
    name = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno is not None else "OSError"
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = f" on {exc.filename}" if exc.filename else ""
    return f"{reason} ({name}){where}"


class PutMessageStatus(Enum):
    """Outcome of a put, named as RocketMQ's ``PutMessageStatus``."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class StoreError(RocketDeskError):
    """Base of every error raised by the message store."""


class ConfigError(StoreError):
    """A store setting has a value that cannot be used."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"store setting {key}={value!r} is not valid: {reason}")
        self.key = key
        self.value = value


class PutMessageError(StoreError):
    """A put was refused: nothing of it was written, or what was written has been undone."""

    status = PutMessageStatus.UNKNOWN_ERROR


class MessageIllegalError(PutMessageError):
    status = PutMessageStatus.MESSAGE_ILLEGAL


class PropertiesSizeExceededError(MessageIllegalError):
    status = PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


class ServiceNotAvailableError(PutMessageError):
    status = PutMessageStatus.SERVICE_NOT_AVAILABLE


class DiskNotWritableError(ServiceNotAvailableError):
    """The disk refused the bytes of a put (no space, quota, read-only, permission, I/O error)."""


class CreateMappedFileError(PutMessageError):
    status = PutMessageStatus.CREATE_MAPEDFILE_FAILED


class OSPageCacheBusyError(PutMessageError):
    status = PutMessageStatus.OS_PAGECACHE_BUSY


class AppendMessageError(PutMessageError):
    """Something unexpected failed while a record was written; the write was rolled back
    (RocketMQ's ``AppendMessageStatus.UNKNOWN_ERROR``)."""

    status = PutMessageStatus.UNKNOWN_ERROR


class RecordError(StoreError):
    """A CommitLog record could not be decoded at ``offset``."""

    def __init__(self, reason: str, offset: int = -1, path: str | None = None) -> None:
        where = f" at offset {offset}" if offset >= 0 else ""
        if path:
            where += f" in {path}"
        super().__init__(f"{reason}{where}")
        self.reason = reason
        self.offset = offset
        self.path = path


class TornTailError(RecordError):
    """The bytes end inside a record: the tail was torn by a crash and is to be truncated."""


class CorruptRecordError(RecordError):
    """A record whose magic, size or CRC is wrong."""


class OffsetOutOfRangeError(StoreError):
    """A physical offset that no CommitLog file holds."""


class StoreLockedError(StoreError):
    """Another process holds the store directory's lock file."""
