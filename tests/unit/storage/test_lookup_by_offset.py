"""Looking a message up by a client's CommitLog offset: only where a whole message starts."""

from __future__ import annotations

import pytest

from storage.config import MessageStoreConfig
from storage.errors import OffsetOutOfRangeError, StoreError
from storage.message import MessageExtBrokerInner
from storage.message_store import DefaultMessageStore


@pytest.fixture
def store(tmp_path):
    config = MessageStoreConfig(store_path_root_dir=str(tmp_path))
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    yield store
    store.shutdown()


def put(store, body: bytes) -> int:
    msg = MessageExtBrokerInner(topic="T", body=body, queue_id=0, properties={},
                                properties_string="", born_host=("127.0.0.1", 1))
    return store.put_message(msg).append.wrote_offset


def test_offsets_inside_a_record_or_past_the_end_are_refused(store):
    # A body whose bytes look like a record head (a plausible size, the real magic code).
    forged = (150).to_bytes(4, "big") + bytes.fromhex("DAA320A7") + bytes(100)
    first = put(store, forged)
    second = put(store, b"x" * 64)
    assert store.look_message_by_offset(first).body == forged
    assert store.look_message_by_offset(second).body == b"x" * 64
    inner = first + store.select_one_message_by_offset(first).index(forged[:8])
    for offset in (-1, first + 1, first + 4, inner, second + 20, store.get_max_phy_offset() + 8, 2**62):
        with pytest.raises(StoreError):
            store.select_one_message_by_offset(offset)
        with pytest.raises(StoreError):
            store.look_message_by_offset(offset)


def test_a_head_claiming_more_than_any_message_is_refused_before_reading(store):
    forged = (500_000_000).to_bytes(4, "big") + bytes.fromhex("DAA320A7")
    first = put(store, forged + bytes(64))
    inner = first + store.select_one_message_by_offset(first).index(forged)
    with pytest.raises(OffsetOutOfRangeError, match="no message starts"):
        store.select_one_message_by_offset(inner)
