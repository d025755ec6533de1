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
