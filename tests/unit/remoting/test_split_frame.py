"""FrameDecoder with the compiled split (common/_speedups.c split_frame) against the pure one:
the same commands, in the same order, from any byte stream cut anywhere, and the same error
where the stream is out of sync (issue 14)."""

from __future__ import annotations

import importlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.remoting import codec
from cluster.remoting.codec import FrameDecoder, RemotingCommand, SerializeType, encode
from cluster.remoting.codes import LanguageCode
from cluster.remoting.errors import RemoteProtocolError

try:
    core = importlib.import_module("common._speedups")
except ImportError:
    core = None
needs_core = pytest.mark.skipif(core is None, reason="the compiled core is not built")

int32s = st.integers(-(2**31), 2**31 - 1)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=int32s,
    flag=int32s,
    remark=st.one_of(st.none(), st.text(max_size=20)),
    ext_fields=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=6),
    body=st.binary(max_size=300),
    language=st.sampled_from([m.name for m in LanguageCode]),
    version=st.integers(-32768, 32767),
    serialize_type=st.sampled_from(SerializeType),
)


@st.composite
def frames(draw) -> bytes:
    """A frame as a peer sends it, or one damaged on the way."""
    frame = bytearray(encode(draw(commands)))
    kind = draw(st.integers(0, 5))
    if kind == 1:  # a byte changed anywhere (lengths, mark, header)
        at = draw(st.integers(0, len(frame) - 1))
        frame[at] = draw(st.integers(0, 255))
    elif kind == 2:  # a header that is not what its type says
        frame[4] = draw(st.integers(0, 255))
    elif kind == 3:
        frame = bytearray(draw(st.binary(min_size=1, max_size=40)))
    return bytes(frame)


def _fed(stream: bytes, cuts: list[int], compiled: bool, take) -> list:
    """What ``take(decoder, seen)`` records as the stream arrives cut at ``cuts``, on the
    compiled splits or on the pure decoder (its header decoders too); then what is pending
    after each piece, or the error that ends it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_split_frame", core.split_frame if compiled else None)
        patch.setattr(codec, "_split_run", core.split_run if compiled else None)
        if not compiled:
            for name, function in codec.PURE._asdict().items():
                patch.setattr(codec, f"_{name}", function)
        decoder = FrameDecoder(max_frame=4096)
        seen: list = []
        previous = 0
        for cut in [*sorted(cuts), len(stream)]:
            decoder.feed(stream[previous:cut])
            previous = cut
            try:
                take(decoder, seen)
            except RemoteProtocolError as exc:
                return [*seen, ("raises", str(exc))]
            seen.append(("pending", decoder.pending))
        return seen


def _commands(decoder: FrameDecoder, seen: list) -> None:
    while (command := decoder.next_command()) is not None:
        seen.append(tuple((type(v), v) for v in (
            command.code, command.opaque, command.flag, command.remark, command.ext_fields,
            command.body, command.language, command.version, command.serialize_type)))


def _outcomes(stream: bytes, cuts: list[int], split) -> list:
    return _fed(stream, cuts, split is not None, _commands)


@needs_core
@settings(max_examples=400, deadline=None)
@given(parts=st.lists(frames(), min_size=1, max_size=6), data=st.data())
def test_the_compiled_split_decodes_any_stream_as_the_pure_decoder(parts, data):
    stream = b"".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=5))
    assert _outcomes(stream, cuts, core.split_frame) == _outcomes(stream, cuts, None)


@needs_core
def test_the_split_reports_incomplete_frames_and_leaves_odd_ones_to_python():
    frame = encode(RemotingCommand(310, 7, 0, None, {"a": "b"}, b"body"))
    assert core.split_frame(bytearray(frame[:3]), 0, 4096) is None
    assert core.split_frame(bytearray(frame[:-1]), 0, 4096) is None
    found = core.split_frame(bytearray(b"xx" + frame), 2, 4096)
    assert found[0] == 2 + len(frame)
    assert found[-1] == b"body"
    assert core.split_frame(bytearray(b"\0\0\0\2ab"), 0, 4096) is False  # length below 4
    assert core.split_frame(bytearray(frame), 0, 8) is False  # over the frame limit
    assert core.split_frame(frame, 0, 4096) == core.split_frame(bytearray(frame), 0, 4096)
    with pytest.raises(TypeError):
        core.split_frame(memoryview(frame), 0, 4096)  # (a read is bytes; the buffer a bytearray)


def _reads(reads: list[bytes], compiled: bool) -> list:
    """Each read handed to ``lone_frame`` as a connection does, then the commands
    ``next_command`` gives: what a client connection makes of the reads."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_split_frame", core.split_frame if compiled else None)
        patch.setattr(codec, "_split_run", core.split_run if compiled else None)
        decoder = FrameDecoder(max_frame=4096)
        seen: list = []
        for read in reads:
            frame = decoder.lone_frame(read, requests=len(seen) % 2 == 0)
            try:
                if frame is not None:
                    seen.append(("lone", codec.command_of(frame)))
                else:
                    while (command := decoder.next_command()) is not None:
                        seen.append(("fed", command))
            except RemoteProtocolError as exc:
                return [*seen, ("raises", str(exc))]
            seen.append(("pending", decoder.pending))
        return seen


@needs_core
@settings(max_examples=300, deadline=None)
@given(parts=st.lists(frames(), min_size=1, max_size=5), data=st.data())
def test_a_lone_frame_is_the_frame_the_decoder_would_have_split(parts, data):
    # Read by read, the same commands as fed to the pure decoder (only their route differs:
    # a whole response alone in its read skips the buffer).
    stream = b"".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    bounds = [0, *cuts, len(stream)]
    reads = [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    compiled, pure = _reads(reads, True), _reads(reads, False)
    assert [(what if what == "raises" else None, value) for what, value in compiled] == [
        (what if what == "raises" else None, value) for what, value in pure]


@needs_core
def test_only_a_whole_frame_alone_in_its_read_skips_the_buffer():
    answer = encode(RemotingCommand(0, 7, 1, None, {"queueId": "3"}, b""))
    asked = encode(RemotingCommand(310, 8, 0, None, {}, b"body"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_split_frame", core.split_frame)
        for read, opaque in ((answer, 7), (asked, 8)):
            decoder = FrameDecoder()
            frame = decoder.lone_frame(read)
            assert frame is not None
            assert frame[2] == opaque
            assert decoder.pending == 0
        decoder = FrameDecoder()
        assert decoder.lone_frame(answer, requests=False)[2] == 7  # (an answer: always)
        for read, requests in ((asked, False), (answer + answer, True), (answer[:-1], True)):
            decoder = FrameDecoder()  # a request not wanted now, two answers, a part
            assert decoder.lone_frame(read, requests) is None
            assert decoder.pending == len(read)  # (fed, for next_frame)
            if read is asked:
                assert decoder.next_command().opaque == 8
        decoder = FrameDecoder()
        decoder.feed(answer[:5])  # (something buffered: the read continues it)
        assert decoder.lone_frame(answer[5:]) is None
        assert decoder.next_command().opaque == 7
        patch.setattr(codec, "_split_frame", None)  # the pure path feeds every read
        decoder = FrameDecoder()
        assert decoder.lone_frame(answer) is None
        assert decoder.next_command().opaque == 7


def test_the_codec_uses_the_compiled_split_when_built():
    from common import speedups
    assert (codec._split_frame is None) == (speedups.core is None)


# A stream of requests as a pipelining client sends them: mostly one code (the run's), some
# another, some responses, now and then a damaged frame.
RUN_CODE = 310
run_commands = st.builds(
    RemotingCommand,
    code=st.sampled_from([RUN_CODE, RUN_CODE, RUN_CODE, 10, -1, 2**40]),
    opaque=int32s,
    flag=st.sampled_from([0, 0, 1, 2, 3, -1]),
    remark=st.none(),
    ext_fields=st.dictionaries(st.sampled_from("abc"), st.text(max_size=8), max_size=3),
    body=st.binary(max_size=60),
    serialize_type=st.sampled_from(SerializeType),
)


@st.composite
def run_frames(draw) -> bytes:
    command = draw(run_commands)
    if command.code == 2**40:  # (a code only JSON carries)
        command = codec.replace(command, serialize_type=SerializeType.JSON)
    frame = bytearray(encode(command))
    if draw(st.integers(0, 9)) == 0:  # damaged on the way
        at = draw(st.integers(0, len(frame) - 1))
        frame[at] = draw(st.integers(0, 255))
    return bytes(frame)


def _runs(stream: bytes, cuts: list[int], limit: int, compiled: bool) -> list:
    """What a connection's read loop gets: each frame, and after a request of RUN_CODE the run
    that follows it (``next_run``), with the bytes each took."""
    def take(decoder: FrameDecoder, seen: list) -> None:
        while True:
            before = decoder.pending
            frame = decoder.next_frame()
            if frame is None:
                return
            seen.append(("frame", before - decoder.pending, _plain(frame)))
            if frame[1] == RUN_CODE and not frame[3] & 1:
                before = decoder.pending
                taken, sizes = decoder.next_run(RUN_CODE, limit)
                assert sum(sizes) == before - decoder.pending
                assert len(taken) == len(sizes) <= limit
                seen.append(("run", sizes, [_plain(f) for f in taken]))

    return _fed(stream, cuts, compiled, take)


def _plain(frame: tuple) -> tuple:
    return tuple((type(value), value) for value in frame)


@needs_core
@settings(max_examples=400, deadline=None)
@given(parts=st.lists(run_frames(), min_size=1, max_size=10), limit=st.integers(0, 5),
       data=st.data())
def test_runs_split_in_one_call_as_the_pure_decoder_splits_them(parts, limit, data):
    # The same frames, of the same sizes, in the same order, and the same end (an error, or
    # what is left pending): only where a run ends may differ (the compiled split stops at a
    # frame it leaves to the pure decoder, which the pure split takes into the run).
    stream = b"".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=4))
    compiled = _flat(_runs(stream, cuts, limit, True))
    assert compiled == _flat(_runs(stream, cuts, limit, False))
    # (and the frames are those of next_frame alone: a run changes only how they are taken)
    frames = [entry[2] for entry in compiled if entry[0] == "frame"]
    alone = [_plain(f) for f in _frames_alone(stream, cuts)]
    assert [f[1:] for f in frames] == [f[1:] for f in alone[:len(frames)]]


def _flat(seen: list) -> list:
    """Every frame taken, with its size, whether alone or in a run; the rest as it is."""
    flat = []
    for entry in seen:
        if entry[0] == "run":
            flat.extend(("frame", size, frame) for size, frame in zip(entry[1], entry[2],
                                                                       strict=True))
        else:
            flat.append(entry)
    return flat


def _frames_alone(stream: bytes, cuts: list[int]) -> list[tuple]:
    decoder = FrameDecoder(max_frame=4096)
    found = []
    previous = 0
    for cut in [*sorted(cuts), len(stream)]:
        decoder.feed(stream[previous:cut])
        previous = cut
        try:
            while (frame := decoder.next_frame()) is not None:
                found.append(frame)
        except RemoteProtocolError:
            break
    return found


@needs_core
def test_a_run_stops_before_what_it_does_not_take():
    def frame(code, flag=0, body=b"b"):
        return encode(RemotingCommand(code, 1, flag, None, {"a": "b"}, body))

    run = frame(RUN_CODE) + frame(RUN_CODE)
    for tail, held in ((frame(10), 10), (frame(RUN_CODE, flag=1), RUN_CODE),
                       (frame(RUN_CODE)[:-1], None), (b"\0\0\0\2ab", None)):
        buffer = bytearray(run + tail)
        taken, stop = core.split_run(buffer, 0, 4096, RUN_CODE, 5)
        assert [f[0] for f in taken] == [len(frame(RUN_CODE)), len(run)]
        # (the frame it stopped at, split whole, comes back to be taken next)
        assert (stop if stop is None else stop[1]) == held
        if stop is not None:
            assert stop == core.split_frame(buffer, len(run), 4096)
    taken, stop = core.split_run(bytearray(run), 0, 4096, RUN_CODE, 1)
    assert [f[0] for f in taken] == [len(frame(RUN_CODE))]
    assert stop is None
    assert core.split_run(bytearray(run), 0, 4096, RUN_CODE, 0) == ([], None)
    taken, stop = core.split_run(bytearray(run), 0, 4096, 10, 5)
    assert taken == []
    assert stop[0] == len(frame(RUN_CODE))
    with pytest.raises(TypeError):
        core.split_run(bytes(run), 0, 4096, RUN_CODE, 5)


def test_the_frame_a_run_stopped_at_is_split_again_once_the_buffer_moves(header_codec):
    # A run stopped at a frame of another code, held for next_frame; more bytes arrive first
    # (the buffer is compacted, moving the frame): next_frame splits it afresh, whole.
    def frame(code, opaque):
        return encode(RemotingCommand(code, opaque, 0, None, {"a": "b"}, b"x" * 40))

    decoder = FrameDecoder()
    decoder.feed(frame(RUN_CODE, 1) + frame(RUN_CODE, 2) + frame(10, 3))
    first = decoder.next_frame()
    assert first[2] == 1
    taken, sizes = decoder.next_run(RUN_CODE, 5)
    assert [f[2] for f in taken] == [2]
    assert sizes == [len(frame(RUN_CODE, 2))]
    assert decoder.next_run(RUN_CODE, 5) == ([], [])  # (the held frame ends any run)
    decoder.feed(frame(RUN_CODE, 4))  # (compacts: the first two frames are more than half)
    held = decoder.next_frame()
    assert (held[1], held[2]) == (10, 3)
    assert decoder.next_command().opaque == 4
    assert decoder.pending == 0


def test_a_held_frame_is_taken_by_next_command_too(header_codec):
    def frame(code, opaque):
        return encode(RemotingCommand(code, opaque, 0, None, {}, b"y"))

    decoder = FrameDecoder()
    decoder.feed(frame(RUN_CODE, 1) + frame(RUN_CODE, 2) + frame(10, 3) + frame(10, 4))
    decoder.next_frame()
    decoder.next_run(RUN_CODE, 5)
    assert [decoder.next_command().opaque, decoder.next_command().opaque] == [3, 4]
    assert decoder.next_command() is None
    assert decoder.pending == 0


@needs_core
def test_a_run_split_either_way_gives_the_same_frames_where_the_compiled_split_defers():
    # "opaque":12.456 is left to the pure decoder by the compiled split, so the compiled run
    # stops before it and the pure run takes it: the frames and their sizes are the same.
    one = encode(RemotingCommand(RUN_CODE, 123456, 0, None, {}, b"x",
                                 serialize_type=SerializeType.JSON))
    odd = bytearray(one)
    odd[odd.index(b"123456") + 2] = ord(".")
    stream = one + bytes(odd) + one
    compiled, pure = _runs(stream, [], 5, True), _runs(stream, [], 5, False)
    assert compiled != pure  # (the runs end at different frames)
    assert _flat(compiled) == _flat(pure)
    assert len(_flat(pure)) == 4  # (three frames, then nothing pending)
