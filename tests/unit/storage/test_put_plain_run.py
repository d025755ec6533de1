"""A run of common sends put together (``put_plain_run``, ``CommitLog.append_plain_run``)
against the same sends put one at a time.

Three stores take the same messages: one in runs through the compiled core, one in runs through
the pure twin, one a message at a time through ``append_plain``. A run may stop early (a file's
end, blocks to claim): the caller then puts the rest one by one, falling back to the general
put as the send lane does. Files, queue offsets, answers and ConsumeQueues must end the same.
"""

from __future__ import annotations

import tempfile
import time as real_time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import commitlog
from storage.config import FlushDiskType
from storage.errors import AppendMessageError, ServiceNotAvailableError
from storage.message import MessageExtBrokerInner
from storage.message_id import host_to_bytes
from tests.unit.storage.test_put_plain import (
    FIXED_NOW,
    _commit_log_bytes,
    _consume_queue_bytes,
    _messages,
    _open,
)

_compiled = pytest.mark.skipif(commitlog._append_plain_run_compiled is None,
                               reason="no compiled core")


def _put_one(store, put: tuple) -> tuple:
    """One message as a caller without runs puts it: the one-step put, else the general one."""
    done = store.commit_log.append_plain(*put)
    if done is not None:
        return done[:4]
    topic, _, queue_id, flag, body, props, sys_flag, born_ts, host, reconsume = put
    born = ("127.0.0.1", 40000) if host == host_to_bytes("127.0.0.1", 40000) else None
    assert born is not None
    result, _ = store.put_message_nowait(MessageExtBrokerInner(
        topic, body, queue_id, flag, None, props, sys_flag, born_ts, born, reconsume))
    append = result.append
    return append.wrote_offset, append.wrote_bytes, append.logics_offset, append.msg_id


def _put_runs(store, puts: list[tuple], sizes: list[int], run) -> list[tuple]:
    answers: list[tuple] = []
    start = 0
    index = 0
    while start < len(puts):
        size = sizes[index % len(sizes)]
        index += 1
        chunk = puts[start:start + size]
        results, error = run(chunk)
        assert error is None
        answers.extend(result[:4] for result in results)
        for put in chunk[len(results):]:  # (what the run left: one by one, as the lane does)
            answers.append(_put_one(store, put))
        start += size
    return answers


@_compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_messages, sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4),
       warm=st.booleans())
def test_runs_write_what_single_puts_write_compiled_and_pure(messages, sizes, warm):
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(commitlog, "time", FIXED_NOW)
        stores = [_open(Path(folder, name), warm_commit_log_pages=warm)
                  for name in ("compiled", "pure", "single")]
        compiled, pure, single = stores
        patch.setattr(pure.commit_log, "append_plain", pure.commit_log._append_plain_pure)
        try:
            host = host_to_bytes("127.0.0.1", 40000)
            puts = [(topic, topic.encode(), queue_id, flag, body, props, sys_flag, born_ts,
                     host, reconsume)
                    for topic, queue_id, flag, body, props, sys_flag, born_ts, _, reconsume, _
                    in messages]
            answers = [
                _put_runs(compiled, puts, sizes, compiled.commit_log.append_plain_run),
                _put_runs(pure, puts, sizes, pure.commit_log._append_plain_run_pure),
                [_put_one(single, put) for put in puts],
            ]
            assert answers[0] == answers[2]
            assert answers[1] == answers[2]
            logs = [_commit_log_bytes(store) for store in stores]
            assert logs[0] == logs[2]
            assert logs[1] == logs[2]
            tables = [store.commit_log.topic_queue_table for store in stores]
            assert tables[0] == tables[2]
            assert tables[1] == tables[2]
            for store in stores:
                store.wait_dispatched()
            queues = [_consume_queue_bytes(store) for store in stores]
            assert queues[0] == queues[2]
            assert queues[1] == queues[2]
        finally:
            for store in stores:
                store.shutdown()


def _ready(store) -> bytes:
    """Put until the one-step put takes messages (the file made, blocks claimed)."""
    host = host_to_bytes("127.0.0.1", 40000)
    while store.put_plain("TopicTest", 0, 0, b"x", "", 0, 1, host, 0) is None:
        store.put_message(MessageExtBrokerInner("TopicTest", b"x", 0, 0, None, "", 0, 1,
                                                ("127.0.0.1", 1)))
    return host


def _run_of(host: bytes, count: int, body: bytes = b"m") -> list[tuple]:
    return [("TopicTest", b"TopicTest", 0, 0, body, "A\x01B\x02", 0, 1, host, 0)] * count


@pytest.mark.parametrize("pure", [False, True])
def test_a_run_that_fails_writes_none_of_it_is_refused_once_and_frees_the_lock(
        store_factory, monkeypatch, pure):
    store = store_factory(mapped_file_size_commit_log=1 << 20, warm_commit_log_pages=True)
    if store.commit_log.page_warmer is None:
        pytest.skip("no page warmer here")
    if not pure and commitlog._append_plain_run_compiled is None:
        pytest.skip("no compiled core")
    if pure:
        monkeypatch.setattr(store.commit_log, "append_plain_run",
                            store.commit_log._append_plain_run_pure)
    host = _ready(store)
    end = store.commit_log.get_max_offset()
    next_offset = store.commit_log.topic_queue_table[("TopicTest", 0)]
    after_claim = store.commit_log.page_warmer.after_claim

    def broken(*_args):
        raise RuntimeError("warmer bug")

    monkeypatch.setattr(store.commit_log.page_warmer, "after_claim", broken)
    results, error = store.put_plain_run(_run_of(host, 5))
    # The run's records go in together or not at all: the refusal is the first one's, and the
    # caller puts the rest one by one.
    assert results == []
    assert isinstance(error, AppendMessageError)
    assert "warmer bug" in str(error)
    assert isinstance(error.__cause__, RuntimeError)
    assert store.commit_log.get_max_offset() == end
    assert store.commit_log.topic_queue_table[("TopicTest", 0)] == next_offset
    assert all(entry[0] < end for entry in store.commit_log.appended)  # (none for dispatch)
    assert store.commit_log.begin_time_in_lock == 0.0
    assert not store.commit_log.put_lock.locked()
    assert store.stats.put_message_failed_times == 1
    assert bytes(store.commit_log.mapped_file_queue.mapped_files[-1].mm[
        end % (1 << 20):end % (1 << 20) + 4096]) == bytes(4096)
    monkeypatch.setattr(store.commit_log.page_warmer, "after_claim", after_claim)
    results, error = store.put_plain_run(_run_of(host, 2))
    assert error is None
    assert [result[2] for result in results] == [next_offset, next_offset + 1]
    assert [result[0] for result in results] == [end, end + results[0][1]]


def test_a_run_stops_at_a_body_over_max_message_size_and_counts_what_it_put(store_factory):
    store = store_factory(mapped_file_size_commit_log=1 << 20, max_message_size=100)
    host = _ready(store)
    before = (store.stats.put_message_times_total, store.stats.topic_put_times["TopicTest"],
              sum(store.stats.put_latency_buckets))
    puts = _run_of(host, 2) + _run_of(host, 1, b"z" * 101) + _run_of(host, 2)
    results, error = store.put_plain_run(puts)
    assert len(results) == 2
    assert error is None
    after = (store.stats.put_message_times_total, store.stats.topic_put_times["TopicTest"],
             sum(store.stats.put_latency_buckets))
    assert after == (before[0] + 2, before[1] + 2, before[2] + 2)  # (one put each)


def test_a_run_under_sync_flush_is_written_and_its_caller_asks_for_the_flush(store_factory):
    # The run is one append, as under ASYNC_FLUSH; which of its sends wait for the disk is
    # the caller's to say (their WAIT property: the send lane), in one request up to its end.
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH,
                          mapped_file_size_commit_log=1 << 20)
    host = _ready(store)
    end = store.commit_log.get_max_offset()
    results, error = store.put_plain_run(_run_of(host, 3))
    assert error is None
    assert len(results) == 3
    assert results[0][0] == end
    new_end = results[-1][0] + results[-1][1]
    assert store.commit_log.get_max_offset() == new_end
    request = store.request_flush(new_end, True)
    assert request is not None
    assert request.wait(5.0)
    assert request.flush_ok
    assert store.commit_log.mapped_file_queue.flushed_where >= new_end
    assert store.request_flush(new_end, False) is None  # (none waits: the flush only woken)


def test_a_store_that_takes_no_puts_refuses_the_whole_run(store_factory):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host = _ready(store)
    store.shutdown()
    with pytest.raises(ServiceNotAvailableError):
        store.put_plain_run(_run_of(host, 3))


@_compiled
def test_the_compiled_run_leaves_what_it_cannot_take_to_the_caller(store_factory):
    # Arguments of the wrong kind (the pure put words them) stop the run there, nothing of
    # them written; a run of nothing is nothing.
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    host = _ready(store)
    end = store.commit_log.get_max_offset()
    odd = ("TopicTest", b"TopicTest", 0, 0, "not bytes", "", 0, 1, host, 0)
    results, error = store.commit_log.append_plain_run([*_run_of(host, 1), odd, "x"])
    assert len(results) == 1
    assert error is None
    assert store.commit_log.get_max_offset() == end + results[0][1]
    assert store.commit_log.append_plain_run([]) == ([], None)
    assert store.commit_log.append_plain_run(["x", odd]) == ([], None)
    with pytest.raises(TypeError):
        store.commit_log.append_plain_run((odd,))


def _twins(store, pure: bool, monkeypatch):
    """The store's CommitLog on the compiled run (skipped where there is none) or the pure."""
    if pure:
        monkeypatch.setattr(store.commit_log, "append_plain_run",
                            store.commit_log._append_plain_run_pure)
    elif commitlog._append_plain_run_compiled is None:
        pytest.skip("no compiled core")


def _twin_store(store_factory, pure: bool, monkeypatch):
    """(a store ready for plain puts, the born host), its CommitLog's run as ``_twins`` says."""
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    _twins(store, pure, monkeypatch)
    return store, _ready(store)


def _failing_to_set(kind: type, name: str) -> type:
    """A MappedFile class whose ``name`` cannot be set (it reads as the instance holds it)."""

    def read(self):
        return self.__dict__.get(name, 0)

    def refuse(self, value):
        raise RuntimeError("accounting bug")

    return type("Failing", (kind,), {name: property(read, refuse)})


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("failing", ["store_timestamp", "wrote_position"])
def test_a_run_whose_accounting_fails_after_the_write_is_undone_and_refused(
        store_factory, monkeypatch, pure, failing):
    # The records are in the file, then accounting for them fails (the file's store time, or
    # its wrote position, cannot be set): the queue offsets, the entries for dispatch and the
    # file's store time go back to what they were, the bytes are zeroed, the run is refused;
    # the next run takes the same offsets.
    store, host = _twin_store(store_factory, pure, monkeypatch)
    log = store.commit_log
    end = log.get_max_offset()
    next_offset = log.topic_queue_table[("TopicTest", 0)]
    mapped_file = log.mapped_file_queue.mapped_files[-1]
    stamp = mapped_file.store_timestamp
    kind = type(mapped_file)
    mapped_file.__class__ = _failing_to_set(kind, failing)
    later = SimpleNamespace(time=lambda: real_time.time() + 100, monotonic=real_time.monotonic)
    try:
        monkeypatch.setattr(commitlog, "time", later)  # (a store time the file never had)
        results, error = store.put_plain_run(
            [*_run_of(host, 2), ("Other", b"Other", 3, 0, b"o", "", 0, 1, host, 0)])
    finally:
        mapped_file.__class__ = kind
        monkeypatch.setattr(commitlog, "time", real_time)
    assert mapped_file.store_timestamp == stamp
    assert results == []
    assert isinstance(error, AppendMessageError)
    assert "accounting bug" in str(error)
    assert log.get_max_offset() == end
    assert log.topic_queue_table[("TopicTest", 0)] == next_offset
    assert ("Other", 3) not in log.topic_queue_table
    assert all(entry[0] < end for entry in log.appended)  # (dispatch may have taken others)
    assert log.begin_time_in_lock == 0.0
    assert not log.put_lock.locked()
    assert store.stats.put_message_failed_times == 1
    position = end % (1 << 20)
    assert bytes(mapped_file.mm[position:position + 512]) == bytes(512)
    results, error = store.put_plain_run(_run_of(host, 2))
    assert error is None
    assert [(result[0], result[2]) for result in results] == [
        (end, next_offset), (end + results[0][1], next_offset + 1)]


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("failing", ["store_timestamp", "wrote_position"])
@pytest.mark.parametrize("queue", [("TopicTest", 0), ("Other", 3)])
def test_one_put_whose_accounting_fails_after_the_write_is_undone_and_refused(
        store_factory, monkeypatch, pure, failing, queue):
    # As above for a run of one, which the compiled put accounts for without the run's
    # dictionaries: its queue's next offset goes back to what it was (a queue it made is
    # forgotten), its entry for dispatch is taken back, the put is refused.
    store, host = _twin_store(store_factory, pure, monkeypatch)
    log = store.commit_log
    end = log.get_max_offset()
    before = log.topic_queue_table.get(queue)
    mapped_file = log.mapped_file_queue.mapped_files[-1]
    kind = type(mapped_file)
    mapped_file.__class__ = _failing_to_set(kind, failing)
    topic, queue_id = queue
    try:
        results, error = store.put_plain_run(
            [(topic, topic.encode(), queue_id, 0, b"o", "", 0, 1, host, 0)])
    finally:
        mapped_file.__class__ = kind
    assert results == []
    assert isinstance(error, AppendMessageError)
    assert log.get_max_offset() == end
    assert log.topic_queue_table.get(queue) == before
    assert all(entry[0] < end for entry in log.appended)
    assert not log.put_lock.locked()
    results, error = store.put_plain_run(
        [(topic, topic.encode(), queue_id, 0, b"o", "", 0, 1, host, 0)])
    assert error is None
    assert [(result[0], result[2]) for result in results] == [(end, before or 0)]


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("clock", ["time", "monotonic"])
def test_a_run_whose_clock_fails_writes_nothing_and_frees_the_lock(
        store_factory, monkeypatch, pure, clock):
    store, host = _twin_store(store_factory, pure, monkeypatch)
    end = store.commit_log.get_max_offset()

    def broken():
        raise RuntimeError("clock bug")

    clocks = {"time": real_time.time, "monotonic": real_time.monotonic, clock: broken}
    monkeypatch.setattr(commitlog, "time", SimpleNamespace(**clocks))
    results, error = store.commit_log.append_plain_run(_run_of(host, 3))
    assert results == []
    assert isinstance(error, RuntimeError)
    assert store.commit_log.begin_time_in_lock == 0.0
    assert not store.commit_log.put_lock.locked()
    assert store.commit_log.get_max_offset() == end


@_compiled
def test_a_run_with_a_transient_store_pool_is_the_pure_ones(store_factory, monkeypatch, tmp_path):
    # (the pool's write buffer is the pure method's to write: the compiled run hands it over)
    results = []
    for pure in (False, True):
        store = store_factory(mapped_file_size_commit_log=1 << 20,
                              transient_store_pool_enable=True, commit_interval_commit_log=10,
                              store_path_root_dir=str(tmp_path / f"pure-{pure}"))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(commitlog, "time", FIXED_NOW)
            _twins(store, pure, patch)
            host = _ready(store)
            assert store.commit_log.mapped_file_queue.mapped_files[-1].write_buffer is not None
            done, error = store.put_plain_run(_run_of(host, 3))
            assert error is None
            results.append([result[:4] for result in done])
    assert len(results[0]) == 3
    assert results[0] == results[1]
