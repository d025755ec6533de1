"""The HA wire format: reports and transfer frames in any chunking."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.ha.errors import HAProtocolError
from cluster.ha.protocol import (
    ReportReader,
    TransferReader,
    encode_report,
    encode_transfer_header,
)


def test_a_report_is_a_bare_big_endian_long():
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))


def test_the_transfer_header_is_offset_then_size():
    assert encode_transfer_header(1 << 33, 32768) == struct.pack(">qi", 1 << 33, 32768)


def test_only_the_newest_complete_report_counts():
    reader = ReportReader()
    data = encode_report(10) + encode_report(20) + encode_report(30)
    assert reader.feed(data[:5]) is None
    assert reader.feed(data[5:20]) == 20  # 10 and 20 complete; 30 not yet
    assert reader.feed(data[20:]) == 30


def test_a_negative_report_is_a_protocol_error():
    with pytest.raises(HAProtocolError):
        ReportReader().feed(encode_report(-1))


@given(st.lists(st.tuples(st.integers(0, 2**50), st.binary(max_size=300)), max_size=20),
       st.lists(st.integers(1, 97), min_size=1, max_size=10))
def test_frames_survive_any_chunking(frames, cuts):
    stream = b"".join(encode_transfer_header(o, len(b)) + b for o, b in frames)
    reader = TransferReader()
    got = []
    pos = 0
    i = 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        got.extend(reader.feed(stream[pos : pos + step]))
        pos += step
        i += 1
    assert [(f.offset, f.body) for f in got] == frames
    assert reader.buffered == 0


def test_an_empty_frame_is_a_heartbeat():
    (frame,) = TransferReader().feed(encode_transfer_header(4096, 0))
    assert frame.is_heartbeat
    assert frame.offset == 4096


@pytest.mark.parametrize(("offset", "size"), [(-1, 0), (0, -5), (0, 64 * 1024 * 1024)])
def test_impossible_headers_are_refused(offset, size):
    with pytest.raises(HAProtocolError):
        TransferReader().feed(struct.pack(">qi", offset, size))
