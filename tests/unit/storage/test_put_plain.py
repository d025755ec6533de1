"""The one-step put of a sender's common message (``put_plain``) and the one-call dispatch of
what it appended (``dispatch_plain``), against the general put and the dispatchers.

Two stores take the same messages: one through ``put_plain`` (falling back to the general
path whenever it answers None, as the send processor does) and ``dispatch_plain``, one through
the general path and the dispatchers only. Their CommitLog files, ConsumeQueue files, index and
answers must be the same, byte for byte. Tiny files make both sides roll often, so the
fallback at a file's end is exercised too.
"""

from __future__ import annotations

import os
import tempfile
import time as real_time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import commitlog, plain_run
from storage.config import FlushDiskType
from storage.errors import AppendMessageError, MessageIllegalError, ServiceNotAvailableError
from storage.message import MessageExtBrokerInner, properties_to_string
from storage.message_id import host_to_bytes
from storage.message_store import DefaultMessageStore
from storage.results import GetMessageStatus
from tests.conftest import small_config

FIXED_NOW = SimpleNamespace(time=lambda: 1_700_000_000.123, monotonic=real_time.monotonic)

_names = st.sampled_from(["TopicTest", "orders", "日志"])
_hosts = st.sampled_from([("127.0.0.1", 40000), ("10.1.2.3", 65535), ("::1", 1234)])
_props = st.fixed_dictionaries(
    {"UNIQ_KEY": st.text("0123456789ABCDEF", min_size=32, max_size=32)},
    optional={"TAGS": st.sampled_from(["TagA", "TagB", "标签"]),
              "KEYS": st.lists(st.sampled_from(["k1", "k2", "键"]), min_size=1, max_size=3)
              .map(" ".join),
              "WAIT": st.sampled_from(["true", "false"]),
              "extra": st.text(max_size=40).filter(lambda s: "\x01" not in s and "\x02" not in s)},
).map(lambda p: properties_to_string({**p, "CLUSTER": "DefaultCluster"}))
_messages = st.lists(st.tuples(
    _names, st.integers(0, 3), st.integers(-(1 << 31), (1 << 31) - 1), st.binary(max_size=600),
    _props, st.sampled_from([0, 1, 2, 3, 0x40]), st.integers(-(1 << 63), (1 << 63) - 1),
    _hosts, st.integers(0, 16), st.sampled_from([None, None, "delay", "commit"])),
    min_size=1, max_size=25)


def _open(root: Path, **overrides) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root, **overrides))
    store.load()
    store.start()
    return store


def _commit_log_bytes(store: DefaultMessageStore) -> list[bytes]:
    return [bytes(f.mm[: f.wrote_position]) for f in store.commit_log.mapped_file_queue]


def _consume_queue_bytes(store: DefaultMessageStore) -> dict:
    return {(topic, queue_id): [bytes(f.mm[: f.wrote_position]) for f in queue.mapped_file_queue]
            for topic, queues in store.consume_queue_table.items()
            for queue_id, queue in queues.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_messages)
def test_put_plain_writes_what_the_general_put_writes(messages):
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(commitlog, "time", FIXED_NOW)
        plain, general = _open(Path(folder, "plain")), _open(Path(folder, "general"))
        general.reput.dispatch_plain = None
        try:
            for (topic, queue_id, flag, body, given_props, given_flag, born_ts, host, reconsume,
                 special) in messages:
                # What the send processor leaves to the general put: delays, transactions.
                props = given_props + ("DELAY\x012\x02" if special == "delay" else "")
                sys_flag = given_flag | (8 if special == "commit" else 0)
                fields = (topic, body, queue_id, flag, None, props, sys_flag, born_ts, host,
                          reconsume)
                done = None if special else plain.put_plain(
                    topic, queue_id, flag, body, props, sys_flag, born_ts, host_to_bytes(*host),
                    reconsume)
                if done is None:
                    result, _ = plain.put_message_nowait(MessageExtBrokerInner(*fields))
                    done = (result.append.logics_offset, result.append.next_offset,
                            result.append.msg_id, None)
                result, _ = general.put_message_nowait(MessageExtBrokerInner(*fields))
                assert done == (result.append.logics_offset, result.append.next_offset,
                                result.append.msg_id, None)
            assert _commit_log_bytes(plain) == _commit_log_bytes(general)
            plain.wait_dispatched()
            general.wait_dispatched()
            assert _consume_queue_bytes(plain) == _consume_queue_bytes(general)
            for topic in {m[0] for m in messages}:
                for queue_id in range(4):
                    a = plain.get_message("g", topic, queue_id, 0, 64)
                    b = general.get_message("g", topic, queue_id, 0, 64)
                    assert (a.status, a.body, a.max_offset) == (b.status, b.body, b.max_offset)
                for key in ("k1", "键"):
                    assert plain.query_message(topic, key, 64, 0, 1 << 62).messages == \
                        general.query_message(topic, key, 64, 0, 1 << 62).messages
        finally:
            plain.shutdown()
            general.shutdown()


@pytest.mark.skipif(commitlog._append_plain_compiled is None, reason="no compiled core")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_messages, warm=st.booleans())
def test_the_compiled_one_step_put_writes_what_the_pure_one_writes(messages, warm):
    # common/_append.c against CommitLog._append_plain_pure: the same answers (None where a file
    # ends or blocks must be claimed), the same files, the same entries for dispatch (the same
    # ConsumeQueues dispatched from them); with the page warmer (on by default beyond two
    # CPUs: it claims blocks ahead of the writer) and without.
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(commitlog, "time", FIXED_NOW)
        compiled = _open(Path(folder, "compiled"), warm_commit_log_pages=warm)
        pure = _open(Path(folder, "pure"), warm_commit_log_pages=warm)
        assert warm or compiled.commit_log.page_warmer is None
        patch.setattr(pure.commit_log, "append_plain", pure.commit_log._append_plain_pure)
        # The compiled put does all of these itself, the warmer's calls included.
        patch.setattr(compiled.commit_log, "_append_plain_pure", _refuse_delegation)
        try:
            for (topic, queue_id, flag, body, props, sys_flag, born_ts, host, reconsume,
                 _) in messages:
                fields = (topic, body, queue_id, flag, None, props, sys_flag, born_ts, host,
                          reconsume)
                answers = []
                for store in (compiled, pure):
                    done = store.commit_log.append_plain(
                        topic, topic.encode(), queue_id, flag, body, props, sys_flag, born_ts,
                        host_to_bytes(*host), reconsume)
                    if done is None:  # (the general put makes the file, claims the blocks)
                        store.put_message_nowait(MessageExtBrokerInner(*fields))
                    else:
                        done = done[:4]  # (not the time in the lock)
                    answers.append(done)
                assert answers[0] == answers[1]
            assert _commit_log_bytes(compiled) == _commit_log_bytes(pure)
            assert compiled.commit_log.topic_queue_table == pure.commit_log.topic_queue_table
            compiled.wait_dispatched()  # (from the entries each put left for dispatch)
            pure.wait_dispatched()
            assert _consume_queue_bytes(compiled) == _consume_queue_bytes(pure)
        finally:
            compiled.shutdown()
            pure.shutdown()


def _taking_one_step_puts(store) -> tuple[bytes, int, int]:
    """Put until the one-step put takes a message (the file made, its blocks claimed); the born
    host, the CommitLog's end and the queue's next offset then."""
    host = host_to_bytes("127.0.0.1", 40000)
    while store.put_plain("TopicTest", 0, 0, b"x", "", 0, 1, host, 0) is None:
        store.put_message(MessageExtBrokerInner("TopicTest", b"x", 0, 0, None, "", 0, 1,
                                                ("127.0.0.1", 1)))
    return host, store.commit_log.get_max_offset(), \
        store.commit_log.topic_queue_table[("TopicTest", 0)]


def _assert_rolled_back(store, host: bytes, end: int, next_queue_offset: int) -> None:
    """A failed one-step put changed nothing, was counted, let go of the lock; the next put
    takes the queue offset the failed one would have had."""
    assert store.commit_log.begin_time_in_lock == 0.0
    assert store.stats.put_message_failed_times == 1
    assert store.commit_log.get_max_offset() == end
    assert store.commit_log.topic_queue_table[("TopicTest", 0)] == next_queue_offset
    assert not store.commit_log.put_lock.locked()
    assert store.put_plain("TopicTest", 0, 0, b"z", "", 0, 1, host, 0)[0] == next_queue_offset


def _refuse_delegation(*_args):
    raise AssertionError("the compiled put handed a plain message to the pure method")


@pytest.mark.skipif(commitlog._append_plain_compiled is None, reason="no compiled core")
def test_a_compiled_put_whose_warmer_fails_is_rolled_back_with_the_typed_refusal(store_factory,
                                                                                 monkeypatch):
    store = store_factory(mapped_file_size_commit_log=1 << 20, warm_commit_log_pages=True)
    if store.commit_log.page_warmer is None:
        pytest.skip("no page warmer here")
    host, end, next_queue_offset = _taking_one_step_puts(store)

    def broken(*_args):
        raise RuntimeError("warmer bug")

    monkeypatch.setattr(store.commit_log.page_warmer, "after_claim", broken)
    with pytest.raises(AppendMessageError, match=r"rolled back.*warmer bug"):
        store.put_plain("TopicTest", 0, 0, b"y", "", 0, 1, host, 0)
    monkeypatch.undo()
    _assert_rolled_back(store, host, end, next_queue_offset)


def test_put_plain_is_taken_for_most_messages(store_factory):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host = host_to_bytes("127.0.0.1", 40000)
    general = 0
    for _ in range(50):
        if store.put_plain("TopicTest", 0, 0, b"x" * 100, "A\x01B\x02", 0, 1, host, 0) is None:
            store.put_message_nowait(MessageExtBrokerInner("TopicTest", b"x" * 100, 0, 0, None,
                                                           "A\x01B\x02", 0, 1, ("127.0.0.1", 1)))
            general += 1
    assert general <= 2  # the file's creation, and where more blocks must be claimed
    store.wait_dispatched()
    result = store.get_message("g", "TopicTest", 0, 0, 64)
    assert result.status is GetMessageStatus.FOUND
    assert result.max_offset == 50


@pytest.mark.parametrize("properties", ["A\x01\udc80\x02", "A\x01" + "v" * 40000 + "\x02"])
def test_put_plain_leaves_text_it_cannot_write_to_the_general_path(store_factory, properties):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host = host_to_bytes("127.0.0.1", 40000)
    assert store.put_plain("TopicTest", 0, 0, b"x", properties, 0, 1, host, 0) is None
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0
    assert store.commit_log.get_max_offset() == 0


def test_put_plain_under_sync_flush_hands_back_the_flush_to_wait_for(store_factory):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH,
                          mapped_file_size_commit_log=1 << 20)
    host = host_to_bytes("127.0.0.1", 40000)
    for _ in range(3):  # the first put creates the file through the general path
        if store.put_plain("TopicTest", 0, 0, b"x", "", 0, 1, host, 0) is None:
            store.put_message(MessageExtBrokerInner("TopicTest", b"x", 0, 0, None, "", 0, 1,
                                                    ("127.0.0.1", 1)))
    queue_offset, end, _, waiter = store.put_plain("TopicTest", 0, 0, b"y", "", 0, 1, host, 0)
    assert queue_offset == 3
    assert waiter is not None
    assert waiter.wait()  # the group commit flushed it
    assert store.commit_log.mapped_file_queue.flushed_where >= end
    # WAIT=false: nothing to wait for, as the general path answers.
    assert store.put_plain("TopicTest", 0, 0, b"z", "WAIT\x01false\x02", 0, 1, host, 0,
                           wait=False)[3] is None


@pytest.mark.parametrize("text", ["", "WAIT\x01true\x02", "WAIT\x01TRUE\x02", "WAIT\x01false\x02",
                                  "A\x01b\x02WAIT\x01no\x02", "WAIT\x01\x02",
                                  "WAIT\x01true\x02WAIT\x01false\x02", "XWAIT\x01false\x02"])
def test_wait_store_msg_ok_reads_the_string_as_the_parsed_properties_do(text):
    from storage.message import string_to_properties, wait_store_msg_ok

    value = string_to_properties(text).get("WAIT")
    assert wait_store_msg_ok(text) == (value is None or value.lower() == "true")


def test_put_plain_refuses_as_the_general_put_does(store_factory):
    store = store_factory()
    host = host_to_bytes("127.0.0.1", 40000)
    with pytest.raises(MessageIllegalError):
        store.put_plain("bad/topic" * 20, 0, 0, b"x", "", 0, 1, host, 0)
    store.shutdown()
    with pytest.raises(ServiceNotAvailableError):
        store.put_plain("TopicTest", 0, 0, b"x", "", 0, 1, host, 0)


def test_a_failed_one_step_put_is_rolled_back_counted_and_frees_the_lock(store_factory,
                                                                         monkeypatch):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host, end, next_queue_offset = _taking_one_step_puts(store)

    def broken(*_args):
        raise RuntimeError("encoder bug")

    # The pure method's encoder fails (the compiled one writes in C: its failure is below).
    monkeypatch.setattr(store.commit_log, "append_plain", store.commit_log._append_plain_pure)
    monkeypatch.setattr(plain_run, "encode_record_into", broken)
    with pytest.raises(AppendMessageError, match="rolled back"):
        store.put_plain("TopicTest", 0, 0, b"y", "", 0, 1, host, 0)
    assert store.commit_log.begin_time_in_lock == 0.0
    assert store.stats.put_message_failed_times == 1
    assert store.commit_log.get_max_offset() == end
    assert store.commit_log.topic_queue_table[("TopicTest", 0)] == next_queue_offset
    monkeypatch.undo()
    assert store.put_plain("TopicTest", 0, 0, b"z", "", 0, 1, host, 0)[0] == next_queue_offset


@pytest.mark.skipif(commitlog._append_plain_compiled is None, reason="no compiled core")
def test_a_compiled_put_whose_write_fails_changes_nothing_and_frees_the_lock(store_factory,
                                                                             monkeypatch,
                                                                             tmp_path):
    store = store_factory(mapped_file_size_commit_log=1 << 20, warm_commit_log_pages=False)
    assert store.commit_log.page_warmer is None
    host, end, next_queue_offset = _taking_one_step_puts(store)
    mapped_file = store.commit_log.mapped_file_queue.mapped_files[-1]
    read_only = tmp_path / "read-only"
    read_only.write_bytes(b"")
    fd = os.open(read_only, os.O_RDONLY)
    try:
        # Every pwrite fails (EBADF), the zeroing too: the put is refused for the write's
        # error (the bytes the zeroing could not clear lie past the wrote position).
        monkeypatch.setattr(mapped_file, "_fd", fd)
        with pytest.raises(AppendMessageError, match="Bad file descriptor"):
            store.put_plain("TopicTest", 0, 0, b"y", "", 0, 1, host, 0)
    finally:
        os.close(fd)
    monkeypatch.undo()
    _assert_rolled_back(store, host, end, next_queue_offset)


def test_statistics_that_fail_do_not_fail_a_stored_message(store_factory, monkeypatch):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host = host_to_bytes("127.0.0.1", 40000)
    store.put_message(MessageExtBrokerInner("TopicTest", b"x", 0, 0, None, "", 0, 1,
                                            ("127.0.0.1", 1)))

    def broken(*_args):
        raise RuntimeError("stats bug")

    monkeypatch.setattr(store.stats, "record_put", broken)
    assert store.put_plain("TopicTest", 0, 0, b"y", "", 0, 1, host, 0)[0] == 1


@pytest.mark.skipif(commitlog._append_plain_compiled is None, reason="no compiled core")
def test_the_compiled_put_reads_the_clocks_as_the_time_module_does(store_factory, monkeypatch):
    # While storage.commitlog's clock is the time module itself, the compiled put reads the
    # clocks without calling it: the store timestamp is the wall clock's milliseconds, the time
    # in the lock a small positive number. A clock patched into that module is still the one
    # used (tests and tools do that).
    store = store_factory(mapped_file_size_commit_log=1 << 20, warm_commit_log_pages=True)
    host, end, _ = _taking_one_step_puts(store)
    assert commitlog.time is real_time
    in_lock = []
    warmer = store.commit_log.page_warmer
    if warmer is not None:  # (called in the lock: the lock's start is on the monotonic clock)
        after_claim = warmer.after_claim
        monkeypatch.setattr(warmer, "after_claim", lambda *args: (
            in_lock.append((store.commit_log.begin_time_in_lock, real_time.monotonic())),
            after_claim(*args))[1])
    before = int(real_time.time() * 1000)
    put = store.commit_log.append_plain("TopicTest", b"TopicTest", 0, 0, b"now", "", 0, 1, host, 0)
    after = int(real_time.time() * 1000)
    assert put is not None
    assert put[0] == end
    assert 0.0 <= put[4] < 1000.0
    if warmer is not None:
        begun, now = in_lock[0]
        assert 0.0 <= now - begun < 1.0
    stamp = store.commit_log.appended[-1][2]
    assert before <= stamp <= after
    assert store.commit_log.mapped_file_queue.mapped_files[-1].store_timestamp == stamp

    monkeypatch.undo()
    monkeypatch.setattr(real_time, "time", lambda: 1_600_000_000.5)
    monkeypatch.setattr(real_time, "monotonic", lambda: 42.0)
    put = store.commit_log.append_plain("TopicTest", b"TopicTest", 0, 0, b"then", "", 0, 1, host,
                                        0)
    monkeypatch.undo()  # (the store's threads read these clocks too)
    assert put is not None
    assert put[4] == 0.0  # the patched monotonic clock, read twice
    assert store.commit_log.appended[-1][2] == 1_600_000_000_500


def test_a_failing_append_hook_is_logged_and_the_put_stands(store_factory, monkeypatch, caplog):
    # Waking dispatch may fail; the message is written and answered all the same (dispatch
    # looks on its own every second), compiled and pure alike. What is not an Exception is
    # raised as it is.
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host, _end, next_queue_offset = _taking_one_step_puts(store)

    def failing():
        raise RuntimeError("injected: waking dispatch failed")

    monkeypatch.setattr(store.commit_log, "on_append", failing)
    for append in (store.commit_log.append_plain, store.commit_log._append_plain_pure):
        caplog.clear()
        store.commit_log._failures = type(store.commit_log._failures)()  # (logs at once)
        put = append("TopicTest", b"TopicTest", 0, 0, b"y", "", 0, 1, host, 0)
        assert put is not None
        assert put[2] == next_queue_offset
        next_queue_offset += 1
        assert "waking dispatch after a put failed" in caplog.text
        assert "injected: waking dispatch failed" in caplog.text

    class Stop(BaseException):
        pass

    def stopping():
        raise Stop

    monkeypatch.setattr(store.commit_log, "on_append", stopping)
    for append in (store.commit_log.append_plain, store.commit_log._append_plain_pure):
        with pytest.raises(Stop):
            append("TopicTest", b"TopicTest", 0, 0, b"z", "", 0, 1, host, 0)
        assert store.commit_log.topic_queue_table[("TopicTest", 0)] == next_queue_offset + 1
        next_queue_offset += 1  # (written before the hook ran)
    assert not store.commit_log.put_lock.locked()
