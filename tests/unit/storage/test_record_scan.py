"""Recovery's scan of a CommitLog file (common/_record_scan.c) against its pure twin
(storage.recovery._scan_pure): the same good end, the same problem in the same words, the same
count and last store time, for files of every shape: IPv4 and IPv6 hosts, both magic codes, a
blank record or zeros at the end, a hole, flipped bytes anywhere, any start."""

from __future__ import annotations

import importlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    encode_blank,
    encode_record,
)
from storage.recovery import ScanResult, _scan_pure

try:
    core = importlib.import_module("common._storecore")
except ImportError:
    core = None
compiled = pytest.mark.skipif(core is None, reason="the compiled core is not built")

V4_HOST = bytes([127, 0, 0, 1]) + struct.pack(">i", 5000)
V6_HOST = bytes(16) + struct.pack(">i", 5000)


def _record(kind: str, body: bytes, topic: bytes, props: bytes, store_ts: int) -> bytes:
    born = V6_HOST if kind in ("born6", "both6") else V4_HOST
    stored = V6_HOST if kind in ("store6", "both6") else V4_HOST
    sys_flag = (0x10 if born is V6_HOST else 0) | (0x20 if stored is V6_HOST else 0)
    record = encode_record(topic=topic, body=body, properties=props, queue_id=1, flag=0,
                           queue_offset=7, physical_offset=0, sys_flag=sys_flag,
                           born_timestamp=store_ts - 5, born_host=born, store_timestamp=store_ts,
                           store_host=stored)
    if kind != "v2":
        return record
    # MESSAGE_MAGIC_CODE_V2: the topic's length in two bytes, the record one byte longer.
    at = len(record) - len(props) - 2 - len(topic) - 1
    record = record[:at] + struct.pack(">H", len(topic)) + record[at + 1:]
    return struct.pack(">iI", len(record), MESSAGE_MAGIC_CODE_V2) + record[8:]


@st.composite
def files(draw):
    size = draw(st.integers(8, 4000))
    data = bytearray(size)
    starts = [0]
    pos = 0
    for _ in range(draw(st.integers(0, 12))):
        record = _record(draw(st.sampled_from(["v4", "v4", "born6", "store6", "both6", "v2"])),
                         draw(st.binary(max_size=300)), draw(st.binary(min_size=1, max_size=30)),
                         draw(st.binary(max_size=60)), draw(st.integers(0, 2**62)))
        if pos + len(record) > size:
            break
        data[pos:pos + len(record)] = record
        pos += len(record)
        starts.append(pos)
    ending = draw(st.sampled_from(["blank", "zeros", "short blank"]))
    if size - pos >= 8 and ending != "zeros":
        blank = encode_blank(size - pos - (3 if ending == "short blank" else 0))
        data[pos:pos + 8] = blank
    for _ in range(draw(st.integers(0, 3))):  # damage: any byte anywhere
        data[draw(st.integers(0, size - 1))] = draw(st.integers(0, 255))
    start = draw(st.sampled_from(starts) | st.integers(0, size))
    limit = draw(st.sampled_from([size, size + 100]) | st.integers(0, size))  # a hole from limit
    return bytes(data), size, start, limit


@pytest.mark.twins
@compiled
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files(), st.booleans())
def test_the_scans_agree_on_every_file(file, check_crc):
    data, size, start, limit = file
    expected = _scan_pure(memoryview(data), size, start, check_crc, limit)
    assert ScanResult(*core.scan_records(data, size, start, check_crc, limit)) == expected


@pytest.mark.twins
@compiled
def test_each_problem_is_said_in_the_pure_scans_words():
    record = _record("v4", b"body" * 10, b"TopicA", b"KEYS\x01k\x02", 1_700_000_000_000)
    cases = {
        "body CRC mismatch": (88, 0xFF),  # the body's first byte
        "bad magic 0x00A320A7": (4, 0x00),
        f"record size {0x7F000000 | len(record)} does not fit": (0, 0x7F),
    }
    for problem, (at, value) in cases.items():
        data = bytearray(4096)
        data[:len(record)] = record
        data[len(record):len(record) + 8] = encode_blank(4096 - len(record))
        data[at] = value
        pure = _scan_pure(memoryview(data), 4096, 0, True, 4096)
        assert pure.problem == problem, pure
        assert ScanResult(*core.scan_records(bytes(data), 4096, 0, True, 4096)) == pure
    data = bytearray(4096)
    data[:len(record)] = record
    data[len(record):len(record) + 8] = struct.pack(">iI", 100, BLANK_MAGIC_CODE)
    result = ScanResult(*core.scan_records(bytes(data), 4096, 0, True, 4096))
    assert result == ScanResult(len(record), False,
                                "blank record of size 100 does not end the file", 1,
                                1_700_000_000_000)
    assert result == _scan_pure(memoryview(data), 4096, 0, True, 4096)


@compiled
def test_out_of_range_arguments_are_an_error_not_a_read_past_the_buffer():
    with pytest.raises(ValueError, match="out of range"):
        core.scan_records(bytes(100), 200, 0, True, 200)  # the file larger than the buffer
    with pytest.raises(ValueError, match="out of range"):
        core.scan_records(bytes(100), 100, 101, True, 100)
    with pytest.raises(ValueError, match="out of range"):
        core.scan_records(bytes(100), 100, -1, True, 100)
