"""Timer messages: what a send's properties ask for, and the broker's timer service over a real
store (filing, delivery in time order and never early, a restart that neither loses nor
repeats what was delivered)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from cluster.broker import timer as timer_module
from cluster.broker.timer import (
    TimerError,
    TimerMessageService,
    delivery_time,
    park,
    yield_to_delay_level,
)
from storage.message import TIMER_TOPIC, MessageExtBrokerInner, properties_to_string
from storage.record import iter_records
from tests.unit.broker.periodic_writes import write_aside_then_stop

# The store stamps records with the clock: the tests' time is the clock's (a whole second, as
# the slots are), so a timer is as far from its record's store time as from NOW.
NOW = int(time.time()) * 1000
DAY_S = 24 * 3600


def test_delivery_time_from_each_property():
    assert delivery_time({}, NOW, 3 * DAY_S) is None
    assert delivery_time({"TIMER_DELIVER_MS": str(NOW + 5000)}, NOW, 3 * DAY_S) == NOW + 5000
    assert delivery_time({"TIMER_DELAY_MS": "1500"}, NOW, 3 * DAY_S) == NOW + 1500
    assert delivery_time({"TIMER_DELAY_SEC": "7"}, NOW, 3 * DAY_S) == NOW + 7000
    # A delay wins over the absolute time, seconds over milliseconds, as in RocketMQ 5
    # (HookUtils.transformTimerMessage reads TIMER_DELAY_SEC, then TIMER_DELAY_MS, then
    # TIMER_DELIVER_MS).
    assert delivery_time({"TIMER_DELIVER_MS": str(NOW + 1), "TIMER_DELAY_SEC": "9"}, NOW,
                         3 * DAY_S) == NOW + 9000
    assert delivery_time({"TIMER_DELIVER_MS": str(NOW + 1), "TIMER_DELAY_MS": "2500"}, NOW,
                         3 * DAY_S) == NOW + 2500
    assert delivery_time({"TIMER_DELAY_MS": "2500", "TIMER_DELAY_SEC": "9"}, NOW,
                         3 * DAY_S) == NOW + 9000


def test_a_delay_level_drops_the_timer_properties():
    props = {"DELAY": "3", "TIMER_DELIVER_MS": str(NOW + 1), "TIMER_DELAY_SEC": "9",
             "TIMER_DELAY_MS": "5", "KEYS": "k"}
    yield_to_delay_level(props)
    assert props == {"DELAY": "3", "KEYS": "k"}
    assert delivery_time(props, NOW, 3 * DAY_S) is None
    for level in ("0", "-1", "x", ""):  # no delay level as the store reads one: the timer stays
        props = {"DELAY": level, "TIMER_DELAY_SEC": "9"}
        yield_to_delay_level(props)
        assert props == {"DELAY": level, "TIMER_DELAY_SEC": "9"}


@pytest.mark.parametrize("props", [
    {"TIMER_DELAY_SEC": "soon"}, {"TIMER_DELAY_MS": "-1"}, {"TIMER_DELIVER_MS": "9" * 30},
    {"TIMER_DELIVER_MS": str(NOW + 4 * DAY_S * 1000)}, {"TIMER_DELAY_SEC": str(3 * DAY_S + 1)},
])
def test_timer_properties_out_of_range_are_refused(props):
    with pytest.raises(TimerError):
        delivery_time(props, NOW, 3 * DAY_S)


def _broker(store, tmp_path):
    topics = SimpleNamespace(create_in_send_message_back_method=lambda *a, **k: None)
    return SimpleNamespace(store=store, topics=topics,
                           store_config=SimpleNamespace(store_path_root_dir=str(tmp_path)))


def _park(store, body: bytes, deliver_ms: int) -> None:
    props = {"UNIQ_KEY": body.decode()}
    park(props, "RealTopic", 0, deliver_ms)
    store.put_message_nowait(MessageExtBrokerInner(
        topic=TIMER_TOPIC, body=body, properties=props, properties_string=properties_to_string(props),
        born_host=("127.0.0.1", 1)))


def _delivered(store) -> list[bytes]:
    result = store.get_message("g", "RealTopic", 0, 0, 100)
    return [r.body for data in result.messages for r in iter_records(data)]


def test_due_timers_go_out_in_time_order_and_never_early(store_factory, tmp_path):
    store = store_factory()
    for body, delay in ((b"c", 3_000), (b"a", 1_000), (b"b", 1_500)):
        _park(store, body, NOW + delay)
    store.wait_dispatched(timeout=10)
    timer = TimerMessageService(_broker(store, tmp_path))
    assert timer.scan(NOW) == 3
    assert timer.deliver_due(NOW + 999) == 0  # a second's slot opens at its end, never before
    assert timer.deliver_due(NOW + 2_000) == 2
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"a", b"b"]
    assert timer.pending == 1
    assert timer.next_due() == NOW + 3_000
    assert timer.deliver_due(NOW + 3_000) == 1
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"a", b"b", b"c"]


def test_a_restart_files_again_what_was_pending_and_nothing_delivered(store_factory, tmp_path):
    store = store_factory()
    for number in range(6):
        _park(store, f"t{number}".encode(), NOW + 1_000 * (number + 1))
    store.wait_dispatched(timeout=10)
    timer = TimerMessageService(_broker(store, tmp_path))
    timer.scan(NOW)
    timer.deliver_due(NOW + 3_000)  # t0..t2 out
    timer.save(refresh_min=True)
    _park(store, b"late", NOW + 10_000)  # written after the save: new to the next start
    store.wait_dispatched(timeout=10)
    again = TimerMessageService(_broker(store, tmp_path))
    again.recover()
    assert again.pending == 4  # t3, t4, t5, late
    assert again.deliver_due(NOW + 20_000) == 4
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"t0", b"t1", b"t2", b"t3", b"t4", b"t5", b"late"]


def test_a_round_delivers_at_most_its_budget_and_the_rest_follows(store_factory, tmp_path):
    store = store_factory()
    for number in range(5):
        _park(store, f"b{number}".encode(), NOW + 1_000)  # one slot, all due together
    store.wait_dispatched(timeout=10)
    timer = TimerMessageService(_broker(store, tmp_path))
    timer.scan(NOW)
    assert timer.deliver_due(NOW + 1_000, budget=2) == 2
    assert timer.pending == 3
    assert timer.delivered_up_to < NOW + 1_000  # the slot is not done yet
    assert timer.deliver_due(NOW + 1_000, budget=2) == 2
    assert timer.deliver_due(NOW + 1_000, budget=2) == 1
    assert (timer.pending, timer.delivered_up_to) == (0, NOW + 1_000)
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"b0", b"b1", b"b2", b"b3", b"b4"]


def test_a_timer_further_off_than_the_roll_window_is_stored_again_and_delivered_on_time(
        store_factory, tmp_path, monkeypatch):
    # A timer of up to 3 days (timerMaxDelaySec) waited in the record stored when it was sent,
    # whose CommitLog file expires after 72 h: it was silently dropped. Now it is stored again
    # in the timer topic every ROLL_WINDOW_MS (2 days; 2 s here), as RocketMQ rolls it.
    monkeypatch.setattr(timer_module, "ROLL_WINDOW_MS", 2_000)
    store = store_factory()
    now = int(time.time() * 1000)  # (stored within milliseconds of it)
    _park(store, b"far", now + 5_000)
    _park(store, b"near", now + 1_000)
    store.wait_dispatched(timeout=10)
    timer = TimerMessageService(_broker(store, tmp_path))
    assert timer.scan(now) == 2
    assert timer.next_due() < now + 5_000  # filed for its roll, 2 s after it was stored
    assert timer.deliver_due(now + 4_000) == 2  # near delivered, far rolled
    store.wait_dispatched(timeout=10)
    assert (_delivered(store), timer.rolled, timer.delivered) == ([b"near"], 1, 1)
    timer.save(refresh_min=True)
    again = TimerMessageService(_broker(store, tmp_path))  # a restart: the roll is not repeated
    again.recover()
    assert again.pending == 1
    assert timer.scan(now + 4_000) == 1  # the copy
    timer.deliver_due(now + 4_999)  # (rolled again, maybe: the test's clock stands, the store's runs)
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"near"]  # never early
    timer.scan(now + 4_999)
    assert timer.deliver_due(now + 6_000) == 1
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"near", b"far"]
    assert timer.pending == 0


def test_filing_starts_no_further_than_the_queues_end(store_factory, tmp_path):
    # The saved progress counted units a crash cost the queue (its tail was never flushed):
    # the timers parked next take those offsets again, and were never filed.
    store = store_factory()
    _park(store, b"before", NOW + 1_000)
    store.wait_dispatched(timeout=10)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "timercheck.json").write_text(json.dumps(
        {"scanOffset": 5, "minPendingOffset": 5, "deliveredUpTo": NOW - 60_000}))
    timer = TimerMessageService(_broker(store, tmp_path))
    timer.recover()
    _park(store, b"after", NOW + 2_000)
    store.wait_dispatched(timeout=10)
    assert timer.scan(NOW) == 1
    assert timer.deliver_due(NOW + 2_000) == 1
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"after"]


def test_the_periodic_save_writes_off_the_event_loop_and_never_after_the_last(store_factory,
                                                                             tmp_path):
    store = store_factory()
    _park(store, b"p", NOW + 60_000)
    store.wait_dispatched(timeout=10)
    timer = TimerMessageService(_broker(store, tmp_path))
    timer.scan(NOW)

    def advance() -> None:
        timer.scan_offset += 1
        timer._dirty = True

    written = write_aside_then_stop(timer.file, lambda: timer._save_aside(refresh_min=False),
                                    advance, timer.stop)
    assert [json.loads(text)["scanOffset"] for text in written] == [1, 2]
    assert json.loads((tmp_path / "config" / "timercheck.json").read_text())["scanOffset"] == 2
