"""Read-only inspection of any RocketMQ store directory: ours or a Java broker's.

Nothing here writes: files are mapped read-only, no lock or abort file is touched, so a broker
may keep running on the same directory. A record cut off at the very end of the newest file is
reported as "being written" when the broker is running (the abort file exists) and as a torn
tail otherwise.
"""

from __future__ import annotations

import base64
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from storage.checkpoint import CHECKPOINT
from storage.consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT
from storage.errors import CorruptRecordError, StoreError, TornTailError
from storage.index_file import INDEX_HEADER
from storage.record import BlankRecord, MessageRecord, decode_record


@dataclass(slots=True)
class QueueSummary:
    records: int = 0  # records in the CommitLog for this topic/queue
    cq_min: int | None = None
    cq_max: int | None = None
    cq_problems: int = 0


@dataclass
class Inspection:
    """Everything ``rocketdesk store inspect`` reports."""

    root: str
    commit_log_files: list[str] = field(default_factory=list)
    file_size: int = 0
    min_offset: int = 0
    max_offset: int = 0
    records: int = 0
    blank_records: int = 0
    first_store_timestamp: int | None = None
    last_store_timestamp: int | None = None
    queues: dict[tuple[str, int], QueueSummary] = field(default_factory=dict)
    index_files: list[dict] = field(default_factory=list)
    checkpoint: dict[str, int] | None = None
    running_or_crashed: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """A JSON-friendly view."""
        topics: dict[str, dict] = {}
        for (topic, queue_id), summary in sorted(self.queues.items()):
            topics.setdefault(topic, {})[str(queue_id)] = {
                "records": summary.records,
                "consumeQueueMinOffset": summary.cq_min,
                "consumeQueueMaxOffset": summary.cq_max,
                "consumeQueueProblems": summary.cq_problems,
            }
        return {
            "root": self.root,
            "commitLog": {
                "files": self.commit_log_files,
                "fileSize": self.file_size,
                "minOffset": self.min_offset,
                "maxOffset": self.max_offset,
                "records": self.records,
                "blankRecords": self.blank_records,
                "firstStoreTimestamp": self.first_store_timestamp,
                "lastStoreTimestamp": self.last_store_timestamp,
            },
            "topics": topics,
            "indexFiles": self.index_files,
            "checkpoint": self.checkpoint,
            "abortFilePresent": self.running_or_crashed,
            "problems": self.problems,
            "notes": self.notes,
        }


class _ReadOnlyFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.start = int(self.name)
        self.size = os.path.getsize(path)
        with open(path, "rb") as handle:
            self.data = mmap.mmap(handle.fileno(), self.size, access=mmap.ACCESS_READ) if self.size else b""

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            self.data.close()


def segment_files(directory: str) -> list[str]:
    """A log's or a queue's segment files, in offset order (empty ones left out)."""
    if not os.path.isdir(directory):
        return []
    names = sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
    # (an empty one was emptied by a deletion another process refused: no part of the store)
    return [path for n in names if has_data(path := os.path.join(directory, n))]


def has_data(path: str) -> bool:
    """Whether a store file holds anything: an empty one was emptied by a deletion another
    process refused (Windows; storage/mapped_file.py) and is no part of the store."""
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:  # deleted since it was listed
        return False


def commit_log_dir(root: str) -> str:
    return os.path.join(root, "commitlog")


def _looks_like_a_store(root: str) -> bool:
    """A store with no CommitLog file yet: its queues' folder, or the checkpoint a started
    broker writes before its first message."""
    return (os.path.isdir(os.path.join(root, "consumequeue"))
            or os.path.isfile(os.path.join(root, "checkpoint")))


def iter_store_records(
    root: str, *, check_crc: bool = True, problems: list[str] | None = None,
    notes: list[str] | None = None, from_offset: int = 0,
) -> Iterator[MessageRecord | BlankRecord]:
    """Every record of the CommitLog under ``root``, oldest first; stops at the end of valid data."""
    if not os.path.isdir(root):
        raise StoreError(f"{root} is not a directory")
    paths = segment_files(commit_log_dir(root))
    if not paths and not _looks_like_a_store(root):
        # (a dump of a wrong folder printed nothing and succeeded, as an empty store would)
        raise StoreError(f"{root} holds no RocketMQ store (no commitlog/ or consumequeue/ folder)")
    running = os.path.exists(os.path.join(root, "abort"))
    for number, path in enumerate(paths):
        segment = _ReadOnlyFile(path)
        try:
            if segment.start + segment.size <= from_offset:
                continue
            pos = max(0, from_offset - segment.start)
            last_file = number == len(paths) - 1
            while pos < segment.size:
                try:
                    record = decode_record(segment.data, pos, check_crc=check_crc,
                                           base_offset=segment.start)
                except TornTailError as exc:
                    if last_file and running:
                        (notes if notes is not None else []).append(
                            f"a record at offset {exc.offset} is still being written")
                    else:
                        (problems if problems is not None else []).append(f"torn tail: {exc}")
                    return
                except CorruptRecordError as exc:
                    (problems if problems is not None else []).append(f"corrupt record: {exc}")
                    return
                if isinstance(record, BlankRecord):
                    yield record
                    break
                if not isinstance(record, MessageRecord):
                    if not last_file:
                        (problems if problems is not None else []).append(
                            f"{segment.name} ends at position {pos} without a blank record, "
                            "but newer files exist")
                    return
                yield record
                pos += record.total_size
        finally:
            segment.close()


def inspect_store(root: str, *, check_crc: bool = True) -> Inspection:
    """Summarise a store: positions, records per topic and queue, ConsumeQueue checks, problems."""
    root = os.path.abspath(root)
    result = Inspection(root)
    paths = segment_files(commit_log_dir(root))
    if not os.path.isdir(root):
        raise StoreError(f"{root} is not a directory")
    if not paths and not _looks_like_a_store(root):
        raise StoreError(f"{root} holds no RocketMQ store (no commitlog/ or consumequeue/ folder)")
    result.commit_log_files = [os.path.basename(p) for p in paths]
    sizes = {os.path.getsize(p) for p in paths}
    if len(sizes) > 1:
        result.problems.append(f"CommitLog files differ in size: {sorted(sizes)}")
    result.file_size = max(sizes) if sizes else 0
    result.min_offset = int(os.path.basename(paths[0])) if paths else 0
    result.running_or_crashed = os.path.exists(os.path.join(root, "abort"))
    if result.running_or_crashed:
        result.notes.append("the abort file is present: a broker is running here, or crashed")
    starts: dict[int, tuple[int, str, int, int]] = {}
    end = result.min_offset
    for record in iter_store_records(root, check_crc=check_crc, problems=result.problems,
                                     notes=result.notes):
        if isinstance(record, BlankRecord):
            result.blank_records += 1
            end = record.offset + record.size
            continue
        result.records += 1
        key = (record.topic, record.queue_id)
        result.queues.setdefault(key, QueueSummary()).records += 1
        starts[record.commit_log_offset] = (record.total_size, record.topic, record.queue_id,
                                           record.queue_offset)
        if result.first_store_timestamp is None:
            result.first_store_timestamp = record.store_timestamp
        result.last_store_timestamp = record.store_timestamp
        end = record.commit_log_offset + record.total_size
    result.max_offset = end
    _inspect_consume_queues(root, result, starts)
    _inspect_index(root, result)
    _inspect_checkpoint(root, result)
    return result


def _inspect_consume_queues(root: str, result: Inspection, starts: dict) -> None:
    cq_root = os.path.join(root, "consumequeue")
    if not os.path.isdir(cq_root):
        return
    for topic in sorted(os.listdir(cq_root)):
        topic_dir = os.path.join(cq_root, topic)
        if not os.path.isdir(topic_dir):
            continue
        for queue_name in sorted(os.listdir(topic_dir)):
            if not queue_name.isdigit():
                continue
            summary = result.queues.setdefault((topic, int(queue_name)), QueueSummary())
            _check_queue(os.path.join(topic_dir, queue_name), topic, int(queue_name), summary,
                         result, starts)


def _check_queue(directory: str, topic: str, queue_id: int, summary: QueueSummary,
                 result: Inspection, starts: dict) -> None:
    reported = 0
    for path in segment_files(directory):
        segment = _ReadOnlyFile(path)
        try:
            for pos in range(0, segment.size - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                offset, size, _ = CQ_UNIT.unpack_from(segment.data, pos)
                if offset < 0 or size <= 0:
                    break  # end of this queue's units
                logical = (segment.start + pos) // CQ_STORE_UNIT_SIZE
                if size == 0x7FFFFFFF:
                    continue  # filler before the first real unit
                if offset < result.min_offset:
                    continue  # its CommitLog file was deleted: the unit is expired, not wrong
                if summary.cq_min is None:
                    summary.cq_min = logical
                summary.cq_max = logical + 1
                expected = starts.get(offset)
                mismatch = expected is None or expected[0] != size or expected[1:3] != (topic, queue_id)
                # A broker may have indexed a record this scan stopped short of: not a problem.
                if mismatch and (offset + size <= result.max_offset or not result.running_or_crashed):
                    summary.cq_problems += 1
                    if reported < 3:
                        result.problems.append(
                            f"ConsumeQueue {topic}/{queue_id} unit {logical} points at "
                            f"offset {offset} size {size}, where no such record is")
                        reported += 1
        finally:
            segment.close()


def _inspect_index(root: str, result: Inspection) -> None:
    index_dir = os.path.join(root, "index")
    if not os.path.isdir(index_dir):
        return
    for name in sorted(os.listdir(index_dir)):
        path = os.path.join(index_dir, name)
        if not name.isdigit() or os.path.getsize(path) < 40:
            continue
        with open(path, "rb") as handle:
            begin_ts, end_ts, begin_phy, end_phy, slots, count = INDEX_HEADER.unpack(handle.read(40))
        result.index_files.append({
            "file": name, "entries": max(count - 1, 0), "hashSlotsUsed": slots,
            "beginTimestamp": begin_ts, "endTimestamp": end_ts,
            "beginPhyOffset": begin_phy, "endPhyOffset": end_phy,
        })


def _inspect_checkpoint(root: str, result: Inspection) -> None:
    path = os.path.join(root, "checkpoint")
    if not os.path.exists(path) or os.path.getsize(path) < CHECKPOINT.size:
        return
    with open(path, "rb") as handle:
        values = CHECKPOINT.unpack(handle.read(CHECKPOINT.size))
    result.checkpoint = dict(zip(
        ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp",
         "masterFlushedOffset", "confirmPhyOffset"), values, strict=True))


def record_to_json(record: MessageRecord) -> dict:
    """One record as ``store dump`` prints it."""
    born_ip, born_port = record.born_host
    store_ip, store_port = record.store_host
    try:
        body_text = record.body.decode("utf-8")
    except UnicodeDecodeError:
        body_text = None
    return {
        "topic": record.topic,
        "queueId": record.queue_id,
        "queueOffset": record.queue_offset,
        "commitLogOffset": record.commit_log_offset,
        "storeSize": record.total_size,
        "msgId": record.msg_id,
        "uniqKey": record.uniq_key,
        "keys": record.keys,
        "tags": record.tags,
        "properties": record.properties,
        "flag": record.flag,
        "sysFlag": record.sys_flag,
        "bodyCRC": record.body_crc,
        "reconsumeTimes": record.reconsume_times,
        "preparedTransactionOffset": record.prepared_transaction_offset,
        "bornTimestamp": record.born_timestamp,
        "storeTimestamp": record.store_timestamp,
        "bornHost": f"{born_ip}:{born_port}",
        "storeHost": f"{store_ip}:{store_port}",
        "body": base64.b64encode(record.body).decode("ascii"),
        "bodyText": body_text,
    }


def format_timestamp(ms: int | None) -> str:
    """Local time with its UTC offset, so a reader knows which zone it is. A time no date
    holds (a born time is whatever its producer sent, any int64) is shown as its number."""
    if not ms or ms <= 0:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).astimezone().isoformat(
            timespec="milliseconds")
    except (ValueError, OverflowError, OSError):  # past year 9999, here or in the local zone
        return f"{ms} ms"


