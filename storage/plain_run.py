"""The one-step put of a run of plain sends, in Python: the reference of
``CommitLog.append_plain_run`` (its compiled twin is common/_append.c's, held to this one by
tests/unit/storage/test_put_plain_run.py), and of the single ``append_plain``, a run of one.

A run's messages are checked and measured before the put lock; under it, those that fit the
last file as claimed are encoded into one buffer and written with one write, then accounted
for (queue offsets, the entries dispatch reads, the wrote position last). All or none: what
fails once the records are being made is undone and the run refused.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from storage.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
from storage.record import END_FILE_MIN_BLANK_LENGTH, encode_record_into

if TYPE_CHECKING:
    from storage.commitlog import CommitLog
    from storage.mapped_file import MappedFile


def _int32(value: object) -> bool:
    return type(value) is int and -(1 << 31) <= value < (1 << 31)


def plain_arguments(put: object, store_host: bytes) -> bool:
    """Whether ``put`` is ``append_plain``'s arguments as the one-step put expects them (the
    compiled one reads exactly these kinds; anything else goes to the general put)."""
    if type(put) is not tuple or len(put) != 10:
        return False
    topic, topic_bytes, queue_id, flag, body, properties, sys_flag, born_ts, born_host, \
        reconsume_times = put
    return (type(topic) is str and type(topic_bytes) is bytes and len(topic_bytes) <= 127
            and _int32(queue_id) and _int32(flag) and _int32(sys_flag)
            and _int32(reconsume_times) and type(born_ts) is int
            and -(1 << 63) <= born_ts < (1 << 63) and type(body) is bytes
            and type(properties) is str and type(born_host) is bytes
            and len(born_host) in (8, 20) and type(store_host) is bytes
            and len(store_host) in (8, 20))



def append_plain_run(
    commit_log: CommitLog, puts: list[tuple], clock,
) -> tuple[list[tuple[int, int, int, str, float]], Exception | None]:
    """``CommitLog.append_plain_run`` in Python (the reference its compiled twin,
    common/_append.c, is held to), with ``clock`` as its ``time``."""
    host = commit_log.store_host_bytes
    host_flag = STOREHOSTADDRESS_V6_FLAG if commit_log.store_host_v6 else 0
    prepared = []
    for put in list(puts):
        if not plain_arguments(put, host):
            break  # (the general put words what is wrong with it)
        (topic, topic_bytes, queue_id, flag, body, properties, sys_flag, born_timestamp,
         born_host, reconsume_times) = put
        try:
            props_bytes = properties.encode()
        except UnicodeEncodeError:
            break
        if len(props_bytes) > 32767 or len(body) > 0x7FFFFFFF:
            break
        if len(born_host) == 20:
            sys_flag |= BORNHOST_V6_FLAG
        total = (72 + len(born_host) + len(host) + len(body) + 1 + len(topic_bytes) + 2
                 + len(props_bytes))
        prepared.append((total, zlib.crc32(body) & 0x7FFFFFFF, topic, topic_bytes,
                         queue_id, flag, body, properties, props_bytes,
                         sys_flag | host_flag, born_timestamp, born_host, reconsume_times))
    if not prepared:
        return [], None
    with commit_log.put_lock:
        try:
            fitting = _run_fits(commit_log, prepared)
            if fitting is None:
                return [], None
            mapped_file, start, total, fit = fitting
            begin = clock.monotonic()
        except Exception as exc:  # (nothing made yet: the error as it is)
            return [], exc
        commit_log.begin_time_in_lock = begin
        try:
            try:
                store_ts = int(clock.time() * 1000)
                base = mapped_file.file_from_offset
            except Exception as exc:  # (nothing made yet: the error as it is)
                return [], exc
            written = _write_run_locked(commit_log, mapped_file, start, total, prepared[:fit],
                                             store_ts, base)
            if not isinstance(written, list):
                return [], written
        finally:
            # Whatever happened, the lock is no longer held (else OS_PAGECACHE_BUSY on
            # every put after a second).
            commit_log.begin_time_in_lock = 0.0
        elapsed = (clock.monotonic() - begin) * 1000
    commit_log._notify_append()
    prefix = commit_log._msg_id_prefix
    return [(entry[0], entry[1], entry[3], f"{prefix}{entry[0]:016X}", elapsed)
            for entry in written], None

def _run_fits(commit_log: CommitLog,
              prepared: list[tuple]) -> tuple[MappedFile, int, int, int] | None:
    """The file a run goes to, where, how many bytes and how many of its records fit it as
    claimed; None when not one does (a new file, blocks to claim: the general put)."""
    files = commit_log.mapped_file_queue.mapped_files
    if not files:
        return None
    mapped_file = files[-1]
    start = mapped_file.wrote_position
    total = 0
    fit = 0
    for record in prepared:
        end = start + total + record[0]
        if (end + END_FILE_MIN_BLANK_LENGTH > mapped_file.file_size
                or end > mapped_file.allocated_position):
            break
        total += record[0]
        fit += 1
    return None if not fit else (mapped_file, start, total, fit)

def _write_run_locked(commit_log: CommitLog, mapped_file: MappedFile, start: int, total: int,
                      records: list[tuple], store_ts: int,
                      base: int) -> list[tuple] | Exception:
    """A run's records encoded into one buffer, written at ``start`` in one write and
    accounted for (the wrote position last), under the put lock: the entries given to
    dispatch, or the refusal of a run none of which is kept (whatever failed is undone,
    the bytes zeroed)."""
    host = commit_log.store_host_bytes
    table = commit_log.topic_queue_table
    pending: dict[tuple[str, int], int] = {}
    before: dict[tuple[str, int], int | None] = {}
    entries: list[tuple] = []
    old_store_ts = mapped_file.store_timestamp
    try:
        staging = commit_log._staging(total)
        at = 0
        for (size, crc, topic, topic_bytes, queue_id, flag, body, properties, props_bytes,
             sys_flag, born_timestamp, born_host, reconsume_times) in records:
            key = (topic, queue_id)
            queue_offset = pending.get(key)
            if queue_offset is None:
                queue_offset = before[key] = table.get(key)
                if queue_offset is None:
                    queue_offset = 0
            pending[key] = queue_offset + 1
            encode_record_into(
                staging, at, crc, queue_id, flag, queue_offset, base + start + at, sys_flag,
                born_timestamp, born_host, store_ts, host, reconsume_times, 0, body,
                topic_bytes, props_bytes)
            entries.append((base + start + at, size, store_ts, queue_offset, topic,
                            queue_id, sys_flag, 0, properties))
            at += size
        warmer = commit_log.page_warmer
        if warmer is not None:
            mapped_file.claim_early(start + total)
            warmer.after_claim(mapped_file, start + total)
        mapped_file.write_at(start, staging, total)
        # In the file: accounted for, the wrote position last (visible from then).
        commit_log.appended.extend(entries)
        table.update(pending)
        mapped_file.store_timestamp = store_ts
        mapped_file.wrote_position = start + total
        return entries
    except BaseException as exc:
        for key, old in before.items():  # (each queue's next offset as it was)
            if old is None:
                table.pop(key, None)
            else:
                table[key] = old
        # Dispatch's entries from the run's first offset on (only the put lock's holder
        # appends; nothing reads past the wrote position, which has not moved).
        appended = commit_log.appended
        while appended and appended[-1][0] >= base + start:
            appended.pop()
        try:  # (the write's error is the one to report, whatever fails here)
            mapped_file.store_timestamp = old_store_ts
        except Exception:
            pass
        try:  # the blocks are claimed: zeroing is safe; if it fails, nothing reads there
            mapped_file.write_at(start, bytes(total), total)
        except Exception:
            pass
        if not isinstance(exc, Exception):
            raise
        refusal = commit_log._refusal(exc)
        refusal.__cause__ = exc
        return refusal

