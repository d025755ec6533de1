"""Frames filled from a template are the frames the codec encodes (issue 14).

Run on both header codecs: a template is cut from what the selected codec writes, and what it
fills must equal what either codec writes for the same command.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.remoting import codec
from cluster.remoting.codec import (
    RESPONSE_FLAG,
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    encode,
    request,
)
from cluster.remoting.codes import CURRENT_VERSION
from cluster.remoting.connection import RemotingConnection
from cluster.remoting.errors import LocalProtocolError
from cluster.remoting.frame_template import FrameTemplate, SendAnswerTemplate
from tests.unit.remoting.transports import RecordingTransport

# Whatever a field may hold: JSON's escapes, '%' (the template is a %-format), non-ASCII,
# lone surrogates (written as '?'), the template's own marker character.
texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40) | \
    st.sampled_from(["", "%", "%s%d%%", "\x7f0\x7f", "\x01\x02", '"\\', "\ud800", "1987654321"])
opaques = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _reference(code, opaque, flag, fields, body, version=CURRENT_VERSION) -> bytes:
    return encode(RemotingCommand(code, opaque, flag, None, fields, body, "JAVA", version,
                                  SerializeType.JSON))


@settings(max_examples=300, deadline=None)
@given(fixed=texts, values=st.lists(texts, min_size=3, max_size=3), opaque=opaques,
       body=st.binary(max_size=64), flag=st.sampled_from([0, RESPONSE_FLAG, 2]))
def test_a_filled_frame_is_the_encoded_frame(header_codec, fixed, values, opaque, body, flag):
    template = FrameTemplate(310, {"a": "group", "e": None, "fixed": fixed, "g": None,
                                   "i": None}, flag=flag)
    assert template.variables == ("e", "g", "i")
    fields = {"a": "group", "e": values[0], "fixed": fixed, "g": values[1], "i": values[2]}
    filled = template.frame(opaque, values, body)
    assert filled == _reference(310, opaque, flag, fields, body)
    for implementation in filter(None, (codec.COMPILED, codec.PURE)):  # and both codecs read it
        decoder = FrameDecoder()
        decoder.feed(filled)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(codec, "_decode_json", implementation.decode_json)
            patch.setattr(codec, "_split_frame", None)  # the header decoder under test
            command = decoder.next_command()
        assert command.opaque == opaque
        assert command.body == body
        assert command.ext_fields["e"] == values[0].encode("utf-8", "replace").decode()


@settings(max_examples=200, deadline=None)
@given(opaque=opaques, region=texts, trace_on=st.booleans(),
       msg_id=st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=65),
       queue_id=st.integers(0, 4095), offset=st.integers(0, 2**63 - 1))
def test_the_send_answer_is_make_response_encoded(header_codec, opaque, region, trace_on, msg_id,
                                                  queue_id, offset):
    answers = SendAnswerTemplate()
    filled = answers.frame(opaque, region, "true" if trace_on else "false", msg_id, queue_id,
                           offset)
    fields = {"msgId": msg_id, "queueId": queue_id, "queueOffset": offset, "MSG_REGION": region,
              "TRACE_ON": trace_on, "transactionId": None}
    sent = RemotingCommand(310, opaque)
    assert filled == encode(sent.make_response(0, ext_fields=fields))


@settings(max_examples=100, deadline=None)
@given(region=texts, trace_on=st.sampled_from(["true", "false"]),
       answers=st.lists(st.tuples(opaques, st.text(alphabet="0123456789ABCDEF", min_size=32,
                                                   max_size=32),
                                  st.integers(0, 4095), st.integers(0, 2**63 - 1)),
                        max_size=6))
def test_a_run_of_send_answers_is_each_one_framed(region, trace_on, answers):
    template = SendAnswerTemplate()
    assert template.frames(region, trace_on, answers) == [
        SendAnswerTemplate().frame(opaque, region, trace_on, msg_id, queue_id, offset)
        for opaque, msg_id, queue_id, offset in answers]


def test_the_send_answer_follows_a_config_change():
    answers = SendAnswerTemplate()
    first = answers.frame(1, "DefaultRegion", "true", "AB" * 16, 0, 0)
    changed = answers.frame(1, "east", "false", "AB" * 16, 0, 0)
    assert b'"MSG_REGION":"DefaultRegion","TRACE_ON":"true"' in first
    assert b'"MSG_REGION":"east","TRACE_ON":"false"' in changed


def test_a_frame_over_the_limit_is_refused_before_it_is_written():
    template = FrameTemplate(310, {"i": None})
    with pytest.raises(LocalProtocolError, match="exceeds"):
        template.frame(1, ["x"], b"\0" * codec.FRAME_MAX)


def test_a_processor_may_answer_with_an_encoded_frame():
    answers = SendAnswerTemplate()

    async def scenario():
        def handler(connection, command):
            return answers.frame(command.opaque, "r", "true", "CD" * 16, 1, 7)

        connection = RemotingConnection(handler)
        transport = RecordingTransport()
        connection.connection_made(transport)
        oneway = request(310, {}, oneway=True)
        connection.data_received(encode(request(310, {}, opaque=5))
                                 + encode(RemotingCommand(310, 6, oneway.flag)))
        await asyncio.sleep(0)
        return transport.writes

    writes = asyncio.run(scenario())
    decoder = FrameDecoder()
    decoder.feed(b"".join(writes))
    answer = decoder.next_command()
    assert (answer.opaque, answer.is_response, answer.ext_fields["queueOffset"]) == (5, True, "7")
    assert decoder.next_command() is None  # the oneway request gets nothing back


def _pure_frames(region, trace_on, answers):
    from cluster.remoting import frame_template
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frame_template, "_send_answers", None)
        return SendAnswerTemplate().frames(region, trace_on, answers)


@pytest.mark.skipif(codec.COMPILED is None, reason="the compiled core is not built")
@settings(max_examples=300, deadline=None)
@given(region=texts, trace_on=st.sampled_from(["true", "false"]),
       answers=st.lists(st.tuples(
           opaques,
           st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32) | texts,
           st.integers(0, 4095) | st.integers() | st.booleans(),
           st.integers(0, 2**63 - 1) | st.integers(-(2**70), 2**70)), max_size=6))
def test_the_compiled_fill_of_a_run_of_send_answers_is_the_pure_one(region, trace_on, answers):
    # Byte for byte, or it leaves the run to the pure loop (a msgId that is not ASCII, a bool,
    # a number past 64 bits): either way what goes out is the pure loop's.
    from cluster.remoting import frame_template
    from common import speedups
    template = SendAnswerTemplate()
    expected = _pure_frames(region, trace_on, answers)
    assert template.frames(region, trace_on, answers) == expected
    filled = speedups.core.send_answers(template._pieces, answers, codec.FRAME_MAX) \
        if template._pieces is not None else None
    assert filled is None or filled == expected
    assert frame_template._send_answers is speedups.core.send_answers


@pytest.mark.skipif(codec.COMPILED is None, reason="the compiled core is not built")
def test_the_compiled_fill_takes_the_common_answers_and_leaves_odd_ones():
    from common import speedups
    template = SendAnswerTemplate()
    common = [(7, "AB" * 16, 3, 99), (-8, "CD" * 16, 0, 2**63 - 1)]
    template.frames("DefaultRegion", "true", common)
    fill = speedups.core.send_answers
    assert fill(template._pieces, common, codec.FRAME_MAX) == _pure_frames(
        "DefaultRegion", "true", common)
    for odd in [(7, "é" * 32, 3, 99), (7, "AB" * 16, True, 99), (7, "AB" * 16, 3, 2**64),
                (7, "AB" * 16, 3)]:
        assert fill(template._pieces, [*common, odd], codec.FRAME_MAX) is None
    assert fill(template._pieces, common, 100) is None  # (over the frame limit: the loop says)

    class Text(str):
        def __str__(self):
            return "other"

    class Answer(tuple):
        pass

    # (a subclass may print or unpack otherwise than its text and items: the loop decides)
    assert fill(template._pieces, [(7, Text("AB" * 16), 3, 99)], codec.FRAME_MAX) is None
    assert fill(template._pieces, [Answer((7, "AB" * 16, 3, 99))], codec.FRAME_MAX) is None


@pytest.mark.skipif(codec.COMPILED is None, reason="the compiled core is not built")
def test_the_compiled_fill_refuses_a_frame_exactly_where_the_loop_does():
    from common import speedups
    template = SendAnswerTemplate()
    answer = [(7, "AB" * 16, 3, 99)]
    (frame,) = template.frames("DefaultRegion", "true", answer)
    size = len(frame) - 8  # the header's
    fill = speedups.core.send_answers
    assert fill(template._pieces, answer, 4 + size) == [frame]
    assert fill(template._pieces, answer, 3 + size) is None


def _pure_frame(template, opaque, values, body):
    from cluster.remoting import frame_template
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frame_template, "_fill_frame", None)
        return template.frame(opaque, values, body)


plain_values = texts | st.integers(-(2**70), 2**70) | st.booleans() | st.none() | \
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**63, "0123ABCD"])


@pytest.mark.skipif(codec.COMPILED is None, reason="the compiled core is not built")
@settings(max_examples=400, deadline=None)
@given(fixed=texts, quoted=st.lists(texts | st.integers() | st.none(), min_size=2, max_size=2),
       plain=st.lists(plain_values, min_size=2, max_size=2), opaque=opaques,
       body=st.binary(max_size=64))
def test_the_compiled_fill_of_a_template_is_the_pure_one(fixed, quoted, plain, opaque, body):
    # A request's frame (a send's: plain numbers and quoted text in the header's order), byte
    # for byte, or left to the Python way (a value of another type), which raises or writes.
    from common import speedups
    template = FrameTemplate(310, {"b": None, "fixed": fixed, "e": None, "g": None,
                                   "i": None}, plain=frozenset({"e", "g"}))
    values = (quoted[0], plain[0], plain[1], quoted[1])
    try:
        expected = _pure_frame(template, opaque, values, body)
    except (TypeError, ValueError):
        expected = None
    filled = speedups.core.fill_frame(template._pieces, template._order, template._plain_bytes,
                                      opaque, values, body, codec.FRAME_MAX)
    assert filled is None or filled == expected
    if expected is not None:
        assert template.frame(opaque, values, body) == expected
    if all(type(v) is str for v in quoted) and all(
            type(v) is str or (type(v) is int and -(2**63) <= v < 2**63) for v in plain):
        assert filled == expected  # (the common values: the compiled fill takes them)


@pytest.mark.skipif(codec.COMPILED is None, reason="the compiled core is not built")
def test_the_compiled_fill_leaves_odd_calls_to_the_python_way():
    from common import speedups
    template = FrameTemplate(310, {"a": "g", "e": None, "i": None}, plain=frozenset({"e"}))
    fill = speedups.core.fill_frame
    args = (template._pieces, template._order, template._plain_bytes)
    framed = fill(*args, 7, (3, "x"), b"body", codec.FRAME_MAX)
    assert framed == _pure_frame(template, 7, (3, "x"), b"body")
    assert fill(*args, 7, [3, "x"], b"body", codec.FRAME_MAX) == framed  # (a list, as well)
    for values in [(3,), (3, "x", "y"), (True, "x"), (3, 4), (3.0, "x")]:
        assert fill(*args, 7, values, b"", codec.FRAME_MAX) is None
    assert fill(*args, True, (3, "x"), b"", codec.FRAME_MAX) is None  # (an opaque that is a bool)

    class Text(str):
        pass

    assert fill(*args, 7, (3, Text("x")), b"", codec.FRAME_MAX) is None
    size = len(framed) - 4  # (the length prefix counts the rest)
    assert fill(*args, 7, (3, "x"), b"body", size) == framed
    assert fill(*args, 7, (3, "x"), b"body", size - 1) is None
    with pytest.raises(LocalProtocolError, match="exceeds"):  # (the Python way words it)
        template.frame(7, (3, "x"), b"\0" * codec.FRAME_MAX)


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_a_body_of_another_bytes_like_kind_is_framed_as_its_bytes(kind):
    # A message body may be a bytearray or a memoryview (the producer passes it as it is): the
    # compiled fill leaves it to the Python way, which joins it, never a TypeError.
    from cluster.remoting.frame_template import RequestTemplate
    template = RequestTemplate(310, {"a": "g", "e": None}, plain=frozenset({"e"}))
    expected = template.prepare((3,), b"body").frame(7)
    assert template.prepare((3,), kind(b"body")).frame(7) == expected
    assert template.frame(7, (3,), kind(b"body"), False) == expected
    if codec.COMPILED is not None:
        from common import speedups
        assert speedups.core.fill_frame(template._twoway._pieces, template._twoway._order,
                                        template._twoway._plain_bytes, 7, (3,),
                                        kind(b"body"), codec.FRAME_MAX) is None
