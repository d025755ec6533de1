"""A put that fails at any step leaves nothing behind, and the next put works.

Failures are injected at each step of the put path (the field checks, the encoder, the batch
decoder, the clock, the file roll, the block claim, the record write cut off midway or after
its last byte, the hand-over to dispatch, the wake-up hook, an interrupt) for single puts,
batches, delayed messages and transaction prepare and commit records. After each: no in-lock
timer, no queue offset, nothing for dispatch, no bytes past the end of the log; the caller's
message as it was; the next put lands right after the last acknowledged one; dispatch and a
reopened store (clean shutdown, and a crash right then) hold exactly the acknowledged messages.
"""

from __future__ import annotations

import errno
import struct
import time
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.commitlog as commitlog_module
import storage.mapped_file as mapped_file_module
from storage import put_checks
from storage.errors import (
    AppendMessageError,
    CreateMappedFileError,
    DiskNotWritableError,
    MessageIllegalError,
    PutMessageError,
)
from storage.mapped_file import MappedFile
from storage.message import (
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    MessageExtBatch,
)
from storage.message_store import DefaultMessageStore
from storage.record import BatchEntry, encode_batch_body
from tests.conftest import make_message, small_config
from tests.unit.storage.store_checks import (
    Ledger,
    assert_recovers_exactly,
    assert_store_holds,
    commit_all,
)


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt/SystemExit arriving in the middle of a put."""


def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _emfile(*_args, **_kwargs):
    raise OSError(errno.EMFILE, "Too many open files")


# -- faults: each installs itself with a monkeypatch context --------------------------------------
def _fault_pack_into(store, mp):
    # The original bug: the record encoder (then PREFIX_V4.pack_into) raising under the lock.
    def failing(*_args):
        raise struct.error("argument out of range")

    mp.setattr(commitlog_module, "encode_record_into", failing)
    mp.setattr(commitlog_module, "encode_batch_into", failing)


def _encode_aside(real, target, pos, rest) -> tuple[bytearray, list[int]]:
    """Run an encoder into a scratch copy; returns it and the sizes of the records written."""
    scratch = bytearray(len(target))
    written = real(scratch, pos, *rest)
    sizes = [written] if isinstance(written, int) else [entry[1] for entry in written[0]]
    return scratch, sizes


def _patch_encoders(mp, make):
    for name in ("encode_record_into", "encode_batch_into"):
        mp.setattr(commitlog_module, name, make(getattr(commitlog_module, name)))


def _fault_torn_write(store, mp):
    def make(real):
        def torn(target, pos, *rest):
            scratch, sizes = _encode_aside(real, target, pos, rest)
            half = sum(sizes) // 2
            target[pos : pos + half] = scratch[pos : pos + half]
            raise RuntimeError("injected: the write stopped halfway")
        return torn

    _patch_encoders(mp, make)


def _fault_whole_write(store, mp):
    def make(real):
        def whole(*args):
            real(*args)
            raise RuntimeError("injected: failed after the record's last byte")
        return whole

    _patch_encoders(mp, make)


def _fault_second_record(store, mp):
    # A batch written halfway: the first record is whole, the second fails.
    real = commitlog_module.encode_batch_into

    def second(target, pos, *rest):
        scratch, sizes = _encode_aside(real, target, pos, rest)
        if len(sizes) < 2:
            return real(target, pos, *rest)
        target[pos : pos + sizes[0]] = scratch[pos : pos + sizes[0]]
        raise RuntimeError("injected: the second record failed")

    mp.setattr(commitlog_module, "encode_batch_into", second)


def _fault_claim(store, mp):
    mp.setattr(MappedFile, "ensure_allocated", _enospc)


def _fault_create(store, mp):
    mp.setattr(mapped_file_module, "create_sized_file", _enospc)


def _fault_create_other(store, mp):
    mp.setattr(mapped_file_module, "create_sized_file", _emfile)


class _HandOver(deque):
    """The put path's deque for dispatch, which can be told to fail its next extend halfway."""

    armed = False

    def extend(self, items):
        if not self.armed:
            return super().extend(items)
        self.armed = False
        self.append(next(iter(items)))  # half handed over, then the failure
        raise MemoryError("injected")


def _fault_handover(store, mp):
    commit_log = store.commit_log
    if not isinstance(commit_log.appended, _HandOver):  # kept: what is left in it is checked
        commit_log.appended = _HandOver(commit_log.appended, maxlen=commit_log.appended.maxlen)
    mp.setattr(commit_log.appended, "armed", True)


def _fault_clock(store, mp):
    class Clock:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def time():
            raise OSError(errno.EINVAL, "injected clock failure")

    mp.setattr(commitlog_module, "time", Clock)


def _fault_on_append(store, mp):
    def hook():
        raise RuntimeError("injected: waking dispatch failed")

    mp.setattr(store.commit_log, "on_append", hook)


def _fault_encoder(store, mp):
    def failing(*_args, **_kwargs):
        raise ValueError("injected encoder failure")

    mp.setattr(store.commit_log, "_record_total", failing)  # sizing the record, before the lock
    mp.setattr(commitlog_module, "batch_layout", failing)


def _fault_checks(store, mp):
    def failing(*_args, **_kwargs):
        raise RuntimeError("injected check failure")

    mp.setattr(put_checks, "properties_bytes", failing)
    mp.setattr(put_checks, "batch_fields", failing)


def _fault_batch_decoder(store, mp):
    def failing(_body):
        raise struct.error("injected decoder failure")

    # batch_layout reads the body before the lock (in C when built, else decode_batch_body)
    mp.setattr(commitlog_module, "batch_layout", lambda body, *_: failing(body))


def _fault_interrupt(store, mp):
    def interrupted(*_args, **_kwargs):
        raise Interrupt

    mp.setattr(commitlog_module, "encode_record_into", interrupted)
    mp.setattr(commitlog_module, "encode_batch_into", interrupted)


# fault -> (install, what the put raises: None when it succeeds, or a callable of the case)
FAULTS = {
    "pack_into": (_fault_pack_into, AppendMessageError),
    "torn_write": (_fault_torn_write, AppendMessageError),
    "whole_write": (_fault_whole_write, AppendMessageError),
    "second_record": (_fault_second_record,
                      lambda kind, roll: AppendMessageError if kind == "batch" else None),
    "claim": (_fault_claim, DiskNotWritableError),
    "create": (_fault_create, lambda kind, roll: DiskNotWritableError if roll else None),
    "create_other": (_fault_create_other, lambda kind, roll: CreateMappedFileError if roll else None),
    "handover": (_fault_handover, AppendMessageError),
    "clock": (_fault_clock, AppendMessageError),
    "on_append": (_fault_on_append, None),
    "encoder": (_fault_encoder, MessageIllegalError),
    "checks": (_fault_checks, MessageIllegalError),
    "batch_decoder": (_fault_batch_decoder,
                      lambda kind, roll: MessageIllegalError if kind == "batch" else None),
    "interrupt": (_fault_interrupt, Interrupt),
}
KINDS = ("single", "batch", "delayed", "prepared", "commit")


def _expected(fault: str, kind: str, roll: bool):
    outcome = FAULTS[fault][1]
    if outcome is None or isinstance(outcome, type):
        return outcome
    return outcome(kind, roll)


# -- puts ------------------------------------------------------------------------------------------
def _payload(kind: str, size: int, ledger: Ledger, tag: str):
    """A message (or batch and its bodies) of about ``size`` bytes of body."""
    body = (tag.encode() * (size // len(tag) + 1))[:size]
    if kind == "batch":
        parts = [body[: size // 2], body[size // 2 :] or b"x"]
        batch = MessageExtBatch(topic="Batched", body=encode_batch_body(
            [BatchEntry(0, part, f"KEYS\x01{tag}-{i}\x02") for i, part in enumerate(parts)]),
            queue_id=1, properties={"CLUSTER": "DefaultCluster"}, born_host=("127.0.0.1", 40000),
            born_timestamp=int(time.time() * 1000))
        return batch, parts
    if kind == "delayed":
        return make_message(topic="Later", body=body, queue_id=2, properties={"DELAY": "2"}), None
    if kind == "prepared":
        return make_message(topic="Half", body=body, sys_flag=TRANSACTION_PREPARED_TYPE), None
    if kind == "commit":
        prepared = [a for a in ledger.acked if not a.in_queue]
        return make_message(topic="Committed", body=body, sys_flag=TRANSACTION_COMMIT_TYPE,
                            prepared_transaction_offset=prepared[-1].offset if prepared else 0), None
    return make_message(body=body, queue_id=0), None


def _put(store, ledger: Ledger, payload):
    item, bodies = payload
    if bodies is not None:
        return ledger.put_batch(store, item, bodies)
    return ledger.put(store, item)


def _message_state(item):
    if isinstance(item, MessageExtBatch):
        return (item.topic, item.queue_id, item.body, dict(item.properties), item.sys_flag)
    return (item.topic, item.queue_id, item.properties_string, dict(item.properties), item.sys_flag,
            item.store_timestamp, item.queue_offset, item.commit_log_offset)


def _non_blank_entries(store):
    return [entry for entry in store.commit_log.appended if entry[4] is not None]


def _attempt(store, ledger, payload, fault, monkeypatch):
    """Put ``payload`` with ``fault`` installed; the exception it raised, or None."""
    with monkeypatch.context() as mp:
        FAULTS[fault][0](store, mp)
        try:
            _put(store, ledger, payload)
        except (PutMessageError, Interrupt) as exc:
            return exc
    return None


# -- the matrix ----------------------------------------------------------------------------------
@pytest.mark.parametrize("roll", [False, True], ids=["mid-file", "at-a-file-roll"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_put_failing_at_any_step_leaves_nothing_behind(store_factory, tmp_path, monkeypatch,
                                                         fault, kind, roll):
    store = store_factory(start=False)
    ledger = Ledger()
    _put(store, ledger, _payload("prepared", 100, ledger, "p0"))  # a commit's prepared record
    if roll:  # 4 KiB files: two of these and the next one needs a new file
        for i in range(2):
            _put(store, ledger, _payload("single", 1400, ledger, f"fill{i}"))
    payload = _payload(kind, 1400 if roll else 300, ledger, "victim")
    state = _message_state(payload[0])
    table = dict(store.commit_log.topic_queue_table)
    entries = _non_blank_entries(store)
    max_before = store.commit_log.mapped_file_queue.get_max_wrote_position()

    raised = _attempt(store, ledger, payload, fault, monkeypatch)

    expected = _expected(fault, kind, roll)
    assert store.commit_log.begin_time_in_lock == 0
    if expected is None:
        assert raised is None
    else:
        assert type(raised) is expected, raised
        if isinstance(raised, PutMessageError):
            assert str(raised)
            assert "Traceback" not in str(raised)
        assert _message_state(payload[0]) == state  # not half rewritten (delay level)
        assert store.commit_log.topic_queue_table == table
        assert _non_blank_entries(store) == entries
        max_after = store.commit_log.mapped_file_queue.get_max_wrote_position()
        # Only a file ended by a blank may have moved the end (a whole record of its own).
        assert max_after in (max_before, store.commit_log.roll_next_file(max_before))
    assert_store_holds(store, ledger, dispatched=False)

    # The same message again, untouched by the failure, then one more: both right behind.
    if expected is not None:
        _put(store, ledger, payload)
    last = ledger.acked[-1]
    _put(store, ledger, _payload("single", 50, ledger, "after"))
    assert ledger.acked[-1].offset in (last.offset + _size_of(store, last.offset),
                                       store.commit_log.roll_next_file(last.offset))
    if kind == "delayed":
        record = store.look_message_by_offset(last.offset)
        assert record.topic == SCHEDULE_TOPIC
        assert record.properties["REAL_TOPIC"] == "Later"
        assert record.properties["REAL_QID"] == "2"
    assert_store_holds(store, ledger)
    assert_recovers_exactly(store, ledger, tmp_path)


def _size_of(store, offset: int) -> int:
    return store.look_message_by_offset(offset).total_size


def test_the_page_cache_never_looks_busy_after_a_put_raised_in_the_lock(store_factory, monkeypatch):
    # The reported bug: a put raised inside the lock, the in-lock timer stayed set, and after
    # osPageCacheBusyTimeOutMills every later send was refused as OS_PAGECACHE_BUSY.
    store = store_factory(os_page_cache_busy_time_out_mills=50)
    with monkeypatch.context() as mp:
        _fault_pack_into(store, mp)
        with pytest.raises(AppendMessageError):
            store.put_message(make_message())
    time.sleep(0.1)
    assert store.runtime_info()["pageCacheLockTimeMills"] == "0"
    assert store.put_message(make_message(body=b"after")).append.wrote_offset == 0


def test_a_flag_that_does_not_fit_int32_is_refused_before_the_lock(store_factory):
    store = store_factory(os_page_cache_busy_time_out_mills=50)
    with pytest.raises(MessageIllegalError, match=r"flag 8589934592 does not fit"):
        store.put_message(make_message(flag=8589934592))
    time.sleep(0.1)
    assert store.put_message(make_message()).append.wrote_offset == 0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("queue_id", 1 << 31, "queueId"),
    ("flag", -(1 << 31) - 1, "flag"),
    ("sys_flag", 1 << 40, "sysFlag"),
    ("reconsume_times", 1 << 31, "reconsumeTimes"),
    ("born_timestamp", 1 << 63, "bornTimestamp"),
    ("prepared_transaction_offset", -(1 << 63) - 1, "preparedTransactionOffset"),
    ("flag", "7", "flag must be an integer"),
    ("topic", "t\ud800", "topic cannot be written as UTF-8"),
    ("topic", "t" * 128, "the limit is 127"),
    ("properties_string", "K\x01\ud800\x02", "properties cannot be written as UTF-8"),
    ("body", "text", "body must be bytes"),
    ("born_host", ("not-an-ip", 1), "born host"),
    ("born_host", ("127.0.0.1", 1 << 40), "port"),
])
def test_every_field_is_checked_against_its_slot_in_the_record(store_factory, field, value, message):
    store = store_factory(start=False)
    msg = make_message()
    setattr(msg, field, value)
    with pytest.raises(MessageIllegalError, match=message):
        store.put_message(msg)
    assert store.get_max_phy_offset() == 0
    assert store.commit_log.topic_queue_table == {}


@pytest.mark.parametrize(("field", "value"), [
    ("queue_id", 1 << 31), ("flag", 1 << 33), ("sys_flag", -(1 << 32)),
    ("reconsume_times", 1 << 31), ("born_timestamp", 1 << 64), ("topic", "t" * 200),
    ("body", None), ("properties", None),
])
def test_batch_fields_are_checked_before_the_lock(store_factory, field, value):
    store = store_factory(start=False)
    batch = MessageExtBatch(topic="B", body=encode_batch_body([BatchEntry(0, b"x", "")]),
                            born_host=("127.0.0.1", 1))
    setattr(batch, field, value)
    with pytest.raises(MessageIllegalError):
        store.put_messages(batch)
    assert store.get_max_phy_offset() == 0


def test_a_started_store_keeps_taking_puts_through_repeated_failures(store_factory, monkeypatch):
    # With every service running: refusals do not latch (page cache, running flags) and
    # dispatch sees exactly the acknowledged messages.
    store = store_factory(os_page_cache_busy_time_out_mills=20)
    ledger = Ledger()
    for round_ in range(5):
        for fault in ("torn_write", "claim", "handover", "pack_into"):
            assert _attempt(store, ledger, _payload("single", 200, ledger, "x"), fault,
                            monkeypatch) is not None
        time.sleep(0.03)
        _put(store, ledger, _payload("single", 200, ledger, f"ok{round_}"))
    assert store.running_flags.write_refusal() is None
    assert_store_holds(store, ledger)


def test_a_failing_arrival_listener_does_not_stop_dispatch(store_factory):
    store = store_factory()
    seen = []

    def listener(arrivals):
        seen.extend(arrival.commit_log_offset for arrival in arrivals)
        raise RuntimeError("listener bug")

    store.add_arrival_listener(listener)
    ledger = Ledger()
    for i in range(3):
        _put(store, ledger, _payload("single", 30, ledger, f"m{i}"))
    assert_store_holds(store, ledger)
    # Told of the queue's newest record each run (every record, when each had a run of its own).
    offsets = [a.offset for a in ledger.acked]
    assert seen
    assert seen[-1] == offsets[-1]
    assert set(seen) <= set(offsets)


# -- random failure points over a sequence of puts -------------------------------------------------
_STEP = st.tuples(
    st.sampled_from(KINDS),
    st.one_of(st.none(), st.sampled_from(sorted(FAULTS))),
    st.integers(min_value=1, max_value=1800),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, min_size=1, max_size=12), pool=st.booleans())
def test_random_failures_over_a_sequence_of_puts_leave_exactly_the_acknowledged(
        tmp_path_factory, monkeypatch, steps, pool):
    root = tmp_path_factory.mktemp("random")
    store = DefaultMessageStore(small_config(root / "store", transient_store_pool_enable=pool))
    store.load()
    ledger = Ledger()
    try:
        for index, (kind, fault, size) in enumerate(steps):
            payload = _payload(kind, size, ledger, f"s{index}-")
            state = _message_state(payload[0])
            if fault is None:
                _put(store, ledger, payload)
                continue
            acked = len(ledger.acked)
            raised = _attempt(store, ledger, payload, fault, monkeypatch)
            assert store.commit_log.begin_time_in_lock == 0
            if raised is not None:
                assert len(ledger.acked) == acked
                assert _message_state(payload[0]) == state
            if index % 3 == 0:
                commit_all(store)
                store.reput.do_reput()
        commit_all(store)
        assert_store_holds(store, ledger)
    except BaseException:
        store.shutdown()
        raise
    assert_recovers_exactly(store, ledger, root)
