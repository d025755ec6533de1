"""AsideWriter: config files written on a thread of their own, never older over newer."""

from __future__ import annotations

import threading

from cluster.broker.json_config import AsideWriter, JsonConfigFile
from cluster.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager


class _Gate:
    """A write that waits until let through, counting the writes made."""

    def __init__(self) -> None:
        self.writes = 0
        self.entered = threading.Event()
        self.go = threading.Event()

    def write(self) -> bool:
        self.entered.set()
        assert self.go.wait(10)
        self.writes += 1
        return True


def test_asks_during_a_write_share_the_next_one():
    gate = _Gate()
    writer = AsideWriter(gate.write, "test writer")
    first = writer.ask()
    assert gate.entered.wait(10)  # the first write is under way, held
    later = [writer.ask() for _ in range(50)]
    gate.go.set()
    assert first.result(10)
    assert all(f.result(10) for f in later)
    assert writer.wait_idle(10)
    assert gate.writes == 2  # one for the first ask, one for the fifty that came meanwhile
    writer.close(10)


def test_close_writes_what_was_asked_and_later_asks_write_in_the_caller():
    gate = _Gate()
    writer = AsideWriter(gate.write, "test writer")
    asked = writer.ask()
    gate.go.set()
    writer.close(10)
    assert asked.done()
    assert asked.result()
    after = writer.ask()  # written before ask returns
    assert after.done()
    assert after.result()
    assert gate.writes == 2


def test_an_asker_that_gave_up_gets_no_answer_and_the_others_do():
    gate = _Gate()
    writer = AsideWriter(gate.write, "test writer")
    writer.ask()
    assert gate.entered.wait(10)
    gave_up, kept = writer.ask(), writer.ask()
    assert gave_up.cancel()
    gate.go.set()
    assert kept.result(10)
    assert gave_up.cancelled()
    writer.close(10)


def test_a_failing_write_answers_false_and_the_writer_goes_on(caplog):
    outcomes = iter([RuntimeError("bug"), True])

    def write() -> bool:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    writer = AsideWriter(write, "test writer")
    assert writer.ask().result(10) is False
    assert writer.ask().result(10) is True
    assert any("writing test writer failed" in r.getMessage() for r in caplog.records)
    writer.close(10)


def test_an_older_snapshot_never_replaces_a_newer_one(tmp_path):
    config = JsonConfigFile(str(tmp_path / "groups.json"))
    older, newer = config.next_sequence(), config.next_sequence()
    assert config.persist('{"v": 2}', newer)
    assert config.persist('{"v": 1}', older)  # (a later state is on disk: nothing to do)
    assert config.load() == {"v": 2}


def test_the_caller_and_the_writer_race_and_the_last_state_is_on_disk(tmp_path):
    # A group created by a heartbeat is written aside while an admin's update is written by
    # its own thread: whichever finishes last, the file ends with both.
    groups = SubscriptionGroupManager(str(tmp_path / "subscriptionGroup.json"), auto_create=True)
    for n in range(200):
        groups.find(f"auto-{n}")  # each asks the writer
        if n % 20 == 0:
            groups.update(SubscriptionGroupConfig(f"admin-{n}"))  # written in this thread
    assert groups.wait_written(10)
    groups.close(10)
    table = JsonConfigFile(groups.file.path).load()["subscriptionGroupTable"]
    assert {f"auto-{n}" for n in range(200)} | {f"admin-{n}" for n in range(0, 200, 20)} \
        <= set(table)


def test_without_a_thread_the_asker_writes_and_a_later_ask_tries_again(monkeypatch):
    writes = []
    writer = AsideWriter(lambda: writes.append(1) or True, "test writer")
    real_start = threading.Thread.start

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    first = writer.ask()
    assert first.done()
    assert first.result()
    assert writes == [1]
    assert writer.wait_idle(1)  # nothing left waiting for a thread that never came
    monkeypatch.setattr(threading.Thread, "start", real_start)
    assert writer.ask().result(10)
    assert writes == [1, 1]
    writer.close(10)


def test_the_last_ask_is_what_a_change_made_before_it_waits_for():
    gate = _Gate()
    writer = AsideWriter(gate.write, "test writer")
    assert writer.last_asked().result(0)  # none asked: nothing to wait for
    asked = writer.ask()
    assert writer.last_asked() is asked
    gate.go.set()
    assert asked.result(10)
    writer.close(10)
