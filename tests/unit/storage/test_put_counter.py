"""The store's put counters: the compiled counter (common/_put_counter.c) against its pure twin
(storage.stats.PutCounter), and the stats service on either."""

from __future__ import annotations

import importlib
import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import stats as stats_module
from storage.stats import PutCounter, StoreStatsService

try:
    core = importlib.import_module("common._storecore")
except ImportError:
    core = None
compiled = pytest.mark.skipif(core is None or not hasattr(core, "PutCounter"),
                              reason="the compiled core is not built")

TOPICS = st.sampled_from(["A", "B", "TopicTest", "%RETRY%cg", "ü-topic", ""])
ELAPSED = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**31), 2**31),
    st.sampled_from([0, 0.0, -0.0, 10, 10.0, 10.000001, 9999.9, 10_000, 10_001, 5e-324]))
COUNTS = st.one_of(st.integers(-(2**40), 2**40), st.integers(-(2**63), 2**63 - 1))
RECORDS = st.lists(st.tuples(TOPICS, COUNTS, COUNTS, ELAPSED, COUNTS, st.booleans()),
                   max_size=60)


def _state(counter) -> tuple:
    times, size, slowest = counter.totals()
    # (NaN never becomes the slowest: it compares false, in both)
    return times, size, slowest, counter.buckets(), counter.topic_puts()


@pytest.mark.twins
@compiled
@settings(max_examples=300, deadline=None)
@given(RECORDS)
def test_the_compiled_counter_counts_as_its_pure_twin(records):
    twins = (core.PutCounter(), PutCounter())
    for topic, count, size, elapsed, puts, by_name in records:
        refused = []
        for counter in twins:
            try:
                if by_name:
                    counter.record(topic, count, size, elapsed, puts=puts)
                else:
                    counter.record(topic, count, size, elapsed, puts)
                refused.append(None)
            except OverflowError:  # (huge counts: past int64, refused alike, nothing changed)
                refused.append(OverflowError)
        assert refused[0] == refused[1]
        assert _state(twins[0]) == _state(twins[1])


@pytest.mark.twins
@compiled
@pytest.mark.parametrize("calls", [
    [("t", 2**63 - 1, 1, 1.0, 1), ("t", 1, 1, 1.0, 1)],  # the messages' sum
    [("t", 1, 2**63 - 1, 1.0, 1), ("u", 1, 1, 1.0, 1)],  # the bytes' sum, another topic
    [("t", 1, 1, 1.0, 2**63 - 1), ("u", 1, 1, 5.0, 1)],  # a bucket's sum
    [("t", -(2**63), 0, 1.0, 1), ("t", -1, 0, 1.0, 1)],  # below
    [("t", 2**63, 1, 1.0, 1)], [("t", 1, 1, 1.0, -(2**63) - 1)],  # past int64 itself
    [("t", 1, 1, 2**1024, 1)],  # elapsed no float can hold
])
def test_both_refuse_a_count_past_int64_and_change_nothing(calls):
    twins = (core.PutCounter(), PutCounter())
    for counter in twins:
        for call in calls[:-1]:
            counter.record(*call)
        before = _state(counter)
        with pytest.raises(OverflowError):
            counter.record(*calls[-1])
        assert _state(counter) == before
    assert _state(twins[0]) == _state(twins[1])


@pytest.mark.twins
@compiled
def test_both_take_elapsed_as_float_takes_it():
    class Odd(float):
        def __float__(self):
            return 99999.0

    twins = (core.PutCounter(), PutCounter())
    for counter in twins:
        counter.record("t", 1, 1, Odd(1.0))
        counter.record("t", 1, 1, True)
        counter.record("t", 1, 1, 2**60)
    assert _state(twins[0]) == _state(twins[1])


@pytest.mark.twins
@compiled
@pytest.mark.parametrize("args", [
    (1, 1, 1, 0.1), ("A", 1.5, 1, 0.1), ("A", 1, "1", 0.1), ("A", 1, 1, "0.1"),
    ("A", 1, 1, None), ("A", 1, 1, 0.1, 1.0), (b"A", 1, 1, 0.1), (b"A", 10**30, 1, 0.1),
])
def test_both_refuse_the_same_arguments_and_count_nothing(args):
    for counter in (core.PutCounter(), PutCounter()):
        with pytest.raises(TypeError):
            counter.record(*args)
        assert _state(counter) == (0, 0, 0.0, [0] * 13, {})


@compiled
def test_a_str_subclass_topic_is_refused_by_the_compiled_counter():
    class Sneaky(str):
        def __hash__(self):  # (Python code in the middle of a count: refused, not run)
            return 1

    counter = core.PutCounter()
    with pytest.raises(TypeError):
        counter.record(Sneaky("A"), 1, 1, 0.1)
    with pytest.raises(TypeError):
        counter.record("A", 1, 1, 0.1, 2, 3)
    with pytest.raises(TypeError):
        counter.record("A", 1, 1, 0.1, pots=2)
    for twin in (counter, PutCounter()):  # (only puts by name, in both)
        with pytest.raises(TypeError):
            twin.record("A", 1, 1, elapsed_ms=0.1)


def test_the_service_counts_on_the_counter_the_build_has():
    service = StoreStatsService()
    expected = stats_module._PUT_COUNTER
    assert type(service._puts) is expected
    if core is not None and hasattr(core, "PutCounter") and not _pure():
        assert expected is core.PutCounter
    service.record_put("A", 2, 300, 4.5)
    assert (service.put_message_times_total, service.put_message_size_total) == (2, 300)
    assert math.isclose(service.put_message_entire_time_max, 4.5)


def _pure() -> bool:
    from common import speedups

    return speedups.store_core is None


@pytest.mark.parametrize("make", [PutCounter, pytest.param(
    getattr(core, "PutCounter", None), marks=compiled)])
def test_threads_counting_at_once_lose_no_count(make):
    counter = make()

    def count():
        for _ in range(20_000):
            counter.record("A", 1, 10, 0.5)

    workers = [threading.Thread(target=count) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert counter.totals()[:2] == (80_000, 800_000)
    assert counter.topic_puts() == {"A": (80_000, 800_000)}
    assert counter.buckets()[1] == 80_000
