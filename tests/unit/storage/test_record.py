"""The CommitLog record codec (storage/record.py) against the layout of reference §4.1 and §4.8."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError, MessageIllegalError, RecordError, TornTailError
from storage.message_id import host_to_bytes
from storage.record import (
    END_OF_DATA,
    BatchEntry,
    BlankRecord,
    MessageRecord,
    body_crc,
    decode_batch_body,
    decode_record,
    encode_batch_body,
    encode_blank,
    encode_record,
    iter_records,
    record_size,
)

# Reference §4.1, constructed test vector: 101 bytes.
VECTOR = bytes.fromhex(
    "00000065 daa320a7 58932aac 00000000 00000000 0000000000000000 0000000000000000 00000000"
    " 0000018bcfe56800 0a000005 0000c350 0000018bcfe56801 0a000001 00002a9f 00000000"
    " 0000000000000000 00000002 6869 01 54 0007 54414753016102"
)


def _encode(**overrides) -> bytes:
    fields = {
        "topic": b"T", "body": b"hi", "properties": b"TAGS\x01a\x02", "queue_id": 0, "flag": 0,
        "queue_offset": 0, "physical_offset": 0, "sys_flag": 0, "born_timestamp": 1700000000000,
        "born_host": host_to_bytes("10.0.0.5", 50000), "store_timestamp": 1700000000001,
        "store_host": host_to_bytes("10.0.0.1", 10911),
    }
    fields.update(overrides)
    return encode_record(**fields)


def _v2_record(topic: bytes, body: bytes, props: bytes) -> bytes:
    """A v2 record built by hand: magic 0xDAA320AB and a 2-byte topic length."""
    rest = (
        struct.pack(">iiqqiq", 3, 0, 5, 4096, 0, 1700000000000)
        + bytes([10, 0, 0, 5]) + struct.pack(">i", 50000)
        + struct.pack(">q", 1700000000001) + bytes([10, 0, 0, 1]) + struct.pack(">i", 10911)
        + struct.pack(">iqi", 0, 0, len(body)) + body
        + struct.pack(">H", len(topic)) + topic + struct.pack(">h", len(props)) + props
    )
    total = 12 + len(rest)
    return struct.pack(">iIi", total, 0xDAA320AB, zlib.crc32(body) & 0x7FFFFFFF) + rest


# --- the reference vector ---------------------------------------------------------------------
def test_reference_vector_encodes_byte_for_byte():
    raw = _encode()
    assert len(raw) == 101
    assert raw.hex() == VECTOR.hex()


def test_reference_vector_decodes_to_its_fields():
    record = decode_record(VECTOR)
    assert isinstance(record, MessageRecord)
    assert (record.total_size, record.magic_code, record.body_crc) == (101, 0xDAA320A7, 0x58932AAC)
    assert (record.queue_id, record.flag, record.queue_offset, record.commit_log_offset) == (0, 0, 0, 0)
    assert (record.sys_flag, record.reconsume_times, record.prepared_transaction_offset) == (0, 0, 0)
    assert (record.born_timestamp, record.store_timestamp) == (1700000000000, 1700000000001)
    assert record.born_host == ("10.0.0.5", 50000)
    assert record.store_host == ("10.0.0.1", 10911)
    assert (record.body, record.topic, record.properties_string) == (b"hi", "T", "TAGS\x01a\x02")
    assert record.tags == "a"
    assert record.msg_id == "0A00000100002A9F0000000000000000"


def test_fixed_field_positions_of_an_ipv4_record():
    raw = _encode(flag=0x11223344, queue_offset=0x0102030405, physical_offset=0x0A0B0C0D0E,
                  sys_flag=0x8, store_timestamp=0x0123456789AB)
    # MAGIC at 4, FLAG at 16, QUEUEOFFSET at 20, PHYSICALOFFSET at 28, SYSFLAG at 36, STORETIMESTAMP at 56
    assert struct.unpack_from(">4xI8xiqqi16xq", raw) == (
        0xDAA320A7, 0x11223344, 0x0102030405, 0x0A0B0C0D0E, 0x8, 0x0123456789AB)
    assert raw[88:90] == b"hi"  # the body starts at 88 with IPv4 hosts


# --- round trips --------------------------------------------------------------------------------
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")
_name_text = st.text(_chars, min_size=1, max_size=12)
_props = st.dictionaries(_name_text, _name_text, max_size=5)
_topics = st.text(min_size=1, max_size=60).map(str.encode).filter(lambda b: len(b) <= 127)
_ports = st.integers(0, 65535)
_hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), _ports),
    st.tuples(st.ip_addresses(v=6).map(str), _ports),
)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


def _props_bytes(props: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


@settings(max_examples=300, deadline=None)
@given(
    topic=_topics, body=st.binary(max_size=300), props=_props,
    tran=st.sampled_from([0x0, 0x4, 0x8, 0xC]), other_bits=st.sampled_from([0, 0x1, 0x2, 0x3]),
    born=_hosts, store=_hosts, queue_id=_i32, flag=_i32, queue_offset=_i64,
    physical_offset=st.integers(0, 2**63 - 1), times=st.tuples(_i64, _i64),
    reconsume=_i32, prepared=_i64,
)
def test_encode_then_decode_gives_back_every_field(
    topic, body, props, tran, other_bits, born, store, queue_id, flag, queue_offset,
    physical_offset, times, reconsume, prepared,
):
    sys_flag = tran | other_bits | (0x10 if ":" in born[0] else 0) | (0x20 if ":" in store[0] else 0)
    props_raw = _props_bytes(props)
    raw = encode_record(
        topic=topic, body=body, properties=props_raw, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=sys_flag,
        born_timestamp=times[0], born_host=host_to_bytes(*born), store_timestamp=times[1],
        store_host=host_to_bytes(*store), reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
    )
    extra = (12 if sys_flag & 0x10 else 0) + (12 if sys_flag & 0x20 else 0)
    assert len(raw) == 91 + len(body) + len(topic) + len(props_raw) + extra
    assert len(raw) == record_size(len(body), len(topic), len(props_raw), sys_flag)
    assert struct.unpack_from(">i", raw)[0] == len(raw)
    assert raw[48 : 48 + len(host_to_bytes(*born))] == host_to_bytes(*born)
    record = decode_record(b"\x07" * 3 + raw + b"\x00" * 9, 3)  # neighbours are not read
    assert isinstance(record, MessageRecord)
    assert (record.topic, record.body, record.properties) == (topic.decode(), body, props)
    assert (record.queue_id, record.flag, record.sys_flag) == (queue_id, flag, sys_flag)
    assert (record.queue_offset, record.commit_log_offset) == (queue_offset, physical_offset)
    assert (record.born_timestamp, record.store_timestamp) == times
    assert (record.born_host, record.store_host) == (born, store)
    assert (record.reconsume_times, record.prepared_transaction_offset) == (reconsume, prepared)
    assert record.total_size == len(raw)
    assert record.magic_code == 0xDAA320A7


def test_a_127_byte_topic_is_the_longest_v1_can_hold():
    raw = _encode(topic=b"t" * 127)
    assert decode_record(raw).topic == "t" * 127
    with pytest.raises(MessageIllegalError):
        _encode(topic=b"t" * 128)
    with pytest.raises(MessageIllegalError):
        _encode(properties=b"p" * 32768)


# --- CRC ------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=500))
@example(b"a")  # zlib.crc32(b"a") has its top bit set: the mask matters
def test_body_crc_is_zlib_crc32_with_the_top_bit_cleared(body):
    expected = zlib.crc32(body) & 0x7FFFFFFF
    assert body_crc(body) == expected
    raw = _encode(body=body)
    assert struct.unpack_from(">i", raw, 8)[0] == expected
    assert decode_record(raw).body_crc == expected
    assert 0 <= expected < 2**31


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.data())
def test_a_flipped_body_byte_raises_corrupt_record_error(body, data):
    raw = bytearray(_encode(body=body))
    index = 88 + data.draw(st.integers(0, len(body) - 1))
    raw[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_record(bytes(raw))
    assert decode_record(bytes(raw), check_crc=False).body == bytes(raw[88 : 88 + len(body)])


# --- ends of data -------------------------------------------------------------------------------
@pytest.mark.parametrize("kept", range(4, 101))  # the first 3 bytes of the vector are zeros
def test_a_truncated_record_raises_torn_tail_error(kept):
    with pytest.raises(TornTailError) as excinfo:
        decode_record(b"\x00" * 16 + VECTOR[:kept], 16, base_offset=4096)
    assert excinfo.value.offset == 4096 + 16


@pytest.mark.parametrize("size", [0, 1, 7, 8, 91, 300])
def test_zero_bytes_where_a_record_would_start_are_end_of_data(size):
    assert decode_record(bytes(size)) is END_OF_DATA
    assert decode_record(VECTOR + bytes(size), len(VECTOR)) is END_OF_DATA


def test_blank_record_ends_the_file():
    blank = encode_blank(500)
    assert blank == struct.pack(">iI", 500, 0xCBD43194)
    data = VECTOR + blank + b"\xab" * 492  # whatever follows a blank header is not read
    assert decode_record(data, len(VECTOR), base_offset=8192) == BlankRecord(8192 + 101, 500)
    assert [r.total_size for r in iter_records(data + VECTOR)] == [101]


def test_blank_record_smaller_than_its_own_header_is_corrupt():
    with pytest.raises(CorruptRecordError):
        decode_record(encode_blank(4) + bytes(8))


_WRONG = {  # (position in the vector, bytes written there, zero bytes after): whole but wrong
    "bad-magic": (4, b"\x12\x34\x56\x78", 0),
    "total-size-too-large-for-fields": (0, struct.pack(">i", 102), 8),
    "total-size-below-minimum": (0, struct.pack(">i", 90), 0),
    "topic-length-overruns": (90, b"\x7f", 0),
    "body-leaves-no-topic-length": (84, struct.pack(">i", 13), 0),
    "v6-flags-on-a-v4-record": (36, struct.pack(">i", 0x30), 0),
}


@pytest.mark.parametrize(("position", "value", "padding"), _WRONG.values(), ids=_WRONG.keys())
def test_a_whole_but_wrong_record_raises_corrupt_record_error(position, value, padding):
    raw = bytearray(VECTOR + bytes(padding))
    raw[position : position + len(value)] = value
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(raw))
    assert len(list(iter_records(VECTOR + bytes(raw)))) == 1  # iteration stops there


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 100), st.integers(0, 255), st.integers(0, 64))
def test_any_changed_byte_decodes_or_raises_a_record_error(index, value, padding):
    raw = bytearray(VECTOR)
    raw[index] = value
    try:
        decode_record(bytes(raw) + bytes(padding))
    except RecordError:
        pass  # TornTailError or CorruptRecordError, never struct.error or IndexError


# --- v2 magic -----------------------------------------------------------------------------------
@pytest.mark.parametrize("topic", [b"T", b"x" * 200, "t\u00e9\u4e2d".encode() * 40])
def test_a_v2_record_with_a_two_byte_topic_length_decodes(topic):
    raw = _v2_record(topic, b"payload", b"TAGS\x01tag\x02KEYS\x01k1 k2\x02")
    record = decode_record(raw + bytes(20))
    assert record.magic_code == 0xDAA320AB
    assert record.total_size == len(raw)
    assert (record.topic, record.body, record.tags, record.keys) == (
        topic.decode(), b"payload", "tag", "k1 k2")
    assert (record.queue_id, record.queue_offset, record.commit_log_offset) == (3, 5, 4096)
    assert record.store_host == ("10.0.0.1", 10911)


# --- iter_records -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tail",
    [b"\xff" * 30, VECTOR[:60], bytes(40), encode_blank(64) + bytes(56),
     b"\x00\x00\x00\x65\x12\x34\x56\x78" + VECTOR[8:]],
    ids=["garbage", "torn", "zeros", "blank", "bad-magic"],
)
def test_iter_records_stops_at_garbage(tail):
    second = _encode(body=b"second", physical_offset=101)
    records = list(iter_records(VECTOR + second + tail + VECTOR))
    assert [(r.body, r.commit_log_offset) for r in records] == [(b"hi", 0), (b"second", 101)]


def test_iter_records_checks_crc_only_when_asked():
    bad = bytearray(VECTOR)
    bad[88] ^= 0xFF
    data = VECTOR + bytes(bad) + VECTOR
    assert len(list(iter_records(data))) == 3
    assert len(list(iter_records(data, check_crc=True))) == 1


# --- batch bodies (§4.8) ------------------------------------------------------------------------
_entries = st.lists(
    st.builds(BatchEntry, _i32, st.binary(max_size=60), _props.map(lambda p: _props_bytes(p).decode())),
    min_size=1, max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(_entries)
def test_batch_body_encode_then_decode_gives_back_the_entries(entries):
    body = encode_batch_body(entries)
    sizes = [22 + len(e.body) + len(e.properties_string.encode()) for e in entries]
    assert len(body) == sum(sizes)
    assert decode_batch_body(body) == entries


def test_batch_entry_layout_is_size_magic_crc_flag_body_properties():
    body = encode_batch_body([BatchEntry(-7, b"abc", "TAGS\x01x\x02")])
    assert struct.unpack_from(">iiiii", body) == (22 + 3 + 7, 0, 0, -7, 3)
    assert body[20:23] == b"abc"
    assert struct.unpack_from(">h", body, 23)[0] == 7
    assert body[25:] == b"TAGS\x01x\x02"


def _head(size: int, body_length: int) -> bytes:
    return struct.pack(">iiiii", size, 0, 0, 0, body_length)


_MALFORMED_BATCHES = {
    "empty": b"",
    "short-header": b"\x00\x00\x00\x05",
    "size-below-22": _head(21, 0) + b"\x00",
    "size-past-end": _head(200, 0) + b"\x00\x00",
    "negative-body-length": _head(22, -1) + b"\x00\x00",
    "body-past-size": _head(24, 5) + b"\x00" * 4,
    "properties-length-mismatch": _head(24, 0) + struct.pack(">h", 5) + b"ab",
    "negative-properties-length": _head(24, 0) + struct.pack(">h", -2) + b"ab",
    "properties-not-utf8": _head(24, 0) + struct.pack(">h", 2) + b"\xff\xfe",
    "trailing-bytes": encode_batch_body([BatchEntry(0, b"ab", "K\x01v\x02")]) + b"\x00\x00\x00",
}


@pytest.mark.parametrize("body", _MALFORMED_BATCHES.values(), ids=_MALFORMED_BATCHES.keys())
def test_malformed_batch_bodies_raise_message_illegal_error(body):
    with pytest.raises(MessageIllegalError):
        decode_batch_body(body)


@settings(max_examples=100, deadline=None)
@given(_entries, st.data())
def test_a_batch_body_cut_inside_its_last_entry_is_illegal(entries, data):
    body = encode_batch_body(entries)
    last = len(encode_batch_body(entries[-1:]))
    cut = data.draw(st.integers(len(body) - last + 1, len(body) - 1))
    with pytest.raises(MessageIllegalError):
        decode_batch_body(body[:cut])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_decode_as_a_batch_or_raise_message_illegal_error(body):
    try:
        entries = decode_batch_body(body)
    except MessageIllegalError:
        return
    # MAGICCODE and BODYCRC are ignored on decode; every other byte is accounted for.
    assert len(encode_batch_body(entries)) == len(body)
