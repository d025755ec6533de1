"""The record codec, properties, Java hashes and msgIds: vectors and hypothesis round trips."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError, MessageIllegalError, TornTailError
from storage.message import (
    java_hash,
    properties_to_string,
    property_from_string,
    string_to_properties,
    tags_string_to_tags_code,
)
from storage.message_id import (
    UniqIdGenerator,
    create_message_id,
    decode_message_id,
    decode_uniq_message_id,
    host_to_bytes,
)
from storage.record import (
    END_OF_DATA,
    BatchEntry,
    BlankRecord,
    MessageRecord,
    decode_batch_body,
    decode_record,
    encode_batch_body,
    encode_blank,
    encode_record,
    iter_records,
    record_size,
)

# The constructed vector of the protocol reference (§4.1).
VECTOR = bytes.fromhex(
    "00000065 daa320a7 58932aac 00000000 00000000 0000000000000000 0000000000000000 00000000"
    " 0000018bcfe56800 0a000005 0000c350 0000018bcfe56801 0a000001 00002a9f 00000000"
    " 0000000000000000 00000002 6869 01 54 0007 54414753016102"
)


def _vector_record(**overrides) -> bytes:
    fields = {
        "topic": b"T", "body": b"hi", "properties": b"TAGS\x01a\x02", "queue_id": 0, "flag": 0,
        "queue_offset": 0, "physical_offset": 0, "sys_flag": 0, "born_timestamp": 1700000000000,
        "born_host": host_to_bytes("10.0.0.5", 50000), "store_timestamp": 1700000000001,
        "store_host": host_to_bytes("10.0.0.1", 10911),
    }
    fields.update(overrides)
    return encode_record(**fields)


def java_hash_reference(text: str) -> int:
    """Java's String.hashCode, the obvious way: a loop over UTF-16 code units."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_reference_vector_encodes_byte_for_byte():
    assert _vector_record() == VECTOR
    assert len(VECTOR) == 101


def test_reference_vector_decodes_to_its_fields():
    record = decode_record(VECTOR)
    assert isinstance(record, MessageRecord)
    assert (record.topic, record.body, record.tags) == ("T", b"hi", "a")
    assert record.body_crc == 0x58932AAC == zlib.crc32(b"hi") & 0x7FFFFFFF
    assert record.born_host == ("10.0.0.5", 50000)
    assert record.store_host == ("10.0.0.1", 10911)
    assert record.msg_id == "0A00000100002A9F0000000000000000"


hosts = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 65535), ("::1", 9876),
                         ("fe80::1:2", 1)])
properties = st.dictionaries(
    st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
            min_size=1, max_size=10),
    st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
            min_size=1, max_size=20),
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(
    topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(
        lambda t: len(t.encode()) <= 127),
    body=st.binary(max_size=300),
    props=properties,
    tran=st.sampled_from([0x0, 0x4, 0x8, 0xC]),
    born=hosts,
    store=hosts,
    offsets=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**31 - 1)),
)
def test_encode_decode_round_trip(topic, body, props, tran, born, store, offsets):
    queue_offset, physical_offset, queue_id = offsets
    sys_flag = tran | (0x10 if ":" in born[0] else 0) | (0x20 if ":" in store[0] else 0)
    props_text = properties_to_string(props)
    raw = encode_record(
        topic=topic.encode(), body=body, properties=props_text.encode(), queue_id=queue_id,
        flag=7, queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=sys_flag,
        born_timestamp=123, born_host=host_to_bytes(*born), store_timestamp=456,
        store_host=host_to_bytes(*store), reconsume_times=3, prepared_transaction_offset=9,
    )
    assert len(raw) == record_size(len(body), len(topic.encode()), len(props_text.encode()), sys_flag)
    record = decode_record(raw + b"\x00" * 5)  # trailing bytes are not part of the record
    assert (record.topic, record.body, record.properties) == (topic, body, props)
    assert (record.queue_id, record.queue_offset, record.commit_log_offset) == (
        queue_id, queue_offset, physical_offset)
    assert (record.born_host, record.store_host) == (born, store)
    assert (record.sys_flag, record.flag, record.reconsume_times) == (sys_flag, 7, 3)
    assert record.prepared_transaction_offset == 9
    assert record.total_size == len(raw)
    assert decode_message_id(record.msg_id) == (store[0], store[1], physical_offset)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.data())
def test_any_flipped_body_byte_fails_the_crc(body, data):
    raw = bytearray(_vector_record(body=body))
    index = 88 + data.draw(st.integers(0, len(body) - 1))
    raw[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_record(bytes(raw))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 101 - 8))
def test_a_cut_record_is_a_torn_tail(cut):
    with pytest.raises(TornTailError):
        decode_record(VECTOR[: len(VECTOR) - cut])


def test_zero_bytes_are_end_of_data_and_blank_records_end_the_file():
    assert decode_record(bytes(200)) is END_OF_DATA
    blank = decode_record(encode_blank(500) + bytes(492), 0, base_offset=1000)
    assert blank == BlankRecord(1000, 500)


def test_bad_magic_and_size_mismatch_are_corrupt():
    bad_magic = bytearray(VECTOR)
    bad_magic[4:8] = b"\x12\x34\x56\x78"
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_record(bytes(bad_magic))
    bad_size = bytearray(VECTOR)
    bad_size[0:4] = struct.pack(">i", 102)
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(bad_size) + b"\x00")


def test_v2_records_with_a_two_byte_topic_length_are_read():
    topic = "x" * 200
    v1 = _vector_record(topic=b"T")
    # Rebuild as v2: magic 0xDAA320AB, topic length as a short.
    head, rest = bytearray(v1[:90]), v1[91:]  # 88 prefix + body "hi"; v1 topic length byte at 90
    props = rest[1:]
    raw = bytes(head) + struct.pack(">h", len(topic)) + topic.encode() + props
    raw = struct.pack(">iI", len(raw), 0xDAA320AB) + raw[8:]
    record = decode_record(raw)
    assert record.topic == topic
    assert record.tags == "a"


def test_iter_records_stops_at_garbage():
    body = VECTOR + VECTOR + b"\xff" * 30
    assert len(list(iter_records(body))) == 2


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=50), properties),
                min_size=1, max_size=8))
def test_batch_body_round_trip(items):
    entries = [BatchEntry(flag, body, properties_to_string(props)) for flag, body, props in items]
    assert decode_batch_body(encode_batch_body(entries)) == entries


@pytest.mark.parametrize("body", [b"", b"\x00\x00\x00\x05", b"\x00\x00\x00\x30" + b"\x00" * 20])
def test_malformed_batch_bodies_are_illegal(body):
    with pytest.raises(MessageIllegalError):
        decode_batch_body(body)


@settings(max_examples=200)
@given(properties)
def test_properties_string_round_trip(props):
    text = properties_to_string(props)
    assert string_to_properties(text) == props
    for name, value in props.items():
        assert property_from_string(text, name) == value


def test_properties_parse_skips_segments_rocketmq_skips():
    assert string_to_properties("A\x011\x02junk\x02\x01x\x02B\x01\x02C\x013") == {"A": "1", "C": "3"}
    assert property_from_string("XKEYS\x01no\x02KEYS\x01yes\x02", "KEYS") == "yes"


@pytest.mark.parametrize(("text", "expected"), [("", 0), ("a", 97), ("TagA", 2598919)])
def test_java_hash_known_values(text, expected):
    assert java_hash(text) == expected


@settings(max_examples=300)
@given(st.text())
def test_java_hash_matches_string_hashcode_over_utf16_units(text):
    assert java_hash(text) == java_hash_reference(text)


def test_java_hash_of_non_bmp_text_uses_surrogate_pairs():
    assert java_hash("😀") == 31 * 0xD83D + 0xDE00
    assert tags_string_to_tags_code("标签") == java_hash_reference("标签")
    assert tags_string_to_tags_code(None) == 0


def test_offset_msg_id_example_and_ipv6_round_trip():
    assert create_message_id(host_to_bytes("10.0.0.1", 10911), 0x123) == (
        "0A00000100002A9F0000000000000123")
    msg_id = create_message_id(host_to_bytes("2001:db8::7", 10911), 2**40)
    assert len(msg_id) == 56
    assert decode_message_id(msg_id) == ("2001:db8::7", 10911, 2**40)


@pytest.mark.parametrize("bad", ["", "XYZ", "0A000001", "G" * 32])
def test_malformed_msg_ids_raise_value_error(bad):
    with pytest.raises(ValueError, match=r"msgId|hex"):
        decode_message_id(bad)


def test_uniq_ids_are_unique_and_decodable():
    generator = UniqIdGenerator("192.168.7.9")
    ids = {generator.next_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    sample = next(iter(ids))
    assert len(sample) == 32
    decoded = decode_uniq_message_id(sample)
    assert decoded.ip == "192.168.7.9"
    assert 0 <= decoded.millis_since_month_start < 31 * 86_400_000
