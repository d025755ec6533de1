"""Typed request headers: Java's parse rules, ranges, presence, and nothing but HeaderError."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.remoting.body import JsonBody
from cluster.remoting.codec import request
from cluster.remoting.codes import ResponseCode
from cluster.remoting.header import HeaderError, RequestHeader, boolean, checked, int32, int64, text


class Sample(RequestHeader):
    error_code = ResponseCode.MESSAGE_ILLEGAL
    topic: str = text("topic", max_length=8, error_code=ResponseCode.SYSTEM_ERROR)
    queue_id: int = int32("queueId", minimum=0)
    offset: int = int64("offset", default=-1)
    flag: int = int32("flag", default=0)
    batch: bool = boolean("batch")
    aliases = {"h": "flag"}
    alias_codes = (310,)


def decode(**fields):
    return Sample.decode({k: str(v) for k, v in fields.items()})


def test_values_arrive_typed_with_defaults():
    header = decode(topic="t", queueId=3)
    assert (header.topic, header.queue_id, header.offset, header.flag) == ("t", 3, -1, 0)
    assert header.batch is False
    assert decode(topic="t", queueId="+7", batch="TRUE").queue_id == 7
    assert decode(topic="t", queueId=0, batch="TRUE").batch is True
    assert decode(topic="t", queueId=0, offset=2**63 - 1).offset == 2**63 - 1


def test_the_flag_that_stopped_every_write_is_refused_with_a_sentence():
    with pytest.raises(HeaderError) as caught:
        Sample.of(request(310, {"topic": "t", "queueId": 0, "h": 8589934592}))
    assert caught.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    assert "flag" in str(caught.value)
    assert "does not fit an int" in str(caught.value)
    assert "format requires" not in str(caught.value)
    # The alias applies only to the codes that use it.
    assert Sample.of(request(10, {"topic": "t", "queueId": 0, "h": 8589934592})).flag == 0


@pytest.mark.parametrize(("fields", "words", "code"), [
    ({"queueId": 0}, "topic is missing", ResponseCode.SYSTEM_ERROR),
    ({"topic": "", "queueId": 0}, "topic is missing", ResponseCode.SYSTEM_ERROR),
    ({"topic": "t"}, "queueId is missing", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": -1}, "outside 0..", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": 2**31}, "does not fit an int", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": "1.0"}, "not an integer", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": "1_000"}, "not an integer", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": " 1"}, "not an integer", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": "\u0661"}, "not an integer", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t", "queueId": 0, "offset": 2**63}, "does not fit a long", ResponseCode.MESSAGE_ILLEGAL),
    ({"topic": "t" * 9, "queueId": 0}, "the limit is 8", ResponseCode.SYSTEM_ERROR),
])
def test_bad_fields_are_named(fields, words, code):
    with pytest.raises(HeaderError) as caught:
        decode(**fields)
    assert words in str(caught.value)
    assert caught.value.response_code == code


@given(st.dictionaries(st.sampled_from(["topic", "queueId", "offset", "flag", "batch", "h", "x"]),
                       st.text(max_size=30) | st.integers().map(str)))
def test_any_strings_decode_or_raise_header_error(fields):
    try:
        header = Sample.of(request(310, fields))
    except HeaderError as exc:
        message = str(exc)
        assert message.startswith("the request header field")
        return
    assert 0 <= header.queue_id < 2**31
    assert -(2**31) <= header.flag < 2**31


def test_checked_answers_a_bad_header_without_running_the_processor():
    ran = []

    class Processor:
        @checked(Sample)
        async def process(self, connection, command, header):
            ran.append(header)
            return command.make_response(ResponseCode.SUCCESS)

    bad = asyncio.run(Processor().process(None, request(310, {"topic": "t", "queueId": "x"})))
    assert bad.code == ResponseCode.MESSAGE_ILLEGAL
    assert "queueId" in bad.remark
    assert not ran
    good = asyncio.run(Processor().process(None, request(310, {"topic": "t", "queueId": "1"})))
    assert good.code == ResponseCode.SUCCESS
    assert ran[0].queue_id == 1


@pytest.mark.parametrize(("body", "words"), [
    (b"[1]", "not a JSON object"),
    (b"{", "does not parse"),
    (b'{"n": "12x"}', "not an integer"),
    (b'{"n": 1e12}', "outside"),
    (b'{"n": true}', "boolean where a number goes"),
    (b'{"n": 1.5}', "not an integer"),
    (b'{"b": "no"}', "not a boolean"),
    (b'{"s": {"a": 1}}', "not a string"),
    (b'{"o": []}', "not a JSON object"),
    (b'{"l": {}}', "not a JSON array"),
])
def test_json_bodies_are_checked(body, words):
    def read(parsed):
        parsed.integer("n", 0)
        parsed.boolean("b", True)
        parsed.text("s", "")
        parsed.obj("o")
        parsed.items("l")

    with pytest.raises(HeaderError, match=words):
        read(JsonBody.parse(body, "sample"))


def test_json_body_values_bind_as_fastjson_does():
    body = JsonBody.parse(b'{"n":"12","b":"false","c":0,"s":5}', "sample")
    assert body.integer("n") == 12
    assert body.boolean("b") is False  # not bool("false")
    assert body.boolean("c") is False
    assert body.text("s") == "5"
    assert body.integer("absent", 7) == 7


@pytest.mark.parametrize("digits", ["9" * 5000, "-" + "9" * 5000, "0" * 5000 + "7"])
def test_thousands_of_digits_are_out_of_range_not_a_python_limit(digits):
    # Python refuses to convert strings over 4,300 digits with a message about
    # sys.set_int_max_str_digits; Java just says the number is out of range.
    fields = {"topic": "t", "queueId": "0", "offset": digits}
    if digits.startswith("0"):
        assert Sample.decode(fields).offset == 7
        return
    with pytest.raises(HeaderError, match="does not fit a long"):
        Sample.decode(fields)
    with pytest.raises(HeaderError, match="outside"):
        JsonBody({"n": digits}, "body").integer("n", bits=64)


@pytest.mark.parametrize(("body", "words"), [
    (b"[" * 100_000, "nests too deeply"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"a":1', "at character"),
])
def test_unparsable_bodies_get_our_sentence(body, words):
    with pytest.raises(HeaderError, match=words) as caught:
        JsonBody.parse(body, "sample")
    assert "recursion" not in str(caught.value)
