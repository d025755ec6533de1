"""Crash safety: a SYNC_FLUSH writer killed with SIGKILL loses no acknowledged message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from storage.config import FlushDiskType
from storage.inspector import inspect_store
from storage.message_store import DefaultMessageStore
from storage.record import iter_records
from storage.results import GetMessageStatus
from tests.conftest import ROOT, small_config

sys.path.insert(0, os.path.dirname(__file__))
from _crash_writer import body_of

pytestmark = pytest.mark.integration


def _run_writer_and_kill(root: str, acks_wanted: int) -> list[tuple[int, int, int]]:
    writer = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "_crash_writer.py"), root, ROOT],
        stdout=subprocess.PIPE, text=True,
    )
    acked = []
    try:
        for line in writer.stdout:
            _, number, offset, queue_offset = line.split()
            acked.append((int(number), int(offset), int(queue_offset)))
            if len(acked) >= acks_wanted:
                break
        writer.send_signal(signal.SIGKILL)  # mid-stream: puts are still going on
    finally:
        writer.kill()
        writer.wait(10)
        writer.stdout.close()
    return acked


def test_every_acknowledged_message_survives_sigkill(tmp_path):
    root = str(tmp_path / "store")
    acked = _run_writer_and_kill(root, 600)
    assert len(acked) == 600
    assert os.path.exists(os.path.join(root, "abort"))  # it did not shut down
    config = small_config(root, mapped_file_size_commit_log=64 * 1024,
                          mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=1000,
                          max_index_num=4000, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = DefaultMessageStore(config)
    assert store.load() is False  # the abnormal path ran
    store.start()
    try:
        for number, offset, queue_offset in acked:
            record = store.look_message_by_offset(offset)
            assert record.body == body_of(number)
            assert record.queue_offset == queue_offset
            assert record.keys == f"key-{number}"
        # Every queue serves its messages in order, each record whole and with a valid CRC.
        for queue_id in range(3):
            expected = [n for n, _, _ in acked if n % 3 == queue_id]
            got = []
            offset = 0
            while True:
                result = store.get_message("g", "CrashTopic", queue_id, offset, 32)
                if result.status is not GetMessageStatus.FOUND:
                    break
                records = list(iter_records(result.body, check_crc=True))
                assert len(records) == result.message_count
                got.extend(int(r.body.split(b"-")[1]) for r in records)
                offset = result.next_begin_offset
            assert got[: len(expected)] == expected
        # Index survived or was rebuilt: the last acknowledged key is found.
        last = acked[-1][0]
        assert len(store.query_message("CrashTopic", f"key-{last}", 4).messages) == 1
        # New puts continue the queues without gaps or duplicates.
        from tests.conftest import make_message

        before = store.get_max_offset_in_queue("CrashTopic", 0)
        put = store.put_message(make_message(topic="CrashTopic", queue_id=0))
        assert put.append.logics_offset == before
    finally:
        store.shutdown()
    assert inspect_store(root).problems == []
