"""The checkpoint file: store times of the last flushed CommitLog, ConsumeQueue and index data.

Layout (``StoreCheckpoint``), a 4096-byte file, big-endian, the rest zero::

    | physicMsgTimestamp i64 | logicsMsgTimestamp i64 | indexMsgTimestamp i64 |
    | masterFlushedOffset i64 (5.x) | confirmPhyOffset i64 (5.x) |

Crash recovery starts from the last CommitLog file whose first message is older than
``min_timestamp()``: everything before it is known to be on disk with its derived views.
"""

from __future__ import annotations

import mmap
import os
import struct

from common.platform.durability import sync_mapped
from common.platform.files import BINARY
from storage.file_space import allocate

CHECKPOINT_SIZE = 4096
CHECKPOINT = struct.Struct(">qqqqq")
# Store times in a file are only trusted to within this much (RocketMQ subtracts 3 s).
RECOVERY_MARGIN_MS = 3000


class StoreCheckpoint:
    """The mapped checkpoint file; fields are written in memory and persisted by ``flush``."""

    def __init__(self, path: str) -> None:
        self.path = path
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | BINARY, 0o644)
        try:
            if os.fstat(self._fd).st_size < CHECKPOINT_SIZE:
                os.ftruncate(self._fd, CHECKPOINT_SIZE)
            # Claim the page now: a flush through the mapping into a hole of a full disk would
            # be a SIGBUS (file_space.py), where this is an error at load time.
            allocate(self._fd, 0, CHECKPOINT_SIZE)
            self._mm = mmap.mmap(self._fd, CHECKPOINT_SIZE)
        except BaseException:
            os.close(self._fd)
            raise
        if exists:
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
                self.master_flushed_offset,
                self.confirm_phy_offset,
            ) = CHECKPOINT.unpack_from(self._mm, 0)
        else:
            self.physic_msg_timestamp = self.logics_msg_timestamp = 0
            self.index_msg_timestamp = self.master_flushed_offset = self.confirm_phy_offset = 0

    def flush(self) -> None:
        """Write the fields and fdatasync."""
        CHECKPOINT.pack_into(
            self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
            self.index_msg_timestamp, self.master_flushed_offset, self.confirm_phy_offset,
        )
        sync_mapped(self._mm, self._fd, 0, CHECKPOINT_SIZE)

    def min_timestamp(self) -> int:
        """Oldest of the CommitLog and ConsumeQueue times, less the safety margin."""
        lowest = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, lowest - RECOVERY_MARGIN_MS)

    def min_timestamp_index(self) -> int:
        """Like ``min_timestamp`` but also bounded by the index time (messageIndexSafe)."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def shutdown(self) -> None:
        try:
            self.flush()
        finally:
            self.close()

    def close(self) -> None:
        """Unmap and close without writing (a shutdown whose disk hangs: the file keeps the
        last checkpoint that reached it)."""
        self._mm.close()
        os.close(self._fd)
