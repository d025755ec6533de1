"""The store's compiled core (common/_storecore.c) against the pure reference, byte for byte:
the record encoder and decoder, dispatch's property scan, and the index's key writes.

The comparisons load the extension directly, so they run even under ROCKETDESK_PURE=1; they
are skipped when it is not built (test_speedups.py fails then if a C compiler is at hand).
Where the reference raises or returns something other than a message record, the compiled
decoder must return None (the caller then runs the reference); for well-formed input it must
not (else the fast path would silently never run).
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import os
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from storage import index_file as index_module
from storage.batch_record import batch_layout, batch_layout_pure, encode_batch_into_pure
from storage.errors import PropertiesSizeExceededError
from storage.index_file import IndexFile, index_key_hash, topic_seed
from storage.message import dispatch_properties_pure, properties_normalized_pure
from storage.record import (
    BatchEntry,
    MessageRecord,
    body_crc,
    decode_record,
    decode_record_pure,
    encode_batch_body,
    encode_record,
    encode_record_into_pure,
)

try:
    core = importlib.import_module("common._storecore")
except ImportError:
    core = None
pytestmark = pytest.mark.skipif(core is None, reason="the compiled core is not built")

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.one_of(st.binary(min_size=8, max_size=8), st.binary(min_size=20, max_size=20))


@st.composite
def record_fields(draw):
    born, store = draw(hosts), draw(hosts)
    sys_flag = draw(int32) & ~0x30 | (0x10 if len(born) == 20 else 0) | (0x20 if len(store) == 20 else 0)
    return {
        "crc": draw(st.integers(0, 2**31 - 1)), "queue_id": draw(int32), "flag": draw(int32),
        "queue_offset": draw(int64), "physical_offset": draw(int64), "sys_flag": sys_flag,
        "born_timestamp": draw(int64), "born_host": born, "store_timestamp": draw(int64),
        "store_host": store, "reconsume_times": draw(int32),
        "prepared_transaction_offset": draw(int64), "body": draw(st.binary(max_size=300)),
        "topic": draw(st.text(max_size=40).map(str.encode).filter(lambda t: len(t) <= 127)),
        "properties": draw(st.text(max_size=80).map(str.encode)),
    }


def _fields(**values) -> dict:
    """A record's fields: zeros and loopback hosts unless given."""
    fields = {"crc": 0, "queue_id": 0, "flag": 0, "queue_offset": 0, "physical_offset": 0,
              "sys_flag": 0, "born_timestamp": 0, "born_host": b"\x7f\0\0\1\0\0\0\1",
              "store_timestamp": 0, "store_host": b"\x7f\0\0\1\0\0\0\2", "reconsume_times": 0,
              "prepared_transaction_offset": 0, "body": b"", "topic": b"T", "properties": b""}
    fields.update(values)
    return fields


def _encode_both(fields: dict, pos: int) -> tuple[bytearray, bytearray, int, int]:
    args = (fields["crc"], fields["queue_id"], fields["flag"], fields["queue_offset"],
            fields["physical_offset"], fields["sys_flag"], fields["born_timestamp"],
            fields["born_host"], fields["store_timestamp"], fields["store_host"],
            fields["reconsume_times"], fields["prepared_transaction_offset"], fields["body"],
            fields["topic"], fields["properties"])
    pure, compiled = bytearray(b"\xee" * 2048), bytearray(b"\xee" * 2048)
    total_pure = encode_record_into_pure(pure, pos, *args)
    total_compiled = core.encode_record_into(compiled, pos, *args)
    return pure, compiled, total_pure, total_compiled


@pytest.mark.twins
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(record_fields(), st.integers(0, 64))
def test_the_encoders_write_the_same_record(fields, pos):
    pure, compiled, total_pure, total_compiled = _encode_both(fields, pos)
    assert total_compiled == total_pure
    assert compiled == pure
    # and the record is the one encode_record builds as a value
    assert bytes(pure[pos : pos + total_pure]) == encode_record(**fields)


@pytest.mark.parametrize("change", [
    {"queue_id": 2**31}, {"flag": -(2**31) - 1}, {"sys_flag": 2**32}, {"born_timestamp": 2**63},
    {"born_host": b"1234567"}, {"store_host": b"x" * 16}, {"topic": b"t" * 128},
    {"properties": b"p" * 32768}, {"body": b"b" * 4000},
])
def test_both_encoders_refuse_what_does_not_fit(change):
    fields = _fields(crc=1, body=b"", topic=b"T", properties=b"")
    fields.update(change)
    for encode in (encode_record_into_pure, core.encode_record_into):
        target = bytearray(b"\xee" * 2048)
        with pytest.raises((ValueError, struct.error)):
            encode(target, 0, *fields.values())
        if encode is core.encode_record_into:
            assert target == bytearray(b"\xee" * 2048)  # refused before a byte was written


def _pure_outcome(buf, pos, check_crc, read_body):
    try:
        return decode_record_pure(buf, pos, check_crc=check_crc, read_body=read_body)
    except Exception as exc:
        return type(exc)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(record_fields(), st.data())
def test_the_decoders_agree_on_records_and_on_damage(fields, data):
    record = encode_record(**fields)
    expected = _pure_outcome(record, 0, False, True)
    assert isinstance(expected, MessageRecord)
    assert core.decode_record_fields(record, 0, True) == dataclasses.astuple(expected)
    # damaged: a byte changed, the end cut off, garbage before it
    damaged = bytearray(record)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(damaged) - 1))
        damaged[i] = data.draw(st.integers(0, 255))
    damaged = bytes(damaged[: data.draw(st.integers(0, len(damaged)))])
    read_body = data.draw(st.booleans())
    expected = _pure_outcome(damaged, 0, False, read_body)
    got = core.decode_record_fields(damaged, 0, read_body)
    if isinstance(expected, MessageRecord):
        assert got == dataclasses.astuple(expected)
    else:
        assert got is None
    # the store's decode_record (compiled when built, with the CRC check) says what the pure one says
    check_crc = data.draw(st.booleans())
    assert _outcome(decode_record, damaged, check_crc, read_body) == \
        _pure_outcome(damaged, 0, check_crc, read_body)


def _outcome(decode, buf, check_crc, read_body):
    try:
        return decode(buf, 0, check_crc=check_crc, read_body=read_body)
    except Exception as exc:
        return type(exc)


def test_the_decoder_reads_records_in_a_mapping_and_after_others(tmp_path):
    import mmap

    fields = _fields(crc=body_crc(b"hello"), queue_id=3, queue_offset=7, physical_offset=91,
                     born_timestamp=1, store_timestamp=2, body=b"hello", topic=b"T\xc3\xa9",
                     properties=b"KEYS\x01k\x02")
    first = encode_record(**fields)
    path = tmp_path / "log"
    path.write_bytes(first + first + bytes(64))
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        got = core.decode_record_fields(mm, len(first), True)
        assert got is not None
        assert got[15] == "Té"
        assert got[14] == b"hello"
        assert core.decode_record_fields(mm, 2 * len(first), True) is None  # zeros: end of data


_prop_chars = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "\x01", "\x02", "a", " ",
                               "é", "\U0001f600", "\ud800", "TAG", "XKEYS"])


@pytest.mark.twins
@settings(max_examples=1500)
@given(st.lists(_prop_chars, max_size=30).map("".join))
@example("TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u\x02DELAY\x013\x02")
@example("TAGS\x01\x02TAGS\x01x\x02TAGS\x01\x02")
@example("A\x01TAGS\x01v")
def test_the_property_scans_agree(text):
    compiled = core.dispatch_properties(text)
    if compiled is None:  # only text that cannot be UTF-8
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    else:
        assert compiled == dispatch_properties_pure(text)


@pytest.mark.twins
@settings(max_examples=1500)
@given(st.lists(_prop_chars, max_size=30).map("".join))
@example("")
@example("A\x01b\x02")
@example("A\x01b\x02A\x01c\x02")
@example("A\x01b\x01c\x02")
def test_the_normalized_checks_agree(text):
    # the compiled check may only say False where it cannot read the text (a lone surrogate)
    surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    assert core.properties_normalized(text) == (properties_normalized_pure(text) and not surrogate)


def test_normalized_properties_are_their_own_round_trip():
    many = "".join(f"K{i}\x01v\x02" for i in range(70))
    assert properties_normalized_pure(many)
    assert not core.properties_normalized(many)  # too many pairs to check: the slow path
    assert core.properties_normalized("TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u\x02")


_key_chars = st.sampled_from(["a", "B", " ", "é", "\u4e2d", "\U0001f600", "#", "0"])


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.none(), st.text(_key_chars, max_size=8)),
                          st.one_of(st.none(), st.text(_key_chars, max_size=20))),
                min_size=1, max_size=12),
       st.sampled_from([1, 3, 17]), st.sampled_from([4, 9, 40]))
def test_the_index_writes_agree_key_for_key(tmp_path_factory, monkeypatch, messages, slots,
                                            entries):
    monkeypatch.setattr(index_module, "_index_put_keys", core.index_put_keys)
    folder = tmp_path_factory.mktemp("index")
    compiled_file = IndexFile(str(folder / "20260101000000000"), slots, entries)
    pure_file = IndexFile(str(folder / "20260101000000001"), slots, entries)
    seed = topic_seed("TopicTest")
    try:
        for n, (uniq, keys) in enumerate(messages):
            offset, store_ts = 1000 + 100 * n, 1_700_000_000_000 + 1500 * n
            written = compiled_file.put_keys(seed, uniq, keys, offset, store_ts)
            wanted = [k for k in [uniq or None, *(keys.split(" ") if keys else [])] if k]
            room = pure_file.index_num - pure_file.index_count
            assert written == (len(wanted) <= room)
            if not written:
                break
            for key in wanted:
                assert pure_file.put_key_hash(index_key_hash(key, seed), offset, store_ts)
            assert compiled_file.mm[:] == pure_file.mm[:]
            for name in ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset",
                         "hash_slot_count", "index_count"):
                assert getattr(compiled_file, name) == getattr(pure_file, name), name
    finally:
        compiled_file.destroy(0)
        pure_file.destroy(0)


def test_the_store_runs_the_compiled_functions_unless_told_not_to():
    from common import speedups
    from storage import dispatch_runs, get_message, message, record

    if speedups.store_core is None:  # ROCKETDESK_PURE=1: the pure twins, everywhere
        assert index_module._index_put_keys is None
        assert record.encode_record_into is encode_record_into_pure
        assert message._dispatch_properties_compiled is None
        assert dispatch_runs.index_keys_into is dispatch_runs.index_keys_into_pure
        assert get_message._gather_records is None  # (the read loop takes every unit)
    else:
        assert index_module._index_put_keys is core.index_put_keys
        assert record.encode_record_into is core.encode_record_into
        assert record._decode_fields is core.decode_record_fields
        assert dispatch_runs.plain_run is core.plain_run
        assert dispatch_runs.consume_queue_units_into is core.consume_queue_units_into
        assert dispatch_runs.index_keys_into is core.index_keys_into
        assert get_message._gather_records is core.gather_records


# --- batches ---------------------------------------------------------------------------------
_batch_props = st.lists(st.sampled_from(["TAGS\x01a\x02", "KEYS\x01k1 k2\x02", "CLUSTER\x01c\x02",
                                         "X\x01é\x02", "U\x01v", "", "\x02"]), max_size=4).map("".join)
_batch_entries = st.lists(st.tuples(int32, st.binary(max_size=200), _batch_props), min_size=1,
                          max_size=8)


def _batch_body(entries) -> bytes:
    return encode_batch_body([BatchEntry(flag, body, props) for flag, body, props in entries])


def _layout_outcome(function, body, cluster, overhead):
    try:
        return function(body, cluster, overhead)
    except Exception as exc:
        return type(exc)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_batch_entries, st.sampled_from([None, b"DefaultCluster", "é".encode()]), hosts, hosts,
       st.data())
def test_the_batch_encoders_write_the_same_records(entries, cluster, born, store, data):
    body = _batch_body(entries)
    overhead = 72 + len(born) + len(store) + 1 + len(b"BatchTopic") + 2
    layout = batch_layout_pure(body, cluster, overhead)
    assert core.batch_layout(body, cluster, overhead) == layout
    offsets = st.integers(0, 2**62)  # a log's offsets: the records after them still fit int64
    sys_flag = data.draw(int32) & ~0x30 | (0x10 if len(born) == 20 else 0) \
        | (0x20 if len(store) == 20 else 0)
    args = (body, cluster, b"BatchTopic", "BatchTopic", data.draw(int32), data.draw(offsets),
            data.draw(offsets), sys_flag, data.draw(int64), born, data.draw(int64), store,
            data.draw(int32))
    pos = data.draw(st.integers(0, 64))
    pure, compiled = bytearray(b"\xee" * (layout[1] + 128)), bytearray(b"\xee" * (layout[1] + 128))
    assert core.encode_batch_into(compiled, pos, *args) == encode_batch_into_pure(pure, pos, *args)
    assert compiled == pure
    # and each record reads back with its entry's body and CLUSTER where the batch names one
    at = pos
    for _flag, inner, _props in entries:
        record = decode_record_pure(bytes(pure), at)
        assert record.body == inner
        assert record.body_crc == body_crc(inner)
        assert cluster is None or "CLUSTER\x01" in record.properties_string
        at += record.total_size


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(_batch_entries, st.sampled_from([None, b"C"]), st.data())
def test_the_batch_layouts_agree_on_damaged_bodies(entries, cluster, data):
    body = bytearray(_batch_body(entries))
    for _ in range(data.draw(st.integers(0, 3))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    body = bytes(body[: data.draw(st.integers(0, len(body)))])
    expected = _layout_outcome(batch_layout_pure, body, cluster, 100)
    got = core.batch_layout(body, cluster, 100)
    if isinstance(expected, tuple):
        assert got == expected
    else:  # the pure function raises (its sentence is the answer): the compiled one declines
        assert got is None
        assert _layout_outcome(batch_layout, body, cluster, 100) == expected


def test_properties_past_the_limit_are_refused_by_both():
    body = _batch_body([(0, b"x", "K\x01" + "v" * 32760 + "\x02")])
    assert core.batch_layout(body, b"DefaultCluster", 100) is None
    with pytest.raises(PropertiesSizeExceededError):
        batch_layout(body, b"DefaultCluster", 100)


@given(st.binary(max_size=5000))
def test_the_body_crcs_agree(body):
    assert core.body_crc(body) == body_crc(body)


# --- writes into the page cache --------------------------------------------------------------------
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=20000), cut=st.integers(0, 20000), offset=st.integers(0, 9000))
def test_both_file_writes_put_the_same_bytes_in_the_same_place(tmp_path, data, cut, offset):
    from storage.mapped_file import _write_at_pure

    length = min(cut, len(data))
    files = []
    for number, write in enumerate((core.write_at, _write_at_pure)):
        path = tmp_path / f"{number}-{len(data)}-{cut}-{offset}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, b"\xee" * 30000)
            write(fd, bytearray(data), length, offset)  # a buffer longer than what is written
        finally:
            os.close(fd)
        files.append(path.read_bytes())
    assert files[0] == files[1]
    assert files[0][offset : offset + length] == data[:length]
    assert files[0][offset + length : offset + length + 1] in (b"\xee", b"")


def test_the_compiled_file_write_refuses_bad_arguments(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(ValueError, match="out of range"):
            core.write_at(fd, b"abc", 4, 0)  # more than the buffer holds
        with pytest.raises(ValueError, match="out of range"):
            core.write_at(fd, b"abc", 3, -1)
        with pytest.raises(ValueError, match="not a file descriptor"):
            core.write_at(-1, b"abc", 3, 0)
        with pytest.raises(TypeError):
            core.write_at(fd, b"abc", 3)
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="Bad file descriptor") as caught:
        core.write_at(fd, b"abc", 3, 0)  # closed: EBADF
    assert caught.value.errno == errno.EBADF
    assert path.read_bytes() == b""
