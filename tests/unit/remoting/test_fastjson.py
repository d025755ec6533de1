"""fastjson's dialect: bare integer keys read and written; text that is not JSON refused fast."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.remoting import fastjson


@pytest.mark.parametrize(("text", "expected"), [
    ('{0:"a",-1:2}', '{"0":"a","-1":2}'),
    ('{ 0 :{1:[2,3]},\n7\t: 4}', '{ "0" :{"1":[2,3]},\n"7"\t: 4}'),
    ('{"k":"{1:2}","j":",3:"}', '{"k":"{1:2}","j":",3:"}'),  # strings are never touched
    ('{"a\\"{1:":1,2:3}', '{"a\\"{1:":1,"2":3}'),  # an escaped quote does not end a string
    ('[1,2,3]', '[1,2,3]'),  # numbers that are not keys
    ('{"open:{1:', '{"open:{1:'),  # an unterminated string runs to the end
])
def test_bare_numeric_keys_are_quoted_outside_strings_only(text, expected):
    assert fastjson.quote_numeric_keys(text) == expected


def test_the_legacy_dialect_reads_back():
    table = {"offsetTable": {"TopicTest@cg": {0: 250, 1: 251}}, "brokerAddrs": {0: "h:1"}}
    text = fastjson.dumps_legacy(table)
    assert text == '{"offsetTable":{"TopicTest@cg":{0:250,1:251}},"brokerAddrs":{0:"h:1"}}'
    assert fastjson.loads(text) == json.loads(json.dumps(table))


def test_text_that_is_not_json_and_has_no_bare_key_is_refused_without_the_slow_path(
        monkeypatch):
    # A 15 MiB body that does not parse was walked character by character in Python (2.5 s,
    # 330 MB) to quote keys it could not have.
    walked = []
    real = fastjson.quote_numeric_keys
    monkeypatch.setattr(fastjson, "quote_numeric_keys",
                        lambda text: walked.append(text) or real(text))
    broken = '{"k":[' + ",".join(f'"v{n}"' for n in range(10_000)) + "]"  # (no closing brace)
    with pytest.raises(ValueError, match="delimiter"):
        fastjson.loads(broken)
    with pytest.raises(ValueError, match="property name"):
        fastjson.loads(b"\x7b" * 1000)
    assert walked == []
    # A text that may hold one still takes it.
    assert fastjson.loads("{1:2}") == {"1": 2}
    assert walked == ["{1:2}"]


def test_the_key_check_is_linear_on_texts_made_to_make_it_backtrack():
    # Long runs of what a key is made of, never followed by ":": one pass each.
    for text in ("{" + " " * 200_000 + "x", "," + "9" * 200_000 + " " * 200_000,
                 ",-" * 100_000, "{1" * 100_000):
        with pytest.raises(ValueError, match="Expecting"):
            fastjson.loads(text)


_KEYS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='{},:"\\ 0123abc'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4)
    | st.dictionaries(st.text(alphabet='{},:"\\ 0123abc', max_size=6), inner, max_size=4),
    max_leaves=20)


@given(_VALUES)
def test_whatever_dumps_legacy_writes_loads_reads_as_json_would(value):
    assert fastjson.loads(fastjson.dumps_legacy(value)) == json.loads(json.dumps(value))
