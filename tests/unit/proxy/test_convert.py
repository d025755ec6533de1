"""5.x messages to stored properties and back: what a 5.x client may not send is refused with
the status it expects, and what it sends reads back the same."""

from __future__ import annotations

import time
import zlib

import pytest

from cluster.proxy.convert import MessageRefused, status_of_response, to_message, to_properties
from cluster.proxy.schema import Code, pb
from cluster.remoting.codes import ResponseCode
from storage.message import properties_to_string
from storage.message_id import host_to_bytes
from storage.record import decode_record, encode_record


def message(**system) -> object:
    system.setdefault("message_id", "01ABCDEF")
    return pb.Message(topic=pb.Resource(name="TopicTest"), body=b"hello",
                      system_properties=pb.SystemProperties(**system))


@pytest.mark.parametrize(("build", "code"), [
    (lambda: pb.Message(topic=pb.Resource(name="bad topic!"), body=b"x",
                        system_properties=pb.SystemProperties(message_id="1")), Code.ILLEGAL_TOPIC),
    (lambda: pb.Message(topic=pb.Resource(name="T"), body=b"",
                        system_properties=pb.SystemProperties(message_id="1")),
     Code.MESSAGE_BODY_EMPTY),
    (lambda: message(tag="a||b"), Code.ILLEGAL_MESSAGE_TAG),
    (lambda: message(keys=["has space"]), Code.ILLEGAL_MESSAGE_KEY),
    (lambda: message(message_type=pb.FIFO), Code.ILLEGAL_MESSAGE_GROUP),
    (lambda: message(message_type=pb.DELAY), Code.ILLEGAL_DELIVERY_TIME),
    (lambda: message(message_id=""), Code.ILLEGAL_MESSAGE_ID),
    # (its transaction id could not be taken apart again: the transaction would never end)
    (lambda: message(message_id="order_42", message_type=pb.TRANSACTION), Code.ILLEGAL_MESSAGE_ID),
    (lambda: pb.Message(topic=pb.Resource(name="T"), body=b"x", user_properties={"TAGS": "x"},
                        system_properties=pb.SystemProperties(message_id="1")),
     Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
])
def test_what_a_5x_client_may_not_send_gets_its_status(build, code):
    with pytest.raises(MessageRefused) as refused:
        to_properties(build())
    assert refused.value.code == code


def test_a_delivery_time_beyond_three_days_is_refused():
    late = message(message_type=pb.DELAY)
    late.system_properties.delivery_timestamp.FromMilliseconds(
        int(time.time() * 1000) + 4 * 24 * 3600 * 1000)
    with pytest.raises(MessageRefused) as refused:
        to_properties(late)
    assert refused.value.code == Code.ILLEGAL_DELIVERY_TIME


def test_a_fifo_message_reads_back_as_sent_with_its_digest():
    sent = message(tag="TagA", keys=["k1", "k2"], message_group="orders-7",
                   message_type=pb.FIFO)
    sent.user_properties["color"] = "blue"
    props, deliver = to_properties(sent)
    assert deliver == 0
    assert (props["__SHARDINGKEY"], props["UNIQ_KEY"], props["KEYS"]) == ("orders-7", "01ABCDEF",
                                                                         "k1 k2")
    raw = encode_record(topic=b"TopicTest", body=b"hello", queue_id=3, flag=0,
                        properties=properties_to_string(props).encode(), queue_offset=9,
                        physical_offset=0, sys_flag=0, born_timestamp=1,
                        born_host=host_to_bytes("1.2.3.4", 5), store_timestamp=2,
                        store_host=host_to_bytes("127.0.0.1", 10911), reconsume_times=1)
    back = to_message(decode_record(raw, 0), receipt_handle="h", invisible_ms=30_000)
    system = back.system_properties
    assert (back.topic.name, back.body, dict(back.user_properties)) == ("TopicTest", b"hello",
                                                                        {"color": "blue"})
    assert (system.message_id, system.tag, list(system.keys), system.message_group) == (
        "01ABCDEF", "TagA", ["k1", "k2"], "orders-7")
    assert (system.message_type, system.delivery_attempt, system.queue_offset) == (pb.FIFO, 2, 9)
    assert system.body_digest.checksum == f"{zlib.crc32(b'hello'):08X}"
    assert system.receipt_handle == "h"


def test_broker_answers_map_to_5x_status_codes():
    assert status_of_response(ResponseCode.SUCCESS, None).code == Code.OK
    assert status_of_response(ResponseCode.TOPIC_NOT_EXIST, "x").code == Code.TOPIC_NOT_FOUND
    assert status_of_response(ResponseCode.FLUSH_DISK_TIMEOUT, "x").code == \
        Code.MASTER_PERSISTENCE_TIMEOUT
    assert status_of_response(999, None).code == Code.INTERNAL_SERVER_ERROR


def test_names_are_refused_with_the_codes_5x_clients_expect():
    from cluster.proxy.convert import name_refusal

    assert name_refusal("CID-ok", "TopicOk") is None
    assert name_refusal("bad group!", "TopicOk").code == Code.ILLEGAL_CONSUMER_GROUP
    assert name_refusal("CID-ok", "").code == Code.ILLEGAL_TOPIC
    assert name_refusal(topic="x" * 300).code == Code.ILLEGAL_TOPIC


@pytest.mark.parametrize(("seconds", "nanos", "expected"), [
    (0, 0, 0), (1, 500_000_000, 1500), (253_402_300_799, 999_999_999, 253_402_300_799_999),
    (-62_135_596_800, 0, -62_135_596_800_000),
    (1, 1_000_000_000, None), (1, -1, None),  # nanos outside 0..999,999,999
    (253_402_300_800, 0, None), (-62_135_596_801, 0, None), (2**62, 0, None),  # past the years
])
def test_a_timestamp_outside_protobufs_bounds_is_no_time(seconds, nanos, expected):
    from google.protobuf.timestamp_pb2 import Timestamp

    from cluster.proxy.convert import timestamp_ms

    assert timestamp_ms(Timestamp(seconds=seconds, nanos=nanos)) == expected


@pytest.mark.parametrize(("seconds", "nanos", "expected"), [
    (0, 0, 0), (30, 0, 30_000), (1, 500_000_000, 1500), (-1, -500_000_000, -1500),
    (0, -5_000_000, -5), (315_576_000_000, 0, 315_576_000_000_000),
    (1, 1_000_000_000, None), (1, -1, None), (-1, 1, None),  # a nanos past a second, or of
    (315_576_000_001, 0, None), (-2**62, 0, None),  # the other sign; past 10,000 years
])
def test_a_duration_outside_protobufs_bounds_is_no_duration(seconds, nanos, expected):
    from google.protobuf.duration_pb2 import Duration

    from cluster.proxy.convert import duration_ms

    assert duration_ms(Duration(seconds=seconds, nanos=nanos)) == expected


def test_a_delivery_time_that_is_no_time_is_refused_not_raised():
    late = message(message_type=pb.DELAY)
    late.system_properties.delivery_timestamp.seconds = 1
    late.system_properties.delivery_timestamp.nanos = 1_000_000_000
    with pytest.raises(MessageRefused) as refused:
        to_properties(late)
    assert refused.value.code == Code.ILLEGAL_DELIVERY_TIME


def test_a_stored_message_with_values_past_5xs_fields_is_still_delivered():
    """A 4.x producer may send any int64 as its born time and any int32 as its reconsume
    count; a 5.x consumer once failed on such a message at every receive, for good."""
    raw = encode_record(topic=b"TopicTest", body=b"hello", queue_id=0, flag=0,
                        properties=properties_to_string({"UNIQ_KEY": "01AB",
                                                         "TIMER_DELIVER_MS": "9" * 18}).encode(),
                        queue_offset=0, physical_offset=0, sys_flag=0,
                        born_timestamp=2**63 - 1, born_host=host_to_bytes("1.2.3.4", 5),
                        store_timestamp=-2**63, store_host=host_to_bytes("127.0.0.1", 10911),
                        reconsume_times=2**31 - 1)
    system = pb.Message.FromString(to_message(decode_record(raw, 0)).SerializeToString()) \
        .system_properties
    assert system.born_timestamp.seconds == 253_402_300_799  # 9999-12-31, as far as it goes
    assert system.store_timestamp.seconds == -62_135_596_800  # 0001-01-01
    assert system.delivery_timestamp.seconds == 253_402_300_799
    assert system.delivery_attempt == 2**31 - 1


def stored(body: bytes = b"hello", sys_flag: int = 0, **props):
    raw = encode_record(topic=b"TopicTest", body=body, queue_id=0, flag=0,
                        properties=properties_to_string({"UNIQ_KEY": "01AB", **props}).encode(),
                        queue_offset=4, physical_offset=0, sys_flag=sys_flag, born_timestamp=1,
                        born_host=host_to_bytes("1.2.3.4", 5), store_timestamp=2,
                        store_host=host_to_bytes("127.0.0.1", 10911), reconsume_times=0)
    return decode_record(raw, 0)


@pytest.mark.parametrize("deliver", ["\u00b2", "9" * 40, "9" * 19, "-5", "12a"])
def test_a_timer_property_the_broker_would_not_read_is_no_delivery_time(deliver, caplog):
    message = to_message(stored(TIMER_DELIVER_MS=deliver))
    system = message.system_properties
    assert not system.HasField("delivery_timestamp")
    assert system.message_type == pb.NORMAL  # (not DELAY: there is no time to wait for)
    assert system.HasField("born_timestamp")  # the whole message, not the bare fallback
    assert message.body == b"hello"
    assert not caplog.records


def test_a_body_marked_compressed_that_does_not_inflate_is_delivered_as_stored():
    from storage.message import COMPRESSED_FLAG

    assert to_message(stored(b"not zlib at all", COMPRESSED_FLAG)).body == b"not zlib at all"
    bomb = zlib.compress(bytes(64 * 1024 * 1024), 9)  # 64 MiB of zeros in ~64 KiB
    assert to_message(stored(bomb, COMPRESSED_FLAG)).body == bomb  # not inflated past the cap
    assert to_message(stored(zlib.compress(b"x" * 5000), COMPRESSED_FLAG)).body == b"x" * 5000


def test_a_message_that_cannot_be_converted_still_goes_out_with_its_body_id_and_place(
        monkeypatch, caplog):
    from cluster.proxy import convert

    def broken(*_args):
        raise RuntimeError("a conversion nobody foresaw")

    monkeypatch.setattr(convert, "_to_message", broken)
    message = to_message(stored(), receipt_handle="h", invisible_ms=30_000, earlier_deliveries=2)
    system = message.system_properties
    assert (message.topic.name, message.body, system.queue_offset, system.receipt_handle,
            system.delivery_attempt) == ("TopicTest", b"hello", 4, "h", 3)
    assert system.message_id  # the record's own msgId
    assert any(r.exc_info for r in caplog.records if r.name == "cluster.proxy.convert")


@pytest.mark.parametrize(("field", "value", "code"), [
    ("message_id", "01AB\x02TRAN_MSG\x01true", Code.ILLEGAL_MESSAGE_ID),
    ("born_host", "h\x02__SHARDINGKEY\x01g", Code.BAD_REQUEST),
    ("trace_context", "t\x01x", Code.BAD_REQUEST),
    ("message_group", "g\x02TIMER_DELIVER_MS\x012", Code.ILLEGAL_MESSAGE_GROUP),
])
def test_a_system_property_may_not_plant_stored_properties(field, value, code):
    sent = message(**{field: value}) if field != "message_id" else message(message_id=value)
    with pytest.raises(MessageRefused) as refused:
        to_properties(sent)
    assert refused.value.code == code


def test_a_born_time_that_is_no_time_is_refused():
    sent = message()
    sent.system_properties.born_timestamp.nanos = 1_000_000_000
    with pytest.raises(MessageRefused) as refused:
        to_properties(sent)
    assert refused.value.code == Code.BAD_REQUEST


def test_a_forged_transaction_id_with_odd_digits_is_no_transaction_id():
    from cluster.proxy.sending import parse_transaction_id

    assert parse_transaction_id("01AB_broker-a_12_3") == ("01AB", "broker-a", 12, 3)
    assert parse_transaction_id("01AB_broker-a_\u00b2_3") is None  # ("²".isdigit(), int fails)
