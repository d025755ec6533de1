"""Java's String.hashCode: the compiled core (common/_speedups.c) against the pure reference
(storage.message.java_hash_unsigned_pure), values and errors alike."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from common import speedups
from storage import message

try:
    core = importlib.import_module("common._speedups")
except ImportError:
    core = None
pytestmark = pytest.mark.skipif(core is None, reason="the compiled core is not built")

_chars = st.one_of(st.characters(), st.characters(min_codepoint=0x10000),
                   st.characters(max_codepoint=0xFF), st.integers(0xD800, 0xDFFF).map(chr))
seeds = st.one_of(st.just(0), st.integers(0, 2**32 - 1), st.integers(-(2**80), 2**80),
                  st.booleans())


def _outcome(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # a lone surrogate: the UTF-16 encoding's error, in both
        return type(exc)


@pytest.mark.twins
@settings(max_examples=1000)
@given(st.text(_chars, max_size=60), seeds)
@example("", 0)
@example("TopicTest#key", 0)
@example("\U0001d11e\U0001f600x", 0)
@example("x\ud800", 0)
@example("\u00e9" * 2000, 12345)
def test_compiled_java_hash_is_the_references(text, seed):
    expected = _outcome(message.java_hash_unsigned_pure, text, seed)
    assert _outcome(core.java_hash_unsigned, text, seed) == expected
    assert _outcome(core.java_hash_unsigned, text, seed=seed) == expected
    assert _outcome(core.java_hash_unsigned, text=text, seed=seed) == expected
    if seed == 0 and not isinstance(seed, bool):
        assert _outcome(core.java_hash_unsigned, text) == expected


def test_compiled_java_hash_refuses_what_the_reference_refuses():
    with pytest.raises(UnicodeEncodeError):
        core.java_hash_unsigned("\udfff")
    with pytest.raises(TypeError):
        core.java_hash_unsigned(b"abc")
    with pytest.raises(TypeError):
        core.java_hash_unsigned("a", 1.5)
    with pytest.raises(TypeError):
        core.java_hash_unsigned("a", 0, 1)
    with pytest.raises(TypeError):
        core.java_hash_unsigned(seed=1)
    with pytest.raises(TypeError):
        core.java_hash_unsigned("a", nope=1)
    with pytest.raises(TypeError):
        core.java_hash_unsigned("a", 1, seed=2)
    assert core.java_hash_unsigned("a", None) == message.java_hash_unsigned_pure("a", None)


def test_the_store_uses_the_selected_function():
    expected = message.java_hash_unsigned_pure if speedups.core is None else speedups.core.java_hash_unsigned
    assert message.java_hash_unsigned is expected
