"""Shared fixtures: small stores in tmp_path, so file rolls are exercised."""

from __future__ import annotations

import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from storage.config import FlushDiskType, MessageStoreConfig  # noqa: E402
from storage.message import MessageExtBrokerInner  # noqa: E402
from storage.message_store import DefaultMessageStore  # noqa: E402


def small_config(root, **overrides) -> MessageStoreConfig:
    """A store config with tiny files (4 KiB CommitLog files, 10-unit ConsumeQueue files)."""
    values = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 4096,
        "mapped_file_size_consume_queue": 20 * 10,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
        "delete_when": "99",
        "flush_disk_type": FlushDiskType.ASYNC_FLUSH,
    }
    values.update(overrides)
    return MessageStoreConfig(**values)


def make_message(topic="TopicTest", body=b"hello", queue_id=0, tags=None, keys=None, uniq=None,
                 **extra) -> MessageExtBrokerInner:
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    props.update(extra.pop("properties", {}))
    extra.setdefault("born_host", ("127.0.0.1", 40000))
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=props,
                                 born_timestamp=int(time.time() * 1000), **extra)


@pytest.fixture
def store_factory(tmp_path):
    """Open stores under tmp_path; every store opened is shut down after the test."""
    opened: list[DefaultMessageStore] = []

    def open_store(start=True, **overrides) -> DefaultMessageStore:
        store = DefaultMessageStore(small_config(tmp_path / "store", **overrides))
        store.load()
        if start:
            store.start()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.shutdown()
