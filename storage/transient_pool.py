"""The transient store pool: write buffers that take CommitLog appends before the file does."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class TransientStorePool:
    """Write buffers that take appends before the commit service copies them to the file.

    RocketMQ's pool holds ``transientStorePoolSize`` locked off-heap buffers of one CommitLog
    file each; here they are ``bytearray``s, allocated on first use.
    """

    def __init__(self, pool_size: int, file_size: int) -> None:
        self.pool_size = pool_size
        self.file_size = file_size
        self._free: list[bytearray] = []
        self._created = 0
        self._lock = threading.Lock()

    def borrow_buffer(self) -> bytearray | None:
        """A buffer for a new file, or None when all are lent (the file then writes directly)."""
        with self._lock:
            if self._free:
                return self._free.pop()
            if self._created < self.pool_size:
                self._created += 1
                return bytearray(self.file_size)
        log.warning("TransientStorePool has no buffer left; writing to the mapped file directly")
        return None

    def return_buffer(self, buffer: bytearray) -> None:
        """Give a buffer back once its file is fully committed."""
        with self._lock:
            self._free.append(buffer)

    def available_buffer_nums(self) -> int:
        with self._lock:
            return len(self._free) + self.pool_size - self._created
