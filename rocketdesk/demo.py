"""``rocketdesk demo``: write a small store the way a broker would, then inspect it.

Until the cluster exists this is what the README's run command shows a new user: a real
RocketMQ store directory (CommitLog, ConsumeQueues, index, checkpoint) that any RocketMQ tool
can read, and RocketDesk's inspector reading it.
"""

from __future__ import annotations

import json
import os
import shutil
import time

from cluster.supervisor.state import data_root
from storage.config import MessageStoreConfig
from storage.errors import StoreError
from storage.inspector import iter_store_records, record_to_json
from storage.message import (
    TRANSACTION_PREPARED_TYPE,
    MessageExtBatch,
    MessageExtBrokerInner,
    properties_to_string,
)
from storage.message_id import UniqIdGenerator
from storage.message_store import DefaultMessageStore
from storage.record import BatchEntry, MessageRecord, encode_batch_body

# In a folder the demo wrote: it writes there again (a new store, the old one removed); any
# other folder that holds something is the user's, never removed.
DEMO_MARKER = ".rocketdesk-demo-store"


def default_demo_dir() -> str:
    return str(data_root() / "demo-store")


def write_demo_store(root: str, orders: int = 200) -> DefaultMessageStore:
    """A store with orders, a batch, a delayed and a prepared transactional message, in
    ``root``: a new or empty folder, or one the demo wrote before (StoreError otherwise)."""
    if os.path.isdir(root) and os.listdir(root):
        # (the default folder is the demo's own: one written before the marker has none)
        own = os.path.abspath(root) == os.path.abspath(default_demo_dir())
        if not own and not os.path.exists(os.path.join(root, DEMO_MARKER)):
            raise StoreError(f"{root} holds files the demo did not write; give a new or an "
                             "empty folder (--dir)")
        shutil.rmtree(root)
    elif os.path.exists(root) and not os.path.isdir(root):
        raise StoreError(f"{root} is a file; give a new or an empty folder (--dir)")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, DEMO_MARKER), "w", encoding="utf-8") as marker:
        marker.write("written by `rocketdesk demo`, which replaces this folder when run again\n")
    config = MessageStoreConfig(store_path_root_dir=root,
                                mapped_file_size_commit_log=256 * 1024,
                                mapped_file_size_consume_queue=20 * 1000)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    ids = UniqIdGenerator()
    now = int(time.time() * 1000)
    for number in range(orders):
        body = json.dumps({"order": number, "amount": round(number * 1.25, 2)}).encode()
        tag = ("Created", "Paid", "Shipped")[number % 3]
        store.put_message(MessageExtBrokerInner(
            topic="OrderEvents", body=body, queue_id=number % 4,
            properties={"TAGS": tag, "KEYS": f"order-{number}", "UNIQ_KEY": ids.next_id()},
            born_timestamp=now, born_host=("127.0.0.1", 52000)))
    entries = [BatchEntry(0, f"reading {i}".encode(),
                          properties_to_string({"UNIQ_KEY": ids.next_id(), "KEYS": f"sensor-{i}"}))
               for i in range(10)]
    store.put_messages(MessageExtBatch(topic="SensorReadings", body=encode_batch_body(entries),
                                       born_timestamp=now))
    store.put_message(MessageExtBrokerInner(
        topic="Reminders", body=b"call back in 10 s",
        properties={"DELAY": "3", "UNIQ_KEY": ids.next_id()}, born_timestamp=now))
    store.put_message(MessageExtBrokerInner(
        topic="Payments", body=b"half message", sys_flag=TRANSACTION_PREPARED_TYPE,
        properties={"TRAN_MSG": "true", "PGROUP": "pay-group", "UNIQ_KEY": ids.next_id()},
        born_timestamp=now))
    store.wait_dispatched()
    store.shutdown()
    return store


def run_demo(directory: str | None) -> int:
    from rocketdesk.cli import main

    root = directory or default_demo_dir()
    print(f"Writing a demo RocketMQ store to {root} …\n")
    write_demo_store(root)
    status = main(["store", "inspect", root])
    print("\nThe first records, as `rocketdesk store dump` prints them:\n")
    shown = 0
    for record in iter_store_records(root):
        if isinstance(record, MessageRecord) and shown < 2:
            print(json.dumps(record_to_json(record), ensure_ascii=False))
            shown += 1
    print(f"\nTry:  rocketdesk store dump {root} --topic OrderEvents --limit 5")
    print(f"      rocketdesk store inspect --json {root}")
    return status


