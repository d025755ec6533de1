"""A SYNC_FLUSH writer for the crash test: prints one line per acknowledged put, forever.

Run as ``_crash_writer.py STORE_DIR PROJECT_ROOT``; the test imports ``body_of`` from here.
"""

from __future__ import annotations

import sys
import time


def body_of(number: int) -> bytes:
    return (f"message-{number}-".encode() * 40)[: 100 + number % 400]


def main(store_dir: str) -> None:
    from storage.config import FlushDiskType, MessageStoreConfig
    from storage.errors import PutMessageStatus
    from storage.message import MessageExtBrokerInner
    from storage.message_store import DefaultMessageStore

    config = MessageStoreConfig(
        store_path_root_dir=store_dir,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=1000,
        max_index_num=4000,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        delete_when="99",
    )
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    number = 0
    while True:
        msg = MessageExtBrokerInner(
            topic="CrashTopic", body=body_of(number), queue_id=number % 3,
            properties={"KEYS": f"key-{number}", "TAGS": "t"},
            born_timestamp=int(time.time() * 1000),
        )
        result = store.put_message(msg)
        if result.status is PutMessageStatus.PUT_OK:
            append = result.append
            print(f"ACK {number} {append.wrote_offset} {append.logics_offset}", flush=True)
        number += 1


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[2])
    main(sys.argv[1])
