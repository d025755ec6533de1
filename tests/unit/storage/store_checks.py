"""What a store must hold after failed puts: exactly the acknowledged messages, everywhere.

Shared by the failure-injection and disk-error tests. ``Ledger`` records what each put
acknowledged; ``assert_store_holds`` checks the CommitLog walk, the bytes past its end, the
ConsumeQueues (what dispatch built) and the queue-offset table against it; ``crash_copy`` takes
the image a killed process would leave (page cache included, abort file present).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import defaultdict
from dataclasses import dataclass

from storage.message import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from storage.message_id import decode_message_id
from storage.message_store import DefaultMessageStore
from storage.record import BlankRecord, MessageRecord, decode_record, iter_records


@dataclass(frozen=True)
class Acked:
    """One acknowledged record: where the put said it landed, and what it holds."""

    offset: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    in_queue: bool  # prepared and rolled-back records are in the log but in no queue


class Ledger:
    """The acknowledged records, in the order the store acknowledged them."""

    def __init__(self) -> None:
        self.acked: list[Acked] = []

    def put(self, store, msg):
        """Put one message; record it when acknowledged (exceptions propagate)."""
        tran = msg.sys_flag & TRANSACTION_TYPE_MASK
        body = bytes(msg.body)
        append = store.put_message(msg).append
        self.acked.append(Acked(append.wrote_offset, append.topic, append.queue_id,
                                append.logics_offset, body,
                                tran not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)))
        return append

    def put_batch(self, store, batch, bodies: list[bytes]):
        append = store.put_messages(batch).append
        for index, (msg_id, body) in enumerate(zip(append.msg_ids, bodies, strict=True)):
            self.acked.append(Acked(decode_message_id(msg_id).offset, append.topic,
                                    append.queue_id, append.logics_offset + index, body, True))
        return append


def log_records(store) -> list[MessageRecord]:
    """Every record of the CommitLog, walked file by file with CRC checks; asserts that nothing
    but zeros follows the readable end (no torn or rolled-back bytes a crash could bring back)."""
    records = []
    files = store.commit_log.mapped_file_queue.mapped_files
    for index, mapped_file in enumerate(files):
        readable = mapped_file.read_position
        data = mapped_file.read_raw(0, mapped_file.file_size)
        pos = 0
        while pos < readable:
            record = decode_record(data[:readable], pos, base_offset=mapped_file.file_from_offset)
            if isinstance(record, BlankRecord):
                pos = mapped_file.file_size
                break
            assert isinstance(record, MessageRecord), f"zeros inside the readable log at {pos}"
            records.append(record)
            pos += record.total_size
        assert pos in (readable, mapped_file.file_size), (mapped_file.file_name, pos, readable)
        if index == len(files) - 1:
            # (A write buffer may hold anything past its write position: pool buffers are
            # reused unzeroed, as RocketMQ's are, and only [committed, wrote) is ever copied.)
            assert not any(data[readable:]), "bytes past the end of the CommitLog"
    return records


def commit_all(store) -> None:
    """Copy every write buffer to its file (the commit service's job; one file per call)."""
    queue = store.commit_log.mapped_file_queue
    while not queue.commit(0):
        pass


def assert_store_holds(store, ledger: Ledger, dispatched: bool = True) -> None:
    """The store holds exactly ``ledger``'s records: in its log, its queues and its offsets."""
    acked = ledger.acked
    assert [(r.commit_log_offset, r.body) for r in log_records(store)] == \
        [(a.offset, a.body) for a in acked]
    if not dispatched:
        return
    assert store.wait_dispatched(10)
    queues: dict[tuple[str, int], list[Acked]] = defaultdict(list)
    for entry in acked:
        if entry.in_queue:
            queues[(entry.topic, entry.queue_id)].append(entry)
    for (topic, queue_id), entries in queues.items():
        assert [e.queue_offset for e in entries] == list(range(len(entries))), (topic, queue_id)
        assert store.get_max_offset_in_queue(topic, queue_id) == len(entries)
        got = []
        offset = 0
        while offset < len(entries):
            result = store.get_message("check", topic, queue_id, offset, 32)
            batch = list(iter_records(result.body, check_crc=True))
            assert batch, f"{topic}-{queue_id}: nothing readable at {offset}"
            got.extend(batch)
            offset = result.next_begin_offset
        assert [(r.commit_log_offset, r.body, r.queue_offset) for r in got] == \
            [(e.offset, e.body, e.queue_offset) for e in entries]
    table = store.commit_log.topic_queue_table
    for key, entries in queues.items():
        assert table.get(key, 0) == len(entries), key
    for (topic, queue_id), next_offset in table.items():
        if next_offset:
            assert len(queues.get((topic, queue_id), [])) == next_offset, (topic, queue_id)


def crash_copy(store, destination) -> str:
    """The store directory as a process killed right now would leave it: what the page cache
    holds (written through the mappings), the abort file, no shutdown."""
    root = store.config.store_path_root_dir
    shutil.copytree(root, destination, ignore=shutil.ignore_patterns("lock"))
    with open(os.path.join(destination, "abort"), "w") as abort:
        abort.write("crashed")
    return str(destination)


def reopen(config, root=None) -> DefaultMessageStore:
    """A store on ``root`` (default: the config's) with the same settings, loaded, not started."""
    if root is not None:
        config = dataclasses.replace(config, store_path_root_dir=str(root))
    store = DefaultMessageStore(config)
    store.load()
    return store


def assert_recovers_exactly(store, ledger: Ledger, tmp_path) -> None:
    """After a crash right now and after a clean shutdown, a reopened store holds ``ledger``."""
    commit_all(store)  # a crash loses what a write buffer had not committed: not the point here
    crashed_root = crash_copy(store, tmp_path / f"crash-{len(ledger.acked)}-{os.urandom(3).hex()}")
    config = store.config
    store.shutdown()
    for root, clean in ((None, True), (crashed_root, False)):
        reopened = reopen(config, root)
        try:
            assert reopened.last_exit_ok is clean
            assert reopened.recovered_problem is None
            assert_store_holds(reopened, ledger)
        finally:
            reopened.shutdown()
