"""Recovery: deciding, after a restart, where valid CommitLog data ends.

* Normal (the abort file is absent: the last shutdown was clean): check records from the
  third-last CommitLog file on; cut anything after the last good record; drop ConsumeQueue
  units that point past it.
* Abnormal (the abort file is present: the process died): search back for the last file whose
  first message is older than the checkpoint (everything before it was flushed with its derived
  views), check every record from there with its CRC, re-dispatch them (ConsumeQueue and index
  skip what they already hold), cut the torn or corrupt tail, drop units that point past it.
  Each ConsumeQueue's last unit is checked against its record too: after an OS crash it may be
  torn across a page or sector (its offset written, its tags code not), and dispatch would
  skip it as held.

A torn or corrupt tail is truncated and zeroed: it is never served and can never come back.
"""

from __future__ import annotations

import logging
import struct
import zlib
from dataclasses import dataclass

from common import speedups
from storage.dispatch import dispatch_request_of
from storage.errors import StoreError
from storage.mapped_file import MappedFile
from storage.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
from storage.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2

log = logging.getLogger(__name__)

_SIZE_MAGIC = struct.Struct(">iI")
# TOTALSIZE, MAGICCODE, BODYCRC, SYSFLAG, STORETIMESTAMP and BODYLEN of an all-IPv4 record.
_PREFIX_V4 = struct.Struct(">iIi24xi16xq20xi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class ScanResult:
    """How far a file's records are good, and why the scan stopped there."""

    valid_end: int  # position in the file after the last good record (or blank)
    reached_end: bool  # a blank record or the file's end: continue with the next file
    problem: str | None  # a torn or corrupt record at valid_end, None for clean zeros
    records: int
    last_store_timestamp: int


def scan_file(mapped_file: MappedFile, start: int = 0, check_crc: bool = True) -> ScanResult:
    """Validate records from ``start`` with no object per record (recovery of 1 GiB must be fast)."""
    # Only up to the first hole: nothing was written past it, and reading a hole through the
    # mapping would fault pages in (a SIGBUS when the disk is a full tmpfs).
    limit = mapped_file.data_end(start)
    # A memoryview lets zlib read bodies in place instead of copying each one out.
    with memoryview(mapped_file.mm) as data:
        return _scan(data, mapped_file.file_size, start, check_crc, limit)


_scan_records = getattr(speedups.store_core, "scan_records", None)


def _scan_compiled(data: memoryview, size: int, start: int, check_crc: bool, limit: int
                   ) -> ScanResult:
    assert _scan_records is not None  # (chosen only where the compiled core has it)
    return ScanResult(*_scan_records(data, size, start, check_crc, limit))


def _scan_pure(data: memoryview, size: int, start: int, check_crc: bool, limit: int
               ) -> ScanResult:
    """The records of ``data[start:min(size, limit)]`` checked one by one (common/_record_scan.c
    is the compiled twin, a restart's three files in a few tenths of a second, not seconds)."""
    pos = start
    count = 0
    last_ts = 0
    unpack_head = _SIZE_MAGIC.unpack_from
    unpack_v4 = _PREFIX_V4.unpack_from
    crc32 = zlib.crc32
    end = min(size, limit)
    prefix_limit = end - 88
    while True:
        if pos <= prefix_limit:
            # One call reads everything the checks need (for IPv4 hosts, the common case).
            total, magic, crc, sys_flag, store_ts, body_len = unpack_v4(data, pos)
        elif pos + 8 > end:
            if end == size:
                return ScanResult(pos, True, None, count, last_ts)
            # A hole follows: clean zeros, unless a record header was cut off by it.
            problem = "record header cut off" if any(data[pos:end]) else None
            return ScanResult(pos, False, problem, count, last_ts)
        else:
            total, magic = unpack_head(data, pos)
            crc = sys_flag = store_ts = body_len = 0
        if magic == BLANK_MAGIC_CODE:
            if total != size - pos:
                problem = f"blank record of size {total} does not end the file"
                return ScanResult(pos, False, problem, count, last_ts)
            return ScanResult(pos, True, None, count, last_ts)
        if total == 0 and magic == 0:
            return ScanResult(pos, False, None, count, last_ts)
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            return ScanResult(pos, False, f"bad magic 0x{magic:08X}", count, last_ts)
        if total < 91 or pos + total > end:
            return ScanResult(pos, False, f"record size {total} does not fit", count, last_ts)
        if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
            (store_ts,) = _I64.unpack_from(data, pos + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8))
            p = pos + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
            p += (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8) + 12
            if p + 4 > pos + total:  # (a flipped flag bit in a short last record: cut there)
                return ScanResult(pos, False, "field lengths do not match TOTALSIZE", count,
                                  last_ts)
            (body_len,) = _I32.unpack_from(data, p)
            body_start = p + 4
        else:
            body_start = pos + 88
        p = body_start + body_len
        if body_len < 0 or p + 3 > pos + total:
            return ScanResult(pos, False, "field lengths do not match TOTALSIZE", count, last_ts)
        if magic == MESSAGE_MAGIC_CODE:
            p += 1 + data[p]
        else:
            (topic_len,) = _U16.unpack_from(data, p)
            p += 2 + topic_len
        if p + 2 > pos + total:
            return ScanResult(pos, False, "field lengths do not match TOTALSIZE", count, last_ts)
        (props_len,) = _I16.unpack_from(data, p)
        p += 2 + props_len
        if props_len < 0 or p != pos + total:
            return ScanResult(pos, False, "field lengths do not match TOTALSIZE", count, last_ts)
        if check_crc and crc32(data[body_start : body_start + body_len]) & 0x7FFFFFFF != crc:
            return ScanResult(pos, False, "body CRC mismatch", count, last_ts)
        pos += total
        count += 1
        last_ts = store_ts


_scan = _scan_pure if _scan_records is None else _scan_compiled


def first_store_timestamp(mapped_file: MappedFile) -> int | None:
    """Store time of a file's first record, or None when it does not start with one."""
    head = mapped_file.read_raw(0, 80)
    if len(head) < 80:
        return None
    total, magic = _SIZE_MAGIC.unpack_from(head, 0)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or total < 91:
        return None
    (sys_flag,) = _I32.unpack_from(head, 36)
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    return _I64.unpack_from(head, 48 + born)[0]


def find_valid_end(
    files: list[MappedFile], first_index: int, check_crc: bool
) -> tuple[int, str | None]:
    """Physical offset after the last good record from ``files[first_index]`` on, and the problem found."""
    if not files:
        return 0, None
    index = first_index
    while True:
        mapped_file = files[index]
        result = scan_file(mapped_file, 0, check_crc)
        end = mapped_file.file_from_offset + result.valid_end
        if result.problem:
            log.warning("CommitLog %s: %s at position %d; truncating there",
                        mapped_file.file_name, result.problem, result.valid_end)
            return end, result.problem
        if not result.reached_end or index + 1 >= len(files):
            if result.reached_end:
                # A blank ended the last file: the log continues at the next file's start.
                return mapped_file.file_from_offset + mapped_file.file_size, None
            return end, None
        index += 1


def abnormal_start_index(files: list[MappedFile], min_timestamp: int) -> int:
    """The last file whose first message is older than the checkpoint (0 if none is)."""
    for index in range(len(files) - 1, -1, -1):
        first_ts = first_store_timestamp(files[index])
        if first_ts is not None and first_ts <= min_timestamp:
            log.info("abnormal recovery starts from CommitLog file %s", files[index].file_name)
            return index
    return 0


def _drop_torn_last_units(store, scan_start: int) -> int | None:
    """Drop each ConsumeQueue's last unit when it is not what dispatch would write for the
    record it names; the lowest CommitLog offset of those records (where dispatch must start
    to build them again), or None. Only a queue's last unit can be torn: the units after it
    were zeros, or the queue's own recovery would have kept them. And only one naming a record
    from ``scan_start`` (where the crash recovery began) on: the checkpoint says the units of
    earlier records were flushed (and an idle queue's last record may be long deleted)."""
    lowest: int | None = None
    levels = store.reput.delay_levels_ms
    for topic, queues in store.consume_queue_table.items():
        for queue_id, queue in queues.items():
            index = queue.get_max_offset_in_queue() - 1
            unit = queue.get_unit(index)
            if unit is None or unit.size == 0x7FFFFFFF or unit.commit_log_offset < scan_start:
                continue
            try:
                record = store.look_message_by_offset(unit.commit_log_offset)
                wanted = dispatch_request_of(record, levels)
                whole = (wanted.topic, wanted.queue_id, wanted.consume_queue_offset,
                         wanted.msg_size, wanted.tags_code) == (
                    topic, queue_id, index, unit.size, unit.tags_code)
            except (StoreError, ValueError, UnicodeDecodeError):
                whole = False
            if whole:
                continue
            log.warning("%s-%d: the last unit (%d) does not match its record; built again",
                        topic, queue_id, index)
            queue.drop_last_unit()
            lowest = unit.commit_log_offset if lowest is None else min(lowest, unit.commit_log_offset)
    return lowest


def recover_store(store) -> None:
    """Recover a loaded ``DefaultMessageStore``: CommitLog end, ConsumeQueues, index, dispatch."""
    for queues in store.consume_queue_table.values():
        for queue in queues.values():
            queue.recover()
    max_cq_phy = store._max_physic_offset_in_consume_queues()
    commit_log = store.commit_log
    queue = commit_log.mapped_file_queue
    files = queue.mapped_files
    if store.last_exit_ok:
        start_index = max(0, len(files) - 3)
    else:
        log.warning("the store was not shut down cleanly: recovering from the checkpoint")
        start_index = abnormal_start_index(files, store.checkpoint.min_timestamp())
    valid_end, problem = find_valid_end(files, start_index, store.config.check_crc_on_recover)
    store.recovered_problem = problem
    queue.flushed_where = queue.committed_where = valid_end
    queue.truncate_dirty_files(valid_end)
    for mapped_file in queue.mapped_files:
        if mapped_file.file_from_offset + mapped_file.file_size <= valid_end:
            mapped_file.set_positions(mapped_file.file_size)
    if max_cq_phy >= valid_end or not store.last_exit_ok:
        for queues in store.consume_queue_table.values():
            for consume_queue in queues.values():
                consume_queue.truncate_dirty_logic_files(valid_end)
        store.index_service.truncate_after(valid_end)
    minimum = max(commit_log.get_min_offset(), 0)
    for queues in store.consume_queue_table.values():
        for consume_queue in queues.values():
            consume_queue.correct_min_offset(minimum)
    # Dispatch resumes where the derived views end; after a crash, from where the recovery scan
    # started, so units and keys lost with the process are built again (both skip duplicates).
    torn_from = None
    if not store.last_exit_ok and files:
        torn_from = _drop_torn_last_units(store, files[start_index].file_from_offset)
    reput_from = max(store._max_physic_offset_in_consume_queues(), 0)
    if not store.last_exit_ok and files:
        reput_from = min(reput_from, files[start_index].file_from_offset)
    if torn_from is not None:
        reput_from = min(reput_from, torn_from)
    reindex_from = store.index_service.reindex_from()
    if store.config.message_index_enable and reindex_from is not None:
        reput_from = min(reput_from, reindex_from)
    reput_from = max(reput_from, minimum)
    store.reput.reput_from_offset = min(reput_from, valid_end)
    store.reput.already_dispatched = store.dispatchers.already_dispatched
    try:
        store.reput.do_reput()  # catch up now, so queue offsets are right before the first put
    finally:
        store.reput.already_dispatched = None
    store.rebuild_topic_queue_table()
