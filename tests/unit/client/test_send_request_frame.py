"""The producer's SEND_MESSAGE_V2 request, framed from a template, is the frame the codec
encodes for the same fields (issue 14): brokers written by others read it the same."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.client.route import MessageQueue
from cluster.remoting.codec import ONEWAY_FLAG, encode, request
from cluster.remoting.codes import RequestCode
from storage.message import properties_to_string
from storage.record import BatchEntry, encode_batch_body

texts = st.text(max_size=20)


@settings(max_examples=150, deadline=None)
@given(group=st.text(min_size=1, max_size=20), topic=st.text(min_size=1, max_size=20),
       tags=st.none() | texts, flag=st.integers(-(2**31), 2**31 - 1),
       queue_id=st.integers(0, 4095), body=st.binary(max_size=5000),
       properties=st.dictionaries(st.text(min_size=1, max_size=8), texts, max_size=3),
       opaque=st.integers(0, 2**31 - 1), queue_nums=st.integers(1, 64),
       now=st.integers(0, 2**41), oneway=st.booleans(),
       keys=st.none() | texts | st.lists(texts, max_size=3), delay=st.integers(-1, 18),
       wait=st.booleans())
def test_the_send_frame_is_the_encoded_request(group, topic, tags, flag, queue_id, body,
                                                properties, opaque, queue_nums, now, oneway,
                                                keys, delay, wait):
    producer = Producer(group, "127.0.0.1:9876", default_topic_queue_nums=queue_nums)
    msg = Message(topic, body, tags=tags, keys=keys, properties=properties, flag=flag,
                  delay_time_level=delay, wait_store_msg_ok=wait)
    with mock.patch("cluster.client.producer.time.time", return_value=now / 1000):
        prepared = producer._request(msg, MessageQueue(topic, "b", queue_id), "UNIQ")
    # What the producer sent before templates: the fields as a dict, encoded by the codec.
    sent_body = prepared.body
    sys_flag = 1 if sent_body is not body else 0  # compressed over 4 KiB
    props = msg.all_properties()
    props.setdefault("UNIQ_KEY", "UNIQ")
    fields = {"a": group, "b": topic, "c": "TBW102", "d": queue_nums, "e": queue_id,
              "f": sys_flag, "g": int(now / 1000 * 1000), "h": flag, "i": properties_to_string(props), "j": 0,
              "k": False, "m": False}
    expected = request(RequestCode.SEND_MESSAGE_V2, fields, sent_body, opaque=opaque,
                       oneway=oneway)
    assert prepared.frame(opaque, oneway=oneway) == encode(expected)
    assert bool(expected.flag & ONEWAY_FLAG) == oneway


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.none() | texts, st.none() | texts | st.lists(texts, max_size=3),
                          st.dictionaries(st.sampled_from(["UNIQ_KEY", "a", "é", "TAGS"]), texts,
                                          max_size=3),
                          st.binary(min_size=1, max_size=300), st.integers(-(2**31), 2**31 - 1),
                          st.booleans()),
                min_size=1, max_size=8))
def test_the_batch_body_is_the_encoded_batch(messages):
    producer = Producer("g", "127.0.0.1:9876")
    producer._started = True
    batch = [Message("T", body, tags=tags, keys=keys, properties=properties, flag=flag,
                     wait_store_msg_ok=wait)
             for tags, keys, properties, body, flag, wait in messages]
    ids, body = producer._batch_body(batch)
    assert len(set(ids)) == len(batch)
    # What the producer sent before: each message's properties as a dict, its UNIQ_KEY the
    # producer's id whatever the message held (the result names these ids).
    entries = []
    for msg, uniq in zip(batch, ids, strict=True):
        props = msg.all_properties()
        props["UNIQ_KEY"] = uniq
        entries.append(BatchEntry(msg.flag, msg.body, properties_to_string(props)))
    assert body == encode_batch_body(entries)
