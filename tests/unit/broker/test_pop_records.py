"""POP's handles and revive records: what is encoded reads back the same, and a handle nobody
gave out is refused with a typed error, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.broker.pop_checkpoint import AckRecord, PopCheckPoint
from cluster.pop_handle import (
    MAX_OFFSET_SPAN,
    ExtraInfo,
    ExtraInfoError,
    offset_info,
    parse_start_offsets,
    pop_retry_topic,
)

offsets = st.integers(min_value=0, max_value=2**62)
names = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_"),
                min_size=1, max_size=30)


@given(start=offsets, pop_time=offsets, invisible=st.integers(1000, 43_200_000),
       retry=st.booleans(), broker=names, queue_id=st.integers(0, 1023),
       delta=st.integers(0, 10_000))
def test_extra_info_round_trips(start, pop_time, invisible, retry, broker, queue_id, delta):
    extra = ExtraInfo(start, pop_time, invisible, 0, retry, broker, queue_id, start + delta)
    assert ExtraInfo.parse(extra.encode()) == extra
    assert extra.deadline == pop_time + invisible


@pytest.mark.parametrize("text", [
    "", "1 2 3", "a b c d e f g h", "1 2 3 0 2 broker 0 5", "1 2 3 0 0  0 5",
    "5 2 3 0 0 broker 0 4",  # an offset before its checkpoint's start
    "0 99999999999999 0 0 0 broker 0 40000000",  # past any read's scan: a forged handle
    "-1 2 3 0 0 broker 0 5", "1 2 3 0 0 broker 0 5 6", "1 2 3 0 0 broker 0 99999999999999999999x",
])
def test_a_handle_nobody_gave_out_is_refused(text):
    with pytest.raises(ExtraInfoError):
        ExtraInfo.parse(text)


def test_a_handle_may_lie_as_far_past_its_start_as_one_filtered_read_looks():
    from storage.get_message import FILTER_SCAN_UNITS

    assert FILTER_SCAN_UNITS + 32 <= MAX_OFFSET_SPAN  # (a POP hands out 32 at most)
    far = ExtraInfo(7, 1, 30_000, 0, False, "b", 0, 7 + FILTER_SCAN_UNITS + 31)
    assert ExtraInfo.parse(far.encode()) == far
    with pytest.raises(ExtraInfoError):
        ExtraInfo.parse(ExtraInfo(7, 1, 30_000, 0, False, "b", 0, 7 + MAX_OFFSET_SPAN).encode())


@given(st.text(max_size=80))
def test_any_text_parses_or_is_refused(text):
    try:
        ExtraInfo.parse(text)
    except ExtraInfoError:
        pass


def test_start_offsets_read_back_per_queue_and_kind():
    text = offset_info([(False, 0, "7"), (True, 0, "2"), (False, 3, "11")])
    assert parse_start_offsets(text) == {(False, 0): 7, (True, 0): 2, (False, 3): 11}
    assert parse_start_offsets("") == {}


def test_the_retry_topic_is_rocketmq_s_v1_name():
    assert pop_retry_topic("CID-a", "TopicTest") == "%RETRY%CID-a_TopicTest"


def test_checkpoints_and_acks_round_trip_and_settle():
    ck = PopCheckPoint("CID-a", "TopicTest", 2, 10, [10, 12, 13], 1_700_000_000_000, 30_000)
    back = PopCheckPoint.decode(ck.encode())
    assert (back.key, back.offsets, back.deadline) == (ck.key, [10, 12, 13], 1_700_000_030_000)
    ack = AckRecord(ck.key, 12)
    assert AckRecord.decode(ack.encode()) == ack
    ck.acked.update({10, 12})
    assert ck.unacked() == [13]
    assert not ck.done
    ck.acked.add(13)
    assert ck.done
