"""FrameDecoder with the compiled split (common/_speedups.c split_frame) against the pure one:
the same commands, in the same order, from any byte stream cut anywhere, and the same error
where the stream is out of sync (issue 14)."""

from __future__ import annotations

import importlib

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


def _outcomes(stream: bytes, cuts: list[int], split) -> list:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_split_frame", split)
        patch.setattr(codec, "_split_run", None if split is None else core.split_run)
        if split is None:  # the reference: the pure header decoders too
            for name, function in codec.PURE._asdict().items():
                patch.setattr(codec, f"_{name}", function)
        decoder = FrameDecoder(max_frame=4096)
        seen: list = []
        previous = 0
        for cut in [*sorted(cuts), len(stream)]:
            decoder.feed(stream[previous:cut])
            previous = cut
            try:
                while (command := decoder.next_command()) is not None:
                    seen.append(tuple((type(v), v) for v in (
                        command.code, command.opaque, command.flag, command.remark,
                        command.ext_fields, command.body, command.language, command.version,
                        command.serialize_type)))
            except RemoteProtocolError as exc:
                return [*seen, ("raises", str(exc))]
            seen.append(("pending", decoder.pending))
        return seen


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
    with pytest.raises(TypeError):
        core.split_frame(frame, 0, 4096)  # bytes: the decoder's buffer is a bytearray


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
    with pytest.MonkeyPatch.context() as patch:
        if not compiled:
            patch.setattr(codec, "_split_frame", None)
            patch.setattr(codec, "_split_run", None)
            for name, function in codec.PURE._asdict().items():
                patch.setattr(codec, f"_{name}", function)
        decoder = FrameDecoder(max_frame=4096)
        seen: list = []
        previous = 0
        for cut in [*sorted(cuts), len(stream)]:
            decoder.feed(stream[previous:cut])
            previous = cut
            try:
                while True:
                    before = decoder.pending
                    frame = decoder.next_frame()
                    if frame is None:
                        break
                    seen.append(("frame", before - decoder.pending, _plain(frame)))
                    if frame[1] == RUN_CODE and not frame[3] & 1:
                        before = decoder.pending
                        taken, sizes = decoder.next_run(RUN_CODE, limit)
                        assert sum(sizes) == before - decoder.pending
                        assert len(taken) == len(sizes) <= limit
                        seen.append(("run", sizes, [_plain(f) for f in taken]))
            except RemoteProtocolError as exc:
                return [*seen, ("raises", str(exc))]
            seen.append(("pending", decoder.pending))
        return seen


def _plain(frame: tuple) -> tuple:
    return tuple((type(value), value) for value in frame)


@needs_core
@settings(max_examples=400, deadline=None)
@given(parts=st.lists(run_frames(), min_size=1, max_size=10), limit=st.integers(0, 5),
       data=st.data())
def test_runs_split_in_one_call_as_the_pure_decoder_splits_them(parts, limit, data):
    stream = b"".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=4))
    compiled = _runs(stream, cuts, limit, True)
    assert compiled == _runs(stream, cuts, limit, False)
    # (and the frames are those of next_frame alone: a run changes only how they are taken)
    frames = [entry for kind, *rest in compiled if kind in ("frame", "run")
              for entry in (rest[1] if kind == "run" else [rest[1]])]
    alone = [_plain(f) for f in _frames_alone(stream, cuts)]
    assert [f[1:] for f in frames] == [f[1:] for f in alone[:len(frames)]]


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
    for tail in (frame(10), frame(RUN_CODE, flag=1), frame(RUN_CODE)[:-1], b"\0\0\0\2ab"):
        buffer = bytearray(run + tail)
        taken = core.split_run(buffer, 0, 4096, RUN_CODE, 5)
        assert [f[0] for f in taken] == [len(frame(RUN_CODE)), len(run)]
    assert core.split_run(bytearray(run), 0, 4096, RUN_CODE, 1)[0][0] == len(frame(RUN_CODE))
    assert core.split_run(bytearray(run), 0, 4096, RUN_CODE, 0) == []
    assert core.split_run(bytearray(run), 0, 4096, 10, 5) == []
    with pytest.raises(TypeError):
        core.split_run(bytes(run), 0, 4096, RUN_CODE, 5)
