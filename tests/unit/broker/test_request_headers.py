"""Every request code the broker and the name server serve reads a checked header.

A processor registered without ``checked`` (or one of the few whose whole input is a checked
JSON body) would read raw extFields again: this test names it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.broker import headers as broker_headers
from cluster.broker.admin_processor import AdminBrokerProcessor
from cluster.broker.client_bodies import parse_heartbeat, parse_lock_batch
from cluster.broker.client_processor import (
    ClientForwardProcessor,
    ClientManageProcessor,
    ResetOffsetProcessor,
)
from cluster.broker.pull_processor import PullMessageProcessor
from cluster.broker.query_processor import QueryProcessor
from cluster.broker.send_back import SendMessageBackProcessor
from cluster.broker.send_processor import SendMessageProcessor
from cluster.broker.transaction import TransactionalMessageService
from cluster.namesrv import headers as namesrv_headers
from cluster.namesrv.processor import NamesrvProcessor
from cluster.remoting import header as header_module
from cluster.remoting.body import JsonBody
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.header import HeaderError, RequestHeader
from common import speedups

# Processors whose input is a JSON body read through remoting.body's checked getters.
BODY_ONLY = {"heart_beat", "lock_batch_mq", "unlock_batch_mq", "update_subscription_group"}


class Recorder:
    def __init__(self) -> None:
        self.processors = {}
        self.on_disconnect = []

    def register(self, code, processor) -> None:
        self.processors[int(code)] = processor

    def register_lane(self, code, lane) -> None:
        # A lane answers only what its code's processor would answer the same (send_lane.py):
        # the processor, with its checked header, stays registered for everything else.
        assert int(code) in self.processors


def registered() -> dict[int, object]:
    server = Recorder()
    for kind in (SendMessageProcessor, PullMessageProcessor, QueryProcessor, ClientManageProcessor,
                 ClientForwardProcessor, AdminBrokerProcessor, ResetOffsetProcessor,
                 SendMessageBackProcessor, TransactionalMessageService):
        kind(None).register_with(server)
    broker = dict(server.processors)
    server = Recorder()
    NamesrvProcessor(None, None).register_with(server)
    return broker, server.processors


def test_every_request_code_reads_a_checked_header():
    broker, namesrv = registered()
    unchecked = [f"{RequestCode(code).name} -> {processor.__name__}"
                 for code, processor in {**broker, **namesrv}.items()
                 if not hasattr(processor, "header_class") and processor.__name__ not in BODY_ONLY]
    assert not unchecked
    assert len(broker) >= 35
    assert len(namesrv) >= 14


def header_classes() -> list[type[RequestHeader]]:
    found = []
    for module in (broker_headers, namesrv_headers):
        found += [v for v in vars(module).values()
                  if isinstance(v, type) and issubclass(v, RequestHeader) and v is not RequestHeader]
    return found


hostile_text = st.one_of(
    st.text(max_size=40),
    st.integers().map(str),
    st.sampled_from(["8589934592", "-1", "2147483648", "-9223372036854775809", "1e3", "0x10", "NaN",
                     "true", "", " ", "\x00", "%RETRY%", "SCHEDULE_TOPIC_XXXX", "a" * 300]),
)


@pytest.mark.parametrize("header_class", header_classes(), ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_hostile_values_decode_or_raise_header_error(header_class, data):
    names = [f.name for f in header_class.fields] + ["x"]
    fields = data.draw(st.dictionaries(st.sampled_from(names), hostile_text))
    try:
        header = header_class.decode(fields)
    except HeaderError as exc:
        code = exc.response_code
        assert code in {c.value for c in ResponseCode}
        return
    for spec in header_class.fields:
        value = getattr(header, spec.attr)
        if hasattr(spec, "bits") and value is not None:
            assert spec.minimum <= value <= spec.maximum


def test_send_refuses_the_broker_s_own_bits_and_unknown_ones():
    base = {"producerGroup": "p", "topic": "t", "queueId": "0"}
    with pytest.raises(HeaderError) as caught:
        broker_headers.SendMessageRequestHeader.decode({**base, "sysFlag": str(1 << 20)})
    assert caught.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    # compressed + multi tags + prepared: a producer's bits
    assert broker_headers.SendMessageRequestHeader.decode({**base, "sysFlag": "7"}).sys_flag == 7
    with pytest.raises(HeaderError, match="topic"):
        broker_headers.SendMessageRequestHeader.decode({**base, "topic": "a/../b"})


def test_topic_queue_counts_are_capped():
    with pytest.raises(HeaderError, match=r"outside 1\.\.4096"):
        broker_headers.CreateTopicRequestHeader.decode({"topic": "t", "readQueueNums": "2147483647"})


@pytest.mark.parametrize("body", [
    {"clientID": "c", "consumerDataSet": [{"groupName": "g", "consumeType": 99}]},
    {"clientID": "c", "consumerDataSet": [{"groupName": "g/../x"}]},
    {"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": ""}]}]},
    {"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [
        {"topic": "t", "codeSet": ["x"]}]}]},
    {"clientID": "c", "consumerDataSet": "all"},
    {"clientID": {"a": 1}},
    {"producerDataSet": [{"groupName": 5.5e300}]},
    {"clientID": "c", "consumerDataSet": [{"groupName": "g", "consumeType": "9" * 5000}]},
    {"clientID": "c", "consumerDataSet": [{"groupName": "g", "messageModel": -1}]},
])
def test_hostile_heartbeats_are_refused(body):
    with pytest.raises(HeaderError):
        parse_heartbeat(json.dumps(body).encode(), "peer")


def test_lock_batches_are_checked():
    good = {"consumerGroup": "g", "clientId": "c",
            "mqSet": [{"topic": "t", "brokerName": "b", "queueId": 1}]}
    assert parse_lock_batch(json.dumps(good).encode())[1] == good["mqSet"]
    for bad in ({**good, "mqSet": [{"topic": "t", "brokerName": "b", "queueId": -1}]},
                {**good, "mqSet": [7]}, {**good, "mqSet": {"a": 1}}):
        with pytest.raises(HeaderError):
            parse_lock_batch(json.dumps(bad).encode())


def test_registrations_are_checked():
    wrapper = {"dataVersion": {"counter": 1, "timestamp": 2},
               "topicConfigTable": {"t": {"topicName": "t", "readQueueNums": 4, "writeQueueNums": 4,
                                          "perm": 6}}}
    checked = namesrv_headers.checked_topic_config_wrapper(JsonBody(wrapper, "r"))
    assert checked["topicConfigTable"]["t"]["readQueueNums"] == 4
    # A topic config the routes cannot take is left out, with the reason; the rest registers.
    for bad in ({"readQueueNums": "many"}, {"perm": 99}, [1]):
        skipped = []
        table = {"good": {"topicName": "good"}, "t": bad, "x" * 130: {}}
        checked = namesrv_headers.checked_topic_config_wrapper(
            JsonBody({"topicConfigTable": table}, "r"), skipped)
        assert list(checked["topicConfigTable"]) == ["good"]
        assert len(skipped) == 2
    # A wrapper that is not one at all is refused.
    for bad in ({"dataVersion": {"counter": "x"}}, {"topicConfigTable": [1]}):
        with pytest.raises(HeaderError):
            namesrv_headers.checked_topic_config_wrapper(JsonBody(bad, "r"))


def test_a_group_s_retry_topic_is_always_a_valid_topic():
    from cluster.topic_validator import validate_group_name, validate_topic_name

    longest = "g" * 200
    while validate_group_name(longest):
        longest = longest[:-1]
    assert len(longest) == 120
    assert validate_topic_name("%RETRY%" + longest) is None
    assert validate_topic_name("%DLQ%" + longest) is None


def _outcome(decode, fields, aliased):
    try:
        header = decode(fields, aliased)
    except HeaderError as exc:
        return ("refused", exc.response_code, str(exc))
    return ("decoded", dict(vars(header)))


edge_numbers = st.sampled_from([
    "007", "-0", "-007", "999999999999999999", "-999999999999999999", "1000000000000000000",
    "9223372036854775807", "-9223372036854775808", "2147483647", "-2147483648", "+1", "1 ",
    "TRUE", "True", "tRuE", "trueish", "\uff54rue", "\u0663", "-", ""])


@pytest.mark.parametrize("maker", [header_module._compile_decoder, header_module._python_decoder],
                         ids=["fastest", "straight-line-python"])
@pytest.mark.parametrize("header_class", header_classes(), ids=lambda c: c.__name__)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_the_compiled_decoder_agrees_with_the_reference(maker, header_class, data):
    # The fast decoders every request takes (the compiled core's, when built, and the
    # straight-line Python one) must accept exactly what the reference accepts, with the same
    # values, and refuse with the reference's code and sentence.
    names = [f.name for f in header_class.fields] + list(header_class.aliases) + ["x"]
    digits = st.integers(-(2**64), 2**64).map(str)
    fields = data.draw(st.dictionaries(st.sampled_from(names),
                                       st.one_of(hostile_text, digits, edge_numbers)))
    aliased = bool(header_class.aliases) and data.draw(st.booleans())
    fast = _decoders(maker, header_class)
    assert _outcome(fast, fields, aliased) == _outcome(header_class._decode, fields, aliased)


_made: dict = {}


def _decoders(maker, header_class):
    key = (maker, header_class)
    if key not in _made:
        _made[key] = maker(header_class)
    return _made[key]


def test_the_compiled_core_decodes_every_header_when_built():
    if speedups.core is None:
        pytest.skip("the compiled core is not built")
    python = header_module._python_decoder
    assert all(header_module._compile_decoder(cls).__qualname__ != python(cls).__qualname__
               for cls in header_classes())


@pytest.mark.parametrize("name", ["Topic\n", "Topic\r\n", "\nTopic", "To pic", "Topic/x"])
def test_a_topic_or_group_name_with_a_line_break_or_other_character_is_refused(name):
    # (a "$" anchor let a final "\n" through: a send auto-created a topic named "Topic\n")
    from cluster.topic_validator import validate_group_name, validate_topic_name

    assert validate_topic_name(name) is not None
    assert validate_group_name(name) is not None
