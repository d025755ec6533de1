"""The vectorised decoder against the record-by-record one: the same rows, whatever the bytes."""

from __future__ import annotations

import contextlib
import socket
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export import columnar
from export.columnar import ColumnarDecoder, _invalid_start, _properties, _properties_pure
from export.decode import BatchBuilder, RowBuilder
from export.errors import DataLossError
from export.options import SourceOptions
from storage.message import COMPRESSED_FLAG, TIME_RANGE_MS, properties_to_string
from storage.record import decode_record, encode_record

HOST = socket.inet_aton("127.0.0.1") + (10911).to_bytes(4, "big")
BORN = socket.inet_aton("10.1.2.3") + (50123).to_bytes(4, "big")

bodies = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=100).map(lambda t: t.encode()),
    st.sampled_from([b"", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ok\xc3",
                     b"\xef\xbf\xbd", "Grüße 你好 🎉".encode(), b"\xc0\xaf", b"abc\xff"]),
)
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
                    max_size=12)
messages = st.lists(st.tuples(
    bodies,
    st.dictionaries(prop_text.filter(bool), prop_text, max_size=4),
    st.one_of(st.none(), st.sampled_from(["TagA", "TagB"])),
    st.one_of(st.none(), st.sampled_from(["k1", "k1 k2", "k3"])),
    st.sampled_from(["T", "T", "Other"]),
), min_size=1, max_size=40)


def _buffer(items, compressed=False):
    chunks, starts, pos = [], [], 0
    for i, (body, extra, tags, keys, topic) in enumerate(items):
        props = dict(extra)
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = keys
        props["UNIQ_KEY"] = f"7F00000100002A9F{i:016X}"
        stored = zlib.compress(body) if compressed else body
        record = encode_record(
            topic=topic.encode(), body=stored, queue_id=3, flag=0, queue_offset=100 + i,
            physical_offset=4096 + pos, sys_flag=COMPRESSED_FLAG if compressed else 0,
            born_timestamp=1_700_000_000_000 + i, born_host=BORN,
            store_timestamp=1_700_000_000_500 + i, store_host=HOST,
            properties=properties_to_string(props).encode(), reconsume_times=i % 3)
        starts.append(pos)
        chunks.append(record)
        pos += len(record)
    return b"".join(chunks), starts


def _rows_by_record(data, starts):
    builder = RowBuilder("broker-a", None)
    for pos in starts:
        builder.add_raw(data, pos)
    return builder.take_batch().to_pylist()


@contextlib.contextmanager
def _pure_cutter():
    """The columnar decoder without its compiled cut, joins and property split."""
    saved = columnar._join_ranges, columnar._split_properties, columnar._cut_records
    columnar._join_ranges = columnar._split_properties = columnar._cut_records = None
    try:
        yield
    finally:
        columnar._join_ranges, columnar._split_properties, columnar._cut_records = saved


@settings(max_examples=150, deadline=None)
@given(messages)
def test_the_columnar_decoder_cuts_the_same_rows_as_the_record_decoder(items):
    data, starts = _buffer(items)
    want = _rows_by_record(data, starts)
    for row in want:
        row["properties"] = sorted(row["properties"])
    for mode in (contextlib.nullcontext, _pure_cutter):  # compiled (when built), then pure
        with mode():
            decoder = ColumnarDecoder("broker-a", "T")
            positions = np.asarray(starts, np.int64)
            assert decoder.handles(np.frombuffer(data, np.uint8), positions)
            got = decoder.decode(data, positions).to_pylist()
        for row in got:
            row["properties"] = sorted(row["properties"])
        assert got == want


def _cut_or_error(data, starts, topic="T"):
    """What the decoder makes of the records: a batch, None (not in the form it cuts), or the
    error it stops with."""
    decoder = ColumnarDecoder("broker-a", topic)
    positions = np.asarray(starts, np.int64)
    if not decoder.handles(np.frombuffer(data, np.uint8), positions):
        return None
    try:
        return decoder.decode(data, positions)
    except (DataLossError, pa.ArrowInvalid) as exc:
        return type(exc), str(exc) if isinstance(exc, DataLossError) else ""


@contextlib.contextmanager
def _without_compiled_cut():
    """The numpy cut (with the compiled joins and property split it calls)."""
    saved = columnar._cut_records
    columnar._cut_records = None
    try:
        yield
    finally:
        columnar._cut_records = saved


@pytest.mark.twins
@pytest.mark.skipif(columnar._cut_records is None, reason="the compiled core is not built")
@settings(max_examples=300, deadline=None)
@given(messages, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       st.sampled_from(["T", "Other", None]))
def test_the_compiled_cut_makes_the_numpy_cuts_batch_whatever_the_bytes(items, damage, topic):
    """Byte for byte the same columns (validity bitmaps, offsets and all), or the same error
    for the same record, over records with bytes overwritten anywhere: lengths, topics,
    property strings that are not UTF-8, fields of any value."""
    data, starts = _buffer(items)
    data = bytearray(data)
    for at, value in damage:
        data[at % len(data)] = value
    data = bytes(data)
    compiled = _cut_or_error(data, starts, topic)
    with _without_compiled_cut():
        numpy = _cut_or_error(data, starts, topic)
    if isinstance(compiled, pa.RecordBatch):
        assert isinstance(numpy, pa.RecordBatch), numpy
        for name in compiled.schema.names:
            assert compiled[name].equals(numpy[name]), name
    else:
        assert compiled == numpy


@pytest.mark.twins
@pytest.mark.skipif(columnar._cut_records is None, reason="the compiled core is not built")
@pytest.mark.parametrize("hosts", [1, 2, 64, 65, 300])
def test_the_compiled_cut_names_hosts_past_its_table_as_numpy_does(hosts):
    """A batch with more distinct born hosts than the cut's table holds (64) falls back to
    finding them all: the same column either way."""
    data, starts = _buffer([(b"b", {}, None, None, "T")] * 400)
    data = bytearray(data)
    for i, pos in enumerate(starts):  # (a producer's port a row, in turn)
        data[pos + 52:pos + 56] = (40_000 + i % hosts).to_bytes(4, "big")
    compiled = _cut_or_error(bytes(data), starts)
    with _without_compiled_cut():
        numpy = _cut_or_error(bytes(data), starts)
    assert compiled["bornHost"].equals(numpy["bornHost"])
    assert len(set(compiled["bornHost"].to_pylist())) == hosts


# Property strings as they come, and as they should not: separators anywhere, empty keys and
# values, names twice, a value holding \x01, no trailing separator.
raw_properties = st.lists(st.lists(st.sampled_from(["\x01", "\x02", "K", "KEYS\x01", "TAGS",
                                                    "UNIQ_KEY", "v", "é", "𝄞"]), max_size=12)
                          .map("".join), max_size=30)


@pytest.mark.skipif(columnar._split_properties is None, reason="the compiled core is not built")
@settings(max_examples=300, deadline=None)
@given(raw_properties, st.integers(0, 3))
def test_the_compiled_property_split_cuts_the_same_columns_as_arrows_kernels(texts, sliced):
    props = pa.array(texts, pa.string())
    names = ("UNIQ_KEY", "KEYS", "TAGS", "")
    mapped, picked = _properties(props, names)
    want_map, want_picked = _properties_pure(props, names)
    assert mapped.to_pylist() == want_map.to_pylist()
    assert mapped.offsets.to_pylist() == want_map.offsets.to_pylist()
    assert [c.to_pylist() for c in picked] == [c.to_pylist() for c in want_picked]
    # Slices share their parent's buffers: from the front, from the back, from both.
    for part in (props.slice(min(sliced, len(props))), props.slice(0, max(len(props) - sliced, 0)),
                 props.slice(min(sliced, len(props)), 2)):
        mapped, picked = _properties(part, names)
        want_map, want_picked = _properties_pure(part, names)
        mapped.validate(full=True)
        assert mapped.to_pylist() == want_map.to_pylist()
        assert [c.to_pylist() for c in picked] == [c.to_pylist() for c in want_picked]


@pytest.mark.skipif(columnar._split_properties is None, reason="the compiled core is not built")
@pytest.mark.parametrize(("offsets", "data", "names", "error"), [
    (np.array([0, 5, 3], np.int32), b"abcdef", (), ValueError),   # backwards
    (np.array([0, 7], np.int32), b"abcdef", (), ValueError),      # past the data
    (np.array([-1, 2], np.int32), b"abcdef", (), ValueError),     # before it
    (b"", b"", (), ValueError),                                   # not even one offset
    (np.array([0, 2], np.int32), b"ab", ("KEYS",), TypeError),    # a name not bytes
    (np.array([0, 2], np.int32), b"ab", (b"k",) * 9, ValueError),  # too many names
    (np.array([0, 2, 1], np.int32)[1:], b"ab", (), ValueError),   # (a view) past the data
])
def test_the_compiled_property_split_refuses_what_does_not_describe_its_data(
        offsets, data, names, error):
    with pytest.raises(error):
        columnar._split_properties(offsets, data, names)


@settings(max_examples=200, deadline=None)
@given(st.lists(bodies, min_size=1, max_size=30))
def test_a_body_refuted_by_its_first_characters_is_never_utf8(rows):
    data = b"".join(rows)
    starts = np.cumsum([0] + [len(r) for r in rows[:-1]]).astype(np.int64)
    lengths = np.array([len(r) for r in rows], np.int64)
    refuted = _invalid_start(np.frombuffer(data, np.uint8), starts, lengths)
    for body, no in zip(rows, refuted, strict=True):
        if no:
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                continue
            raise AssertionError(f"{body!r} is UTF-8 but was refuted")


def test_records_it_does_not_cut_go_through_the_record_decoder_and_filters_apply():
    items = [(f"body {i}".encode() * 50, {}, "TagA" if i % 2 else "TagB", f"k{i}", "T")
             for i in range(20)]
    data, starts = _buffer(items, compressed=True)
    options = SourceOptions.parse({"nameServer": "h:1", "topic": "T", "tags": "TagA"})
    builder = BatchBuilder("broker-a", options, "T")
    assert not builder.decoder.handles(np.frombuffer(data, np.uint8), np.asarray(starts))
    builder.add(data, starts, len(data))
    rows = [r for b in builder.take_batches() for r in b.to_pylist()]
    assert [r["keys"] for r in rows] == [f"k{i}" for i in range(1, 20, 2)]
    assert rows[0]["body"] == b"body 1" * 50  # decompressed
    assert builder.skipped == 10
    assert builder.rows == 10


def test_runs_in_one_buffer_make_one_batch_each_buffer_its_own_with_their_filters():
    first, first_starts = _buffer([(b"a", {}, None, "k1", "T"), (b"b", {}, None, "k2", "T")])
    second, second_starts = _buffer([(b"c", {}, None, "k3 k1", "T")])
    options = SourceOptions.parse({"nameServer": "h:1", "topic": "T", "keys": "k1"})
    builder = BatchBuilder("broker-a", options, "T")
    builder.add(first, first_starts[:1], len(first))
    builder.add(first, first_starts[1:], len(first))  # (the same buffer: one run, one batch)
    builder.add(second, second_starts, len(second))
    batches = builder.take_batches()
    assert [[r["body"] for r in b.to_pylist()] for b in batches] == [[b"a"], [b"c"]]
    assert (builder.rows, builder.skipped) == (2, 1)


def test_runs_of_mapped_files_are_cut_where_they_are_never_joined():
    # A store file's view is a whole CommitLog file: joining two would copy gigabytes.
    first, first_starts = _buffer([(b"a", {}, None, "k1", "T"), (b"b", {}, None, "k2", "T")])
    second, second_starts = _buffer([(b"c", {}, None, "k3", "T")])
    options = SourceOptions.parse({"path": "/store", "topic": "T"})
    builder = BatchBuilder("broker-a", options, "T")
    builder.add(memoryview(first), first_starts, len(first))
    builder.add(memoryview(second), second_starts, len(second))
    batches = builder.take_batches()
    assert [[r["body"] for r in b.to_pylist()] for b in batches] == [[b"a", b"b"], [b"c"]]


@pytest.mark.skipif(columnar._split_properties is None, reason="the compiled core is not built")
def test_the_compiled_property_split_reads_offsets_at_any_alignment():
    offsets = np.array([0, 6, 12], np.int32).tobytes()
    shifted = memoryview(bytearray(b"\0" + offsets))[1:]  # not 4-byte aligned
    got = columnar._split_properties(shifted, b"KEYS\x01aTAGS\x01b", (b"KEYS", b"TAGS"))
    assert np.frombuffer(got[0], np.int32).tolist() == [0, 1, 2]
    assert np.frombuffer(got[5], np.int32).tolist() == [0, -1, -1, 1]


def _misaligned(values) -> np.ndarray:
    """int64s at an odd address: a numpy view of bytes at offset 1 (ascontiguousarray keeps it)."""
    view = np.frombuffer(b"\0" + np.asarray(values, np.int64).tobytes(), np.int64, offset=1)
    assert not view.flags.aligned
    return view


@pytest.mark.twins
@pytest.mark.skipif(columnar._cut_records is None, reason="the compiled core is not built")
def test_the_compiled_join_and_cut_read_starts_at_any_alignment():
    data, starts = _buffer([(b"one", {}, "TagA", "k1", "T"), (b"two", {}, None, None, "T")])
    assert columnar._join_ranges(data, _misaligned(starts), _misaligned([3, 3])) == \
        columnar._join_ranges(data, np.asarray(starts, np.int64), np.array([3, 3], np.int64))
    shifted = columnar._cut_records(data, _misaligned(starts), b"T")
    aligned = columnar._cut_records(data, np.asarray(starts, np.int64), b"T")
    assert shifted == aligned


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize(("start", "offset"), [(-8, 4), (0, -1), (60, 4), (62, 0), (64, 0)])
def test_a_gather_outside_the_data_is_refused_alike_on_both_paths(monkeypatch, pure, start,
                                                                    offset):
    # Four bytes at start + offset of each row, from 64 bytes of data: a range that leaves the
    # data is a ValueError on both paths (numpy alone would wrap -4 round to the end).
    if pure:
        monkeypatch.setattr(columnar, "_join_ranges", None)
    elif columnar._join_ranges is None:
        pytest.skip("the compiled core is not built")
    buf = np.arange(64, dtype=np.uint8)
    with pytest.raises(ValueError, match=r"range 1 lies outside the data"):
        columnar.gather(buf, np.array([8, start], np.int64), offset, 4)
    assert columnar.gather(buf, np.array([8, 60], np.int64), 0, 4).tolist() == [
        [8, 9, 10, 11], [60, 61, 62, 63]]


def test_an_empty_column_of_properties_is_an_empty_map():
    empty = pa.Array.from_buffers(pa.string(), 0, [None, pa.py_buffer(b""), pa.py_buffer(b"")])
    mapped, picked = _properties(empty, ("KEYS",))
    assert len(mapped) == 0
    assert [len(c) for c in picked] == [0]


def test_a_key_named_twice_keeps_its_last_value_in_every_decoder():
    """RocketMQ's clients read properties into a map: the last value of a key wins. The
    columnar decoder (compiled and pure) and the record decoder agree on it."""
    props = "KEYS\x01a\x02TAGS\x01t\x02KEYS\x01b\x02UNIQ_KEY\x01U1\x02UNIQ_KEY\x01U2\x02"
    record = encode_record(
        topic=b"T", body=b"x", queue_id=0, flag=0, queue_offset=0, physical_offset=0,
        sys_flag=0, born_timestamp=1, born_host=BORN, store_timestamp=2, store_host=HOST,
        properties=props.encode(), reconsume_times=0)
    want = _rows_by_record(record, [0])
    assert sorted(want[0]["properties"]) == [("KEYS", "b"), ("TAGS", "t"), ("UNIQ_KEY", "U2")]
    for mode in (contextlib.nullcontext, _pure_cutter):
        with mode():
            got = ColumnarDecoder("broker-a", "T").decode(record, np.array([0])).to_pylist()
        assert sorted(got[0]["properties"]) == sorted(want[0]["properties"])
        assert (got[0]["keys"], got[0]["uniqKey"], got[0]["tags"]) == ("b", "U2", "t")


@pytest.mark.skipif(columnar._split_properties is None, reason="the compiled core is not built")
@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["A", "B", "AB", "KEYS", "TAGS", "UNIQ_KEY", ""]),
                                   st.sampled_from(["", "v", "w\x01x"])), min_size=20, max_size=120),
                min_size=1, max_size=4))
def test_long_rows_with_keys_named_again_split_alike(rows):
    """Rows past the few entries compared pair by pair are sorted: the same columns still."""
    props = pa.array(["".join(f"{k}\x01{v}\x02" for k, v in row) for row in rows], pa.string())
    names = ("UNIQ_KEY", "KEYS", "TAGS")
    mapped, picked = _properties(props, names)
    want_map, want_picked = _properties_pure(props, names)
    assert mapped.to_pylist() == want_map.to_pylist()  # (the same order too)
    assert [c.to_pylist() for c in picked] == [c.to_pylist() for c in want_picked]
    assert [dict(m) for m in mapped.to_pylist()] == [dict(row) for row in rows]


def test_a_body_flagged_compressed_that_does_not_inflate_is_exported_as_stored():
    """Any producer may set the compressed flag on any bytes: the export goes on with the
    body as stored (it failed on zlib's error, for the whole topic)."""
    items = [(f"body {i}".encode() * 50, {}, None, f"k{i}", "T") for i in range(4)]
    data, starts = _buffer(items, compressed=True)
    garbage = b"\x00not zlib\x00" * 30  # as long as a compressed body there, to fit in place
    record = bytearray(data[starts[1]:starts[2]])
    stored = zlib.compress(b"body 1" * 50)
    at = bytes(record).index(stored)
    patched = garbage[:len(stored)]
    record[at:at + len(stored)] = patched
    data = data[:starts[1]] + bytes(record) + data[starts[2]:]
    options = SourceOptions.parse({"nameServer": "h:1", "topic": "T"})
    builder = BatchBuilder("broker-a", options, "T")
    builder.add(data, starts, len(data))
    rows = [r for b in builder.take_batches() for r in b.to_pylist()]
    assert [r["body"] for r in rows] == [b"body 0" * 50, patched, b"body 2" * 50,
                                         b"body 3" * 50]


@pytest.mark.parametrize("compressed", [False, True])  # (the columnar cut, the record decoder)
def test_born_times_past_what_readers_hold_are_exported_at_the_nearest_end(compressed):
    """A born time is any int64 its producer sent: it once wrapped around in the * 1000 of
    the columnar cut (shown in 1969) and failed the whole export in the record decoder."""
    items = [(b"body", {}, None, None, "T")] * 3
    data, starts = _buffer(items, compressed=compressed)
    data = bytearray(data)
    for start, born in zip(starts, (2**63 - 1, -2**63, 1_700_000_000_000), strict=True):
        data[start + 40:start + 48] = born.to_bytes(8, "big", signed=True)  # (born timestamp)
    builder = BatchBuilder("broker-a", SourceOptions.parse({"nameServer": "h:1", "topic": "T"}),
                           "T")
    builder.add(bytes(data), starts, len(data))
    [batch] = builder.take_batches()
    born = batch.column("bornTimestamp").cast(pa.int64()).to_pylist()
    assert born == [253_402_300_799_999_000, -62_135_596_800_000_000, 1_700_000_000_000_000]


@pytest.mark.parametrize(("since", "until"), [
    (None, TIME_RANGE_MS[1] + 10),          # past the end: a far-future store time is kept
    (TIME_RANGE_MS[0] - 10, None),          # before the start: a far-past one is kept
    (TIME_RANGE_MS[1], None),               # at the end: only what shows at the end
    (None, TIME_RANGE_MS[0] + 1),           # just after the start: only what shows there
    (1_700_000_000_000, 2**62),
])
def test_every_decoder_filters_store_times_past_what_readers_hold_as_it_shows_them(since, until):
    """A store time outside years 1-9999 is shown at the nearest end; the time filters compare
    that shown time in every decoder (the record decoders once compared the raw one)."""
    items = [(b"body", {}, None, f"k{i}", "T") for i in range(3)]
    options = {"nameServer": "h:1", "topic": "T"}
    if since is not None:
        options["startingTimestamp"] = str(since)
    if until is not None:
        options["endingTimestamp"] = str(until)
    kept = {}
    for compressed in (False, True):  # the columnar cut; the record decoder's raw path
        data, starts = _buffer(items, compressed=compressed)
        data = bytearray(data)
        for start, stored in zip(starts, (2**63 - 1, -2**63, 1_700_000_000_500), strict=True):
            data[start + 56:start + 64] = stored.to_bytes(8, "big", signed=True)
        builder = BatchBuilder("broker-a", SourceOptions.parse(options), "T")
        builder.add(bytes(data), starts, len(data))
        kept[compressed] = [r["keys"] for b in builder.take_batches() for r in b.to_pylist()]
        # The full decoder (what neither fast path takes: IPv6 hosts, v2 records) filters alike.
        rows = RowBuilder("broker-a", SourceOptions.parse(options))
        for start in starts:
            rows.add(decode_record(bytes(data), start))
        kept[compressed, "full"] = rows.take_batch().column("keys").to_pylist()
        raw = RowBuilder("broker-a", SourceOptions.parse(options))  # (its filtering read)
        for start in starts:
            raw.add_raw(bytes(data), start)
        kept[compressed, "raw"] = raw.take_batch().column("keys").to_pylist()
    shown = dict(zip(("k0", "k1", "k2"), (TIME_RANGE_MS[1], TIME_RANGE_MS[0], 1_700_000_000_500),
                     strict=True))
    want = [k for k, t in shown.items()
            if (since is None or t >= since) and (until is None or t < until)]
    assert kept == {False: want, True: want, (False, "full"): want, (True, "full"): want,
                    (False, "raw"): want, (True, "raw"): want}


@pytest.mark.parametrize("compressed", [False, True])  # (the columnar cut, the record decoder)
@pytest.mark.parametrize(("field", "value"), [
    (84, 10_000),   # a body longer than the record
    (84, -5),       # a body of negative length
    (0, 100),       # a TOTALSIZE too small for what the record holds
])
def test_a_record_whose_parts_run_past_its_size_stops_the_export(compressed, field, value):
    """Nothing after a damaged record (the next one, or bytes never received) is handed on
    as its body, topic or properties."""
    items = [(b"body", {}, None, "k1", "T"), (b"next", {}, None, "k2", "T")]
    data, starts = _buffer(items, compressed=compressed)
    data = bytearray(data)
    data[starts[0] + field:starts[0] + field + 4] = value.to_bytes(4, "big", signed=True)
    builder = BatchBuilder("broker-a", SourceOptions.parse({"nameServer": "h:1", "topic": "T"}),
                           "T")
    builder.add(bytes(data), starts, len(data))
    with pytest.raises(DataLossError, match="at CommitLog offset 4096 is damaged"):
        builder.take_batches()


@pytest.mark.parametrize("cut", ["compiled", "numpy", "pure"])
def test_a_body_ending_where_its_record_and_the_data_end_leaves_no_room_for_a_topic(cut):
    """The topic's length byte would be the first byte after the data: damage, found before
    anything past the data is read."""
    if cut == "compiled" and columnar._cut_records is None:
        pytest.skip("the compiled core is not built")
    data, starts = _buffer([(b"body", {}, None, "k1", "T"), (b"last", {}, None, "k2", "T")])
    last = starts[1]
    size = len(data) - last
    data = bytearray(data)
    data[last + 84:last + 88] = (size - 88).to_bytes(4, "big")
    modes = {"compiled": contextlib.nullcontext, "numpy": _without_compiled_cut,
             "pure": _pure_cutter}
    with modes[cut]():
        assert _cut_or_error(bytes(data), starts) == (
            DataLossError, f"the record at CommitLog offset {4096 + last} is damaged: its body, "
            "topic and properties run past the size it gives")
