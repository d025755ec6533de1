"""IndexFile and IndexService: a hash index from ``topic#key`` to CommitLog offsets.

One file (``IndexFile``), big-endian::

    header, 40 bytes:
    | beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 | endPhyOffset i64 |
    | hashSlotCount i32 | indexCount i32 |            indexCount starts at 1: entry 0 is unused
    slot table: maxHashSlotNum x i32, the newest entry number of each slot (0 = empty)
    entries: maxIndexNum x 20 bytes
    | key hash i32 | commitlog offset i64 | time diff from beginTimestamp, seconds, i32 |
    | previous entry in the same slot i32 |

Keys indexed per message: its UNIQ_KEY and each space-separated KEYS value, as ``topic#key``.
Files are named by their local creation time (``yyyyMMddHHmmssSSS``); a new one starts when
the current one holds maxIndexNum entries, inheriting its end offset and time as its begin.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache

from common import speedups
from common.platform.durability import sync_mapped
from storage.mapped_file import MappedFile
from storage.message import java_hash_unsigned
from storage.owed_deletions import OWED

log = logging.getLogger(__name__)

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = 40
HASH_SLOT = struct.Struct(">i")
HASH_SLOT_SIZE = 4
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = 20
_INT_MAX = 0x7FFFFFFF
# The most chain entries one key query reads, over all the files it looks in. A query walks
# its key's slot chain newest to oldest on the event loop: a hot key (or keys sharing its slot)
# asked for a time range far back read every newer entry first, millions of them, holding the
# loop for seconds. 100,000 reads are some tens of milliseconds; past them the query answers
# with what it found (RocketMQ walks on, on a thread of its own).
MAX_QUERY_CHAIN_STEPS = 100_000
# The compiled twin of put_key_hash over all of one message's keys (common/_storecore.c).
_index_put_keys = None if speedups.store_core is None else speedups.store_core.index_put_keys


def index_key_hash(key: str, seed: int = 0) -> int:
    """Non-negative key hash: abs(String.hashCode), with Integer.MIN_VALUE mapped to 0.

    ``seed`` is the unsigned Java hash of a prefix of the key (``topic#``).
    """
    h = java_hash_unsigned(key, seed)
    if h == 0x80000000:
        return 0
    return (1 << 32) - h if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def topic_seed(topic: str) -> int:
    """Unsigned Java hash of ``topic#``, the prefix of every key of a topic."""
    return java_hash_unsigned(topic + "#")


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


class IndexFile:
    """One index file, mapped."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.mapped_file = _map_index(path, index_file_size(hash_slot_num, index_num))
        self.mm = self.mapped_file.mm
        # Read with pread: a new file's header is a hole (SIGBUS through the mapping on a full tmpfs).
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = INDEX_HEADER.unpack(self.mapped_file.read_raw(0, INDEX_HEADER_SIZE))
        if self.index_count == 0:
            self.index_count = 1
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self._relink_past_header()

    def _relink_past_header(self) -> None:
        """Point every slot that names an entry past the header's count back at the newest
        entry under it. Entries and slots go into the mapping as keys arrive, the header only at
        flush: a process killed in between leaves slots naming entries the header does not count.
        Dispatch indexes those keys again from the header's count on; a slot left naming one of
        them would make the rewritten entry its own predecessor (or lose its chain), and every
        older key in that slot could no longer be found. A clean shutdown leaves none: then
        this reads one entry."""
        count = self.index_count
        entry = count
        chunk = 4096  # entries read at a time (pread: holes read as zeros, see read_raw)
        while entry < self.index_num:
            raw = self.mapped_file.read_raw(self._entries_base + entry * INDEX_ENTRY_SIZE,
                                            min(chunk, self.index_num - entry) * INDEX_ENTRY_SIZE)
            for offset in range(0, len(raw), INDEX_ENTRY_SIZE):
                key_hash, phy, time_diff, prev = INDEX_ENTRY.unpack_from(raw, offset)
                if not (key_hash or phy or time_diff or prev):
                    return  # (the first never written: the rest were not either)
                self._relink_slot(key_hash, count)
            entry += chunk

    def _relink_slot(self, key_hash: int, count: int) -> None:
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        (slot_value,) = HASH_SLOT.unpack(self.mapped_file.read_raw(slot_pos, HASH_SLOT_SIZE))
        newest = slot_value
        while newest >= count:  # an entry past the header: the one before it in the chain
            raw = self.mapped_file.read_raw(
                self._entries_base + newest * INDEX_ENTRY_SIZE, INDEX_ENTRY_SIZE)
            prev = INDEX_ENTRY.unpack(raw)[3] if len(raw) == INDEX_ENTRY_SIZE else 0
            newest = prev if 0 < prev < newest else 0  # (a chain only ever runs down)
        if newest != slot_value:
            self.mapped_file.ensure_allocated(slot_pos + HASH_SLOT_SIZE)
            HASH_SLOT.pack_into(self.mm, slot_pos, newest)

    @property
    def path(self) -> str:
        return self.mapped_file.path

    @property
    def file_name(self) -> str:
        return self.mapped_file.file_name

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def _write_header(self) -> None:
        # Header and every hash slot: queries read any slot through the mapping.
        self.mapped_file.ensure_allocated(self._entries_base)
        INDEX_HEADER.pack_into(
            self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, self.index_count,
        )

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index ``key``; False when the file is full and a new one is needed."""
        return self.put_key_hash(index_key_hash(key), phy_offset, store_timestamp)

    def put_key_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Index a key by its hash (``index_key_hash``); False when the file is full."""
        if self.index_count >= self.index_num:
            return False
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        entry_pos = self._entries_base + self.index_count * INDEX_ENTRY_SIZE
        # Header, every slot and the entries so far: claimed before a byte goes in (OSError when
        # the disk is full, rather than a SIGBUS through the mapping).
        self.mapped_file.ensure_allocated(entry_pos + INDEX_ENTRY_SIZE)
        mm = self.mm
        (slot_value,) = HASH_SLOT.unpack_from(mm, slot_pos)
        if slot_value <= 0 or slot_value > self.index_count:
            slot_value = 0
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        time_diff = (store_timestamp - self.begin_timestamp) // 1000 if self.begin_timestamp > 0 else 0
        time_diff = min(max(time_diff, 0), _INT_MAX)
        INDEX_ENTRY.pack_into(mm, entry_pos, key_hash, phy_offset, time_diff, slot_value)
        HASH_SLOT.pack_into(mm, slot_pos, self.index_count)
        if slot_value == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        # The header reaches the mapping at flush (every second, and at shutdown), describing
        # what is flushed. Queries read these attributes; after a crash, recovery trusts the
        # header, slots pointing past its count read as empty, and dispatch indexes again from
        # the checkpoint (the same as a crash between an entry and its header write).
        return True

    def put_keys(
        self, seed: int, uniq_key: str | None, keys: str | None, phy_offset: int,
        store_timestamp: int,
    ) -> bool:
        """Index one message's UNIQ_KEY and KEYS in one compiled call, exactly as
        :meth:`put_key_hash` would key by key. False, with nothing written, when the file has
        no room for all of them or the compiled core is not in use: the caller goes key by key.
        """
        if _index_put_keys is None:
            return False
        count = self.index_count
        most = count + 1 + (keys.count(" ") + 1 if keys else 0)
        most = min(most, self.index_num)
        end = self._entries_base + most * INDEX_ENTRY_SIZE
        if end > self.mapped_file.allocated_position:
            self.mapped_file.ensure_allocated(end)
        first = count <= 1
        begin = store_timestamp if first else self.begin_timestamp
        time_diff = (store_timestamp - begin) // 1000 if begin > 0 else 0
        if not 0 <= time_diff <= _INT_MAX:
            time_diff = 0 if time_diff < 0 else _INT_MAX
        done = _index_put_keys(self.mm, self.hash_slot_num, self.index_num, count, seed,
                               uniq_key, keys, phy_offset, time_diff)
        if done is None:
            return False
        new_count, new_slots = done
        if new_count == count:
            return True  # no key to index
        if first:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        self.index_count = new_count
        self.hash_slot_count += new_slots
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True  # the header: at flush, as in put_key_hash

    def put_keys_run(self, seed: int, run: list, count: int, last_indexed: int,
                     keys_into: Callable) -> tuple[int, int]:
        """Index the keys of the messages of ``run[:count]`` (a run of one topic, in log order:
        storage/dispatch_runs.py) in one call, as :meth:`put_keys` would message by message,
        until one does not fit the claimed entries. Returns how many messages it took and the
        run index of the last that had keys at all (-1 for none); the caller indexes the rest
        one by one (a new file, a claim to make)."""
        index_count = self.index_count
        # Claimed ahead for what most runs need (a UNIQ_KEY and a key or two a message).
        want = min(self.index_num, index_count + 4 * count)
        end = self._entries_base + want * INDEX_ENTRY_SIZE
        if end > self.mapped_file.allocated_position:
            self.mapped_file.ensure_allocated(end)
        limit = min(self.index_num, (self.mapped_file.allocated_position - self._entries_base)
                    // INDEX_ENTRY_SIZE)
        done, new_count, new_slots, first, last, touched = keys_into(
            self.mm, self.hash_slot_num, self.index_num, index_count, limit, seed,
            self.begin_timestamp, last_indexed, run, count)
        if new_count != index_count:
            if index_count <= 1:
                self.begin_phy_offset, self.begin_timestamp = run[first][0], run[first][2]
            self.index_count = new_count
            self.hash_slot_count += new_slots
            self.end_phy_offset, self.end_timestamp = run[last][0], run[last][2]
        return done, touched  # the header: at flush, as in put_key_hash

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether [begin, end] overlaps the times this file covers."""
        return (
            (begin < self.begin_timestamp and end > self.end_timestamp)
            or self.begin_timestamp <= begin <= self.end_timestamp
            or self.begin_timestamp <= end <= self.end_timestamp
        )

    def select_phy_offset(self, key: str, max_num: int, begin: int, end: int,
                          max_steps: int = MAX_QUERY_CHAIN_STEPS) -> list[int]:
        """CommitLog offsets indexed under ``key`` with store time in [begin, end], newest first,
        from at most ``max_steps`` entries of its chain.

        Hash collisions are possible: callers check the record's real keys.
        """
        return self.walk_chain(key, max_num, begin, end, max_steps)[0]

    def walk_chain(self, key: str, max_num: int, begin: int, end: int,
                   max_steps: int) -> tuple[list[int], int]:
        """:meth:`select_phy_offset`, and how many entries it read."""
        found: list[int] = []
        steps = 0
        if not self.mapped_file.hold():
            return found, steps
        try:
            key_hash = index_key_hash(key)
            slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
            (slot_value,) = HASH_SLOT.unpack_from(self.mm, slot_pos)
            if slot_value <= 0 or slot_value >= self.index_count or self.index_count <= 1:
                return found, steps
            next_index = slot_value
            while len(found) < max_num and steps < max_steps:
                steps += 1
                entry_pos = self._entries_base + next_index * INDEX_ENTRY_SIZE
                entry_hash, phy, time_diff, prev = INDEX_ENTRY.unpack_from(self.mm, entry_pos)
                if time_diff < 0:
                    break
                stored = self.begin_timestamp + time_diff * 1000
                if entry_hash == key_hash and begin <= stored <= end:
                    found.append(phy)
                if stored < begin:
                    break  # the chain runs newest to oldest
                if prev <= 0 or prev >= self.index_count or prev == next_index:
                    break
                next_index = prev
            return found, steps
        finally:
            self.mapped_file.release()

    def flush(self) -> None:
        if self.mapped_file.hold():
            try:
                self._write_header()
                sync_mapped(self.mapped_file.mm, self.mapped_file._fd)
            finally:
                self.mapped_file.release()

    def close(self) -> None:
        self.mapped_file.close()

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        return self.mapped_file.destroy(interval_forcibly_ms)


def _map_index(path: str, size: int) -> MappedFile:
    # An index file's name is a time stamp, not an offset; MappedFile only needs digits.
    mapped_file = MappedFile(path, size)
    mapped_file.set_positions(size)
    mapped_file.advise_random()  # hash slots and entries are written and read at random
    return mapped_file


class IndexService:
    """The store's index files: builds entries on dispatch and answers key queries."""

    def __init__(
        self, store_path: str, hash_slot_num: int, index_num: int, max_msgs_num_batch: int = 64
    ) -> None:
        self.store_path = store_path
        self.page_warmer = None  # see use_page_warmer
        # The end time of the newest entries known to be on disk (checkpoint indexMsgTimestamp).
        self.flushed_timestamp = 0
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.max_msgs_num_batch = max_msgs_num_batch
        self.index_files: list[IndexFile] = []
        self._lock = threading.Lock()
        self.last_indexed_offset = -1  # CommitLog offset of the newest message indexed
        # Where the oldest file dropped at load began (its keys must be indexed again), or None.
        self.dropped_from: int | None = None

    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> None:
        """Map existing files; after a crash, drop files with entries newer than the checkpoint."""
        if not os.path.isdir(self.store_path):
            return
        files = []
        self.dropped_from = None
        for name in sorted(os.listdir(self.store_path)):
            path = os.path.join(self.store_path, name)
            if not name.isdigit():
                continue
            size = os.path.getsize(path)
            if size == 0:  # emptied by a deletion another process refused (MappedFile.destroy)
                OWED.remove_or_owe(path)
                continue
            if size != index_file_size(self.hash_slot_num, self.index_num):
                log.warning("index file %s has another layout's size; ignoring it", path)
                continue
            index_file = IndexFile(path, self.hash_slot_num, self.index_num)
            if not last_exit_ok and index_file.end_timestamp > index_msg_timestamp:
                log.info("dropping index file %s: newer than the checkpoint", name)
                if self.dropped_from is None:  # (the oldest dropped: where its keys begin)
                    self.dropped_from = index_file.begin_phy_offset
                index_file.destroy(0)
                continue
            files.append(index_file)
        self.index_files = files
        self.flushed_timestamp = files[-1].end_timestamp if files else 0
        self.last_indexed_offset = max(
            (f.end_phy_offset for f in files if f.index_count > 1), default=-1
        )

    def end_phy_offset(self) -> int:
        """Offset past which messages still need indexing (for recovery)."""
        files = self.index_files
        return files[-1].end_phy_offset if files else 0

    def reindex_from(self) -> int | None:
        """Where dispatch must start after a crash for the index to hold every key: past the
        last file kept, or where the files dropped as newer than the checkpoint began (None:
        no file at all, nothing was indexed)."""
        if self.index_files:
            return self.index_files[-1].end_phy_offset
        return self.dropped_from

    def use_page_warmer(self, warmer) -> None:
        """Have ``warmer`` (page_warmer.py, or None) populate the hash slots of the file being
        written and of each new one: keys land on random slots, so until every slot page is
        in, nearly every key takes a page fault on dispatch (94 % of a broker's faults)."""
        self.page_warmer = warmer
        if self.index_files:
            self._warm_slots(self.index_files[-1])

    def _warm_slots(self, index_file: IndexFile) -> None:
        if self.page_warmer is not None:
            self.page_warmer.warm_once(index_file.mapped_file, 0, index_file._entries_base)

    def _last_file_for_write(self) -> IndexFile:
        files = self.index_files
        if files and not files[-1].is_write_full():
            return files[-1]
        with self._lock:
            files = self.index_files
            if files and not files[-1].is_write_full():
                return files[-1]
            previous = files[-1] if files else None
            os.makedirs(self.store_path, exist_ok=True)
            path = _fresh_index_path(self.store_path)
            index_file = IndexFile(path, self.hash_slot_num, self.index_num)
            self._warm_slots(index_file)
            if previous is not None:
                index_file.begin_phy_offset = index_file.end_phy_offset = previous.end_phy_offset
                index_file.begin_timestamp = index_file.end_timestamp = previous.end_timestamp
                try:
                    index_file._write_header()
                    previous.flush()
                except BaseException:
                    index_file.destroy(0)  # not kept: the retry makes a fresh one
                    raise
                # The checkpoint takes this at its next round (within a second): a crash after a
                # roll then keeps the full file, whose entries are all on disk.
                self.flushed_timestamp = previous.end_timestamp
            self.index_files = [*files, index_file]
            return index_file

    def build_index(
        self, topic: str, keys: str | None, uniq_key: str | None, phy_offset: int, store_ts: int
    ) -> None:
        """Index one message's UNIQ_KEY and KEYS (callers skip rollback records)."""
        if phy_offset <= self.last_indexed_offset:
            return  # dispatched again after recovery: already indexed
        files = self.index_files
        index_file = files[-1] if files and files[-1].index_count < files[-1].index_num \
            else self._last_file_for_write()
        seed = topic_seed(topic)
        if index_file.put_keys(seed, uniq_key, keys, phy_offset, store_ts):
            self.last_indexed_offset = phy_offset
            return
        if uniq_key:
            index_file = self._put(index_file, index_key_hash(uniq_key, seed), phy_offset, store_ts)
        if keys:
            for key in keys.split(" "):
                if key:
                    index_file = self._put(index_file, index_key_hash(key, seed), phy_offset,
                                           store_ts)
        # Only once every key is in: a failure (disk full) before here is retried by dispatch.
        # A key indexed twice that way finds the same offset twice; queries drop repeats.
        self.last_indexed_offset = phy_offset

    def build_index_run(self, topic: str, run: list, count: int, keys_into: Callable) -> int:
        """Index the messages of ``run[:count]`` (plain records of ``topic``, in log order) in
        one call where they fit the last file; how many it took: the caller indexes the rest
        with :meth:`build_index`."""
        files = self.index_files
        if not files or files[-1].index_count >= files[-1].index_num:
            return 0  # a new file is build_index's to make, for a message that has keys
        done, touched = files[-1].put_keys_run(topic_seed(topic), run, count,
                                               self.last_indexed_offset, keys_into)
        if touched >= 0:  # only once every key of it is in, as in build_index
            self.last_indexed_offset = run[touched][0]
        return done

    def _put(self, index_file: IndexFile, key_hash: int, phy_offset: int, store_ts: int) -> IndexFile:
        while not index_file.put_key_hash(key_hash, phy_offset, store_ts):
            index_file = self._last_file_for_write()
        return index_file

    def query_offset(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> tuple[list[int], int, int]:
        """Offsets for ``topic#key`` stored in [begin, end]; newest files first.

        Returns the offsets, and the newest file's end time and end offset (what QUERY_MESSAGE
        reports as indexLastUpdateTimestamp / indexLastUpdatePhyoffset).
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        offsets: list[int] = []
        files = self.index_files
        last_ts = files[-1].end_timestamp if files else 0
        last_phy = files[-1].end_phy_offset if files else 0
        full_key = build_key(topic, key)
        steps_left = MAX_QUERY_CHAIN_STEPS  # (for the whole query, however many files)
        for index_file in reversed(files):
            if len(offsets) >= max_num:
                break
            if steps_left <= 0:
                log.debug("query of %s stopped after %d index entries", full_key,
                          MAX_QUERY_CHAIN_STEPS)
                break
            if index_file.is_time_matched(begin, end):
                found, steps = index_file.walk_chain(full_key, max_num - len(offsets), begin, end,
                                                     steps_left)
                offsets.extend(found)
                steps_left -= steps
            if index_file.begin_timestamp < begin:
                break
        return offsets, last_ts, last_phy

    def flush(self) -> int:
        """Flush every file; returns the end time of the newest (checkpoint indexMsgTimestamp)."""
        files = self.index_files
        for index_file in files:
            index_file.flush()
        if files:
            self.flushed_timestamp = files[-1].end_timestamp
        return self.flushed_timestamp

    def delete_expired_file(self, phy_min_offset: int) -> int:
        """Delete files (never the newest) whose entries all point below the CommitLog minimum."""
        files = self.index_files
        gone = [f for f in files[:-1] if f.end_phy_offset < phy_min_offset]
        kept = [f for f in files if f not in gone]
        self.index_files = kept
        OWED.settle()
        for index_file in gone:  # a query may hold one: deleted once it lets go
            OWED.leave(index_file.mapped_file, index_file.destroy(3000))
        return len(gone)

    def truncate_after(self, phy_offset: int) -> None:
        """Forget files whose first entry is at or past a cut CommitLog tail."""
        files = self.index_files
        kept, gone = [], []
        for index_file in files:
            if index_file.index_count > 1 and index_file.begin_phy_offset >= phy_offset:
                gone.append(index_file)
            else:
                kept.append(index_file)
        self.index_files = kept
        OWED.settle()
        for index_file in gone:
            OWED.leave(index_file.mapped_file, index_file.destroy(0))
        self.last_indexed_offset = min(self.last_indexed_offset, phy_offset - 1)

    def shutdown(self) -> None:
        for index_file in self.index_files:
            try:
                index_file.flush()
            finally:
                index_file.close()

    def close(self) -> None:
        """Unmap every file without flushing it (a shutdown whose disk hangs)."""
        for index_file in self.index_files:
            index_file.close()

    def destroy(self) -> None:
        for index_file in self.index_files:
            OWED.leave(index_file.mapped_file, index_file.destroy(0))
        self.index_files = []
        self.last_indexed_offset = -1


def _fresh_index_path(directory: str) -> str:
    now = time.time()
    while True:
        stamp = datetime.fromtimestamp(now)
        name = stamp.strftime("%Y%m%d%H%M%S") + f"{stamp.microsecond // 1000:03d}"
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            return path
        now += 0.001
