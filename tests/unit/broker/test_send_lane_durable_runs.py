"""The send lane's runs where answers wait (SYNC_FLUSH, SYNC_MASTER): a read's sends put as one
run, one flush request up to its end for the sends whose WAIT asks for it, each answer given as
a single send's would be (test_send_lane.py holds the answers and the files to the processor's,
run by run, under every durability)."""

from __future__ import annotations

import asyncio

from cluster.broker import send_lane
from cluster.remoting.codes import RequestCode, ResponseCode
from storage import commitlog
from storage.flush import GroupCommitRequest
from tests.unit.broker.test_send_lane import FIXED_NOW, _frame, _plain, _run


def test_a_run_under_sync_master_waits_for_its_slave(tmp_path, monkeypatch):
    # SYNC_MASTER with a slave that acknowledges only when the test says: a run's answers are
    # held until then, and given together, each PUT_OK, once its end is acknowledged.
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    held: dict = {}

    def with_slave(broker):
        ha = broker.ha_service
        ha.connection_count = lambda: 1  # (a slave in sync, as far as the send knows)
        held["ha"] = ha
        runs = held.setdefault("runs", [])
        put_plain_run = broker.store.put_plain_run

        def counted(puts):
            runs.append(len(puts))
            return put_plain_run(puts)

        broker.store.put_plain_run = counted

    async def scenario():
        task = asyncio.create_task(_run(tmp_path, _plain(16), True, with_slave, bursts=[8],
                                        durability=("ASYNC_FLUSH", "SYNC_MASTER")))
        waited = 0
        deadline = asyncio.get_running_loop().time() + 30
        while not task.done() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)  # (the slave acknowledges once the sends wait for it)
            ha = held.get("ha")
            if ha is not None and len(ha.waiters):
                waited += 1
                ha.notify_transfer_some(ha.store.get_max_phy_offset())
        return await task, waited

    (answers, _, _), waited = asyncio.run(scenario())
    assert [code for code, *_ in answers] == [ResponseCode.SUCCESS] * 16
    assert sorted(opaque for _, opaque, *_ in answers) == list(range(1, 17))
    assert held["runs"] == [8]  # (the first read's sends one by one: the topic was new)
    assert waited >= 2  # (each read's sends waited for the slave: the single ones, the run)


def test_a_run_whose_flush_fails_answers_each_send_flush_disk_timeout(tmp_path, monkeypatch):
    # Under SYNC_FLUSH a run's sends wait for the run's one flush request: a disk that refuses
    # it answers each of them FLUSH_DISK_TIMEOUT (stored all the same), as a single send's.
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)

    def failing_flush(broker):
        def refused(next_offset, wait):
            request = GroupCommitRequest(next_offset, 2000)
            request.complete(False)
            return request

        broker.store.request_flush = refused

    answers, _, _ = asyncio.run(_run(tmp_path, _plain(16), True, failing_flush, bursts=[8],
                                     durability=("SYNC_FLUSH", "ASYNC_MASTER")))
    codes = {opaque: code for code, opaque, *_ in answers}
    assert sorted(codes) == list(range(1, 17))
    assert [codes[opaque] for opaque in range(9, 17)] == [ResponseCode.FLUSH_DISK_TIMEOUT] * 8


def _waits(waits: list[str]) -> list[bytes]:
    return [_frame({"code": RequestCode.SEND_MESSAGE_V2, "topic": "TopicTest", "queue_id": i % 4,
                    "tags": None, "keys": None, "uniq": f"{i:032X}", "body": b"x" * 100,
                    "wait": wait, "twist": None}, i + 1) for i, wait in enumerate(waits)]


def test_a_runs_sends_that_ask_no_wait_are_answered_without_the_flush(tmp_path, monkeypatch):
    # Under SYNC_FLUSH a run asks one flush up to its own end, waited for only by the sends
    # whose WAIT asks for it (a run of none asks none: the flush is only woken); WAIT=false
    # answers go at once, as the single put's. The flush never completes here: the waiting
    # answers come after the timeout, the others before them.
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    asked = []

    def never_flushed(broker):
        store = broker.store

        def hold(next_offset, wait):
            asked.append((next_offset, wait, store.commit_log.get_max_offset()))
            return GroupCommitRequest(next_offset, 300) if wait else None

        store.request_flush = hold

    waits = (["true"] * 8 + ["false", "true", "false", "false", "true", "false", "false", "false"]
             + ["false"] * 8)
    answers, _, _ = asyncio.run(_run(tmp_path, _waits(waits), True, never_flushed, bursts=[8],
                                     durability=("SYNC_FLUSH", "ASYNC_MASTER")))
    assert [(wait, next_offset == end) for next_offset, wait, end in asked] == [
        (True, True), (False, True)]  # (reads 2 and 3; the first read went one by one)
    order = [opaque for _, opaque, *_ in answers]
    codes = {opaque: code for code, opaque, *_ in answers}
    second = [opaque for opaque in order if 9 <= opaque <= 16]
    assert second == [9, 11, 12, 14, 15, 16, 10, 13]
    assert [codes[opaque] for opaque in (10, 13)] == [ResponseCode.FLUSH_DISK_TIMEOUT] * 2
    assert all(codes[opaque] == ResponseCode.SUCCESS for opaque in (9, 11, 12, 14, 15, 16))
    assert all(codes[opaque] == ResponseCode.SUCCESS for opaque in range(17, 25))


def test_an_answer_that_fails_in_a_run_fails_only_its_send(tmp_path, monkeypatch):
    # A bug answering one send of a durable run: that send is answered SYSTEM_ERROR, the others
    # of its run as they would be (all of them are stored).
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)

    def broken_answer(broker):
        processor = broker.server.lanes[int(RequestCode.SEND_MESSAGE_V2)]._processor
        answer_put = processor.answer_put

        def sometimes(command, *args, **kwargs):
            if command.opaque == 11:
                raise RuntimeError("a bug")
            return answer_put(command, *args, **kwargs)

        processor.answer_put = sometimes

    answers, _, (_, counts) = asyncio.run(_run(
        tmp_path, _plain(16), True, broken_answer, bursts=[8],
        durability=("SYNC_FLUSH", "ASYNC_MASTER")))
    codes = {opaque: code for code, opaque, *_ in answers}
    assert sorted(codes) == list(range(1, 17))
    assert counts[3] == 16  # (the store's puts: every send stored)
    assert codes[11] == ResponseCode.SYSTEM_ERROR
    assert all(codes[opaque] == ResponseCode.SUCCESS for opaque in codes if opaque != 11)
