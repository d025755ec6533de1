"""Latency fault tolerance with seed 001's exact tables; queue selection; average allocation."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.client.fault import LatencyFaultTolerance, compute_not_available_duration, select_queue
from cluster.client.pull import parse_tags
from cluster.client.rebalance import allocate_average
from cluster.client.route import MessageQueue, TopicPublishInfo, TopicRouteData


@pytest.mark.parametrize(
    ("latency", "duration"),
    [(0, 0), (49, 0), (100, 0), (549, 0), (550, 30_000), (999, 30_000), (1000, 60_000),
     (2000, 120_000), (3000, 180_000), (14_999, 180_000), (15_000, 600_000), (30_000, 600_000)],
)
def test_not_available_duration_follows_the_tables(latency, duration):
    assert compute_not_available_duration(latency) == duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _info() -> TopicPublishInfo:
    route = TopicRouteData(
        [{"brokerName": "broker-b", "writeQueueNums": 2, "readQueueNums": 2, "perm": 6},
         {"brokerName": "broker-a", "writeQueueNums": 2, "readQueueNums": 2, "perm": 6}],
        [{"brokerName": "broker-a", "brokerAddrs": {0: "a:1"}},
         {"brokerName": "broker-b", "brokerAddrs": {0: "b:1"}}])
    return TopicPublishInfo("T", route)


def test_queues_are_sorted_by_broker_then_queue():
    assert [str(q) for q in _info().message_queues] == [
        "T@broker-a:0", "T@broker-a:1", "T@broker-b:0", "T@broker-b:1"]


def test_a_failed_broker_is_avoided_for_ten_minutes_then_used_again():
    clock = Clock()
    faults = LatencyFaultTolerance(clock)
    faults.update_fault_item("broker-a", 5, isolation=True)  # a failure counts as 30 s latency
    info = _info()
    picks = {select_queue(info, None, faults).broker_name for _ in range(20)}
    assert picks == {"broker-b"}
    [item] = [i for i in faults.items() if i["brokerName"] == "broker-a"]
    assert item["notAvailableUntil"] == pytest.approx(1000 * 1000 + 600_000)
    assert not item["available"]
    clock.now += 601
    picks = {select_queue(info, None, faults).broker_name for _ in range(20)}
    assert picks == {"broker-a", "broker-b"}


def test_a_retry_skips_the_broker_that_just_failed():
    info = _info()
    for _ in range(20):
        assert select_queue(info, "broker-a", LatencyFaultTolerance()).broker_name == "broker-b"
        assert info.select_one("broker-b").broker_name == "broker-a"


def test_when_every_broker_is_out_the_best_of_them_is_picked():
    clock = Clock()
    faults = LatencyFaultTolerance(clock)
    faults.update_fault_item("broker-a", 600, isolation=False)  # out for 30 s
    faults.update_fault_item("broker-b", 5, isolation=True)  # out for 10 min
    assert faults.pick_one_at_least() == "broker-a"
    assert select_queue(_info(), None, faults).broker_name == "broker-a"


def test_average_allocation_gives_contiguous_ranges_and_covers_every_queue():
    queues = [MessageQueue("T", "b", i) for i in range(8)]
    ids = ["c1", "c2", "c3"]
    parts = [allocate_average(cid, ids, queues) for cid in ids]
    assert [len(p) for p in parts] == [3, 3, 2]
    assert sorted(q for p in parts for q in p) == queues
    assert allocate_average("stranger", ids, queues) == []
    assert allocate_average("c4", ["c1", "c2", "c3", "c4"], queues[:2]) == []


def test_tag_expressions():
    assert parse_tags("*") is None
    assert parse_tags(" TagA || TagB ") == {"TagA", "TagB"}


def test_a_broker_whose_write_permission_was_wiped_is_never_picked():
    """Not among the queues, and not as the fallback when every broker is out either (its
    queue data still counts write queues; its permission says no)."""
    route = TopicRouteData(
        [{"brokerName": "broker-a", "writeQueueNums": 2, "readQueueNums": 2, "perm": 4},
         {"brokerName": "broker-b", "writeQueueNums": 2, "readQueueNums": 2, "perm": 6}],
        [{"brokerName": "broker-a", "brokerAddrs": {0: "a:1"}},
         {"brokerName": "broker-b", "brokerAddrs": {0: "b:1"}}])
    info = TopicPublishInfo("T", route)
    assert {q.broker_name for q in info.message_queues} == {"broker-b"}
    faults = LatencyFaultTolerance(Clock())
    faults.update_fault_item("broker-a", 600, isolation=False)  # the better of two that are out
    faults.update_fault_item("broker-b", 5, isolation=True)
    assert info.write_queue_nums_of("broker-a") == 0
    assert {select_queue(info, None, faults).broker_name for _ in range(10)} == {"broker-b"}


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from(["broker-a", "broker-b"]),
              st.sampled_from([0, 20, 549, 550, 1500, 20_000]), st.booleans()),
    st.tuples(st.just("wait"), st.sampled_from([1, 29_999, 30_000, 600_001])),
    st.tuples(st.just("remove"), st.sampled_from(["broker-a", "broker-b"])),
    st.tuples(st.just("select"), st.sampled_from([None, "broker-a", "broker-b"]))),
    max_size=30))
def test_the_shortcut_while_nothing_is_penalized_picks_what_asking_each_item_picks(steps):
    # Choosing a queue skips the items while no penalty lasts (penalties_until); with the
    # shortcut off (a penalty that never ends) every item is asked, and both pick the same.
    clock = Clock()
    faults, asking = LatencyFaultTolerance(clock), LatencyFaultTolerance(clock)
    info, info_asking = _info(), _info()
    info.send_which_queue = itertools.count(5)  # (the two round robins in step)
    info_asking.send_which_queue = itertools.count(5)
    for step in steps:
        if step[0] == "send":
            for table in (faults, asking):
                table.update_fault_item(step[1], step[2], isolation=step[3])
        elif step[0] == "wait":
            clock.now += step[1] / 1000
        elif step[0] == "remove":
            faults.remove(step[1])
            asking.remove(step[1])
        else:
            asking.penalties_until = float("inf")
            random.seed(7)
            picked = select_queue(info, step[1], faults)
            random.seed(7)
            assert select_queue(info_asking, step[1], asking) == picked
