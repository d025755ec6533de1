"""A producer's batch body (cluster/client/batch_body.py): the compiled function
(common/_batch_body.c) against its pure twin, for messages of every kind (the same body and
ids, or None for both), and the twin against the producer's general way for the messages it
takes: the bytes a broker receives are the same whichever way made them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.client.batch_body import NAMES, batch_body_pure
from cluster.client.message import Message
from cluster.client.producer import Producer, _properties_text
from storage.message_id import UniqIdGenerator, ids_of
from storage.record import decode_batch_body, encode_batch_parts

try:
    core = importlib.import_module("common._storecore")
except ImportError:
    core = None


@dataclass
class Odd:
    """A message-like object whose fields may be of any type."""

    body: object = b""
    tags: object = None
    keys: object = None
    properties: object = field(default_factory=dict)
    flag: object = 0
    delay_time_level: object = 0
    wait_store_msg_ok: object = True


_texts = st.one_of(st.none(), st.just(""), st.text(max_size=8),
                   st.sampled_from(["TagA", "é中", "\udc80", "a\x01b"]))
_ints = st.one_of(st.integers(-3, 3), st.sampled_from([2**31 - 1, 2**31, -2**31, -2**31 - 1,
                                                       2**63 - 1, 2**63, -2**63 - 1]))

odd_messages = st.builds(
    Odd,
    body=st.one_of(st.binary(max_size=40), st.just(bytearray(b"ab")), st.just("text")),
    tags=st.one_of(_texts, st.just(7)),
    keys=st.one_of(_texts, st.just(["k1", "k2"])),
    properties=st.one_of(st.just({}), st.just({"a": "b"}), st.none()),
    flag=st.one_of(_ints, st.just(True)),
    delay_time_level=st.one_of(_ints, st.just(True), st.just(2.0)),
    wait_store_msg_ok=st.one_of(st.booleans(), st.none(), st.just(1)),
)
common_messages = st.builds(
    Message, topic=st.just("T"), body=st.binary(min_size=1, max_size=40),
    tags=st.one_of(st.none(), st.just(""), st.text(st.characters(blacklist_categories=["Cs"]),
                                                   max_size=6)),
    keys=st.one_of(st.none(), st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)),
    flag=st.integers(-2**31, 2**31 - 1), delay_time_level=st.integers(-2, 18),
    wait_store_msg_ok=st.booleans())


heads = st.one_of(st.text("0123456789ABCDEF", min_size=0, max_size=24), st.just("é"))
firsts = st.one_of(st.integers(-70000, 70000), st.just(2**40))


@pytest.mark.twins
@pytest.mark.skipif(core is None, reason="the compiled core is not built")
@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(common_messages, odd_messages), max_size=6), heads, firsts,
       st.booleans())
def test_the_compiled_body_is_the_pure_one(messages, head, first, as_tuple):
    if as_tuple:  # (any other sequence: None, the general way)
        messages = tuple(messages)
    assert core.batch_body(NAMES, messages, head, first) == batch_body_pure(NAMES, messages,
                                                                            head, first)


def test_a_batch_given_as_a_tuple_is_made_as_a_list_is():
    producer = Producer("G", "127.0.0.1:1")
    producer._started = True
    messages = [Message("T", b"body", tags="TagA"), Message("T", b"more", keys="k")]
    producer.ids.reserve = lambda count: ("0A0B", 7)  # (the same ids both times)
    assert producer._batch_body(tuple(messages)) == producer._batch_body(messages)


def test_a_long_property_or_an_odd_message_is_left_to_the_general_way():
    body = b"x" * 10
    assert batch_body_pure(NAMES, [Message("T", body, keys="k" * 70000)], "AB", 0) is None
    assert batch_body_pure(NAMES, [Message("T", body, keys=["a", "b"])], "AB", 0) is None
    assert batch_body_pure(NAMES, [Message("T", body, properties={"x": "y"})], "AB", 0) is None
    if core is not None:
        assert core.batch_body(NAMES, [Message("T", body, keys="k" * 70000)], "AB", 0) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(common_messages, min_size=1, max_size=6), firsts)
def test_the_common_body_is_what_the_general_way_writes(messages, first):
    head = UniqIdGenerator().reserve(0)[0]
    made = batch_body_pure(NAMES, messages, head, first)
    assert made is not None
    ids = ids_of(head, first, len(messages))
    general = encode_batch_parts([(m.flag, m.body, _properties_text(m, uniq, replace_uniq=True))
                                  for m, uniq in zip(messages, ids, strict=True)])
    assert made == (general, ids)
    entries = decode_batch_body(made[0])
    assert [e.body for e in entries] == [m.body for m in messages]
