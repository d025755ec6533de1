"""Properties strings and Java String.hashCode (storage/message.py), reference §4.3 and §4.7."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage.message import (
    java_hash,
    java_hash_unsigned,
    properties_to_string,
    property_from_string,
    string_to_properties,
    tags_string_to_tags_code,
)


def java_hash_model(text: str) -> int:
    """Java's String.hashCode written out: h = 31*h + c over UTF-16 code units, int overflow."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) % 2**32
    return h - 2**32 if h >= 2**31 else h


_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")
_names = st.text(_chars, min_size=1, max_size=15)
_values = st.text(_chars, min_size=1, max_size=30)


# --- properties string ----------------------------------------------------------------------------
def test_properties_string_terminates_every_pair_with_the_property_separator():
    text = properties_to_string({"TAGS": "a", "KEYS": "k1 k2", "WAIT": None})
    assert text == "TAGS\x01a\x02KEYS\x01k1 k2\x02"


@settings(max_examples=300)
@given(st.dictionaries(_names, _values, max_size=8))
def test_properties_string_round_trips_any_map_of_non_empty_names_and_values(props):
    text = properties_to_string(props)
    assert text.count("\x02") == len(props)
    assert string_to_properties(text) == props
    for name, value in props.items():
        assert property_from_string(text, name) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A\x011\x02B\x012\x02", {"A": "1", "B": "2"}),
        ("A\x011\x02B\x012", {"A": "1", "B": "2"}),  # the last separator may be missing
        ("junk\x02A\x011\x02", {"A": "1"}),  # no NAME_VALUE_SEPARATOR
        ("\x01v\x02A\x011\x02", {"A": "1"}),  # empty name
        ("E\x01\x02A\x011\x02", {"A": "1"}),  # empty value
        ("\x02\x02A\x011\x02\x02", {"A": "1"}),  # empty segments
        ("A\x01x\x01y\x02", {"A": "x\x01y"}),  # the first \x01 splits name from value
        ("A\x011\x02A\x012\x02", {"A": "2"}),  # later duplicates overwrite earlier ones
        ("", {}),
    ],
)
def test_properties_parse_skips_segments_rocketmq_skips(text, expected):
    assert string_to_properties(text) == expected


# A properties string made of arbitrary segments whose names (text before the first \x01) are
# distinct: junk without \x01, empty names, empty values, values holding \x01, names that are
# prefixes of other names, with or without the final \x02.
_segment = st.tuples(
    st.text("AB", max_size=2), st.booleans(), st.text("AB\x01x", max_size=4)
)


@st.composite
def _properties_strings(draw):
    segments = draw(st.lists(_segment, max_size=6, unique_by=lambda s: s[0] if s[1] else object()))
    parts = [name + ("\x01" + value if has_sep else value.replace("\x01", ""))
             for name, has_sep, value in segments]
    return "\x02".join(parts) + draw(st.sampled_from(["", "\x02"]))


@settings(max_examples=500)
@given(_properties_strings(), st.sampled_from(["A", "B", "AB", "BA", "AA", "x", "C"]))
@example("B\x01A\x01x\x02", "A")  # "A\x01" inside a value is not a property
@example("AA\x01x\x02", "A")
def test_property_from_string_agrees_with_string_to_properties(text, name):
    assert property_from_string(text, name) == string_to_properties(text).get(name)


# BUG (storage/message.py property_from_string): it answers the FIRST segment named `name`, while
# string_to_properties (and RocketMQ, reference §4.3) lets later duplicates overwrite earlier ones
# and skips empty values. The put/dispatch paths read TAGS/KEYS/UNIQ_KEY through it, so the
# stored tagsCode and index keys can disagree with what consumers parse.
@pytest.mark.parametrize(
    ("text", "expected"),
    [("TAGS\x01old\x02TAGS\x01new\x02", "new"), ("TAGS\x01\x02TAGS\x01new\x02", "new")],
    ids=["later-duplicate", "empty-then-value"],
)
def test_property_from_string_takes_the_value_the_parser_keeps_for_duplicates(text, expected):
    assert string_to_properties(text)["TAGS"] == expected
    assert property_from_string(text, "TAGS") == expected


# --- Java String.hashCode -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [("a", 97), ("TagA", 2598919), ("", 0), ("polygenelubricants", -(2**31)),
     ("\u00e9", 0xE9), ("\U0001f600", 31 * 0xD83D + 0xDE00)],
)
def test_java_hash_matches_known_values(text, expected):
    assert java_hash(text) == expected
    assert java_hash_model(text) == expected


@settings(max_examples=500)
@given(st.text(max_size=80))
@example("\U0001d11e\U0001f600x")  # non-BMP characters hash as two surrogate units each
@example("\u4e2d\u6587 caf\u00e9")
def test_java_hash_matches_string_hashcode_over_utf16_code_units(text):
    assert java_hash(text) == java_hash_model(text)
    assert -(2**31) <= java_hash(text) < 2**31
    assert java_hash_unsigned(text) == java_hash(text) % 2**32


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1025, max_size=3000))
def test_java_hash_of_text_longer_than_the_coefficient_cache_is_still_exact(text):
    assert java_hash(text) == java_hash_model(text)


def test_java_hash_of_long_ascii_text_is_exact():
    text = "topic-" * 400
    assert java_hash(text) == java_hash_model(text)


@settings(max_examples=300)
@given(st.text(max_size=40), st.text(max_size=40))
def test_java_hash_continues_from_a_prefix_seed(prefix, rest):
    assert java_hash_unsigned(rest, java_hash_unsigned(prefix)) == java_hash_unsigned(prefix + rest)


# --- tagsCode ---------------------------------------------------------------------------------------
def test_tags_code_of_no_tags_is_zero():
    assert tags_string_to_tags_code(None) == 0
    assert tags_string_to_tags_code("") == 0


@pytest.mark.parametrize("tags", ["TagA", "a", "polygenelubricants", "\u6807\u7b7e\U0001f600"])
def test_tags_code_is_the_signed_java_hash_of_the_tag(tags):
    assert tags_string_to_tags_code(tags) == java_hash_model(tags)


@pytest.mark.parametrize(("text", "number"), [
    ("1700000000000", 1_700_000_000_000), (" 42 ", 42), ("9" * 18, int("9" * 18)),
    ("9" * 19, None), ("\u00b2", None), ("\u0663", None), ("-5", None), ("", None), (None, None),
    ("1e3", None),
])
def test_a_timer_property_is_a_number_as_the_broker_reads_it(text, number):
    from storage.message import timer_number

    assert timer_number(text) == number


@pytest.mark.parametrize("ms", [2**63 - 1, 253_402_300_800_000, 10**17])
def test_a_time_no_date_holds_is_shown_as_its_number(ms):
    """A born time is any int64 its producer sent; the console and the command line showed
    it through datetime, which raised past the year 9999."""
    from rocketdesk.cli_admin import _fmt_ms
    from storage.inspector import format_timestamp

    assert format_timestamp(ms) == f"{ms} ms"
    assert _fmt_ms(ms) == f"{ms} ms"
    assert format_timestamp(1_700_000_000_000).startswith("2023-11-1")
