"""Pulled records as the client's messages: a body its producer compressed comes back as it was
sent, and one anyone merely flagged compressed (garbage, or a bomb) stays as stored instead of
failing the consumer on that message for good."""

from __future__ import annotations

import zlib

import pytest

from cluster.client.message import MessageExt
from cluster.client.route import MessageQueue
from storage.message import COMPRESSED_FLAG, MAX_INFLATED_BODY, inflated, properties_to_string
from storage.message_id import host_to_bytes
from storage.record import decode_record, encode_record


def record_of(body: bytes, sys_flag: int = COMPRESSED_FLAG):
    raw = encode_record(topic=b"T", body=body, queue_id=0, flag=0, queue_offset=0,
                        physical_offset=0, sys_flag=sys_flag, born_timestamp=1,
                        born_host=host_to_bytes("1.2.3.4", 5), store_timestamp=2,
                        store_host=host_to_bytes("127.0.0.1", 10911), reconsume_times=0,
                        properties=properties_to_string({"UNIQ_KEY": "01AB"}).encode())
    return decode_record(raw, 0)


MQ = MessageQueue("T", "broker-a", 0)


def test_a_compressed_body_comes_back_as_sent():
    assert MessageExt.of(record_of(zlib.compress(b"x" * 5000)), MQ).body == b"x" * 5000


@pytest.mark.parametrize("stored", [b"not zlib", zlib.compress(b"x" * 100)[:-3],
                                    zlib.compress(bytes(MAX_INFLATED_BODY + 1), 9)])
def test_a_body_flagged_compressed_that_does_not_inflate_stays_as_stored(stored):
    assert inflated(stored) is None  # garbage, cut short, or past the limit
    assert MessageExt.of(record_of(stored), MQ).body == stored


def test_inflating_stops_at_its_limit():
    assert inflated(zlib.compress(b"y" * 1000), 1000) == b"y" * 1000
    assert inflated(zlib.compress(b"y" * 1001), 1000) is None
    assert inflated(zlib.compress(b"")) == b""
