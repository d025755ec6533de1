"""SYNC_FLUSH: the puts of one group-commit round share one request (GroupCommitService.
request_flush), and each still learns whether its own bytes were flushed."""

from __future__ import annotations

import time

from storage.config import FlushDiskType
from storage.flush import GroupCommitRequest, GroupCommitService
from tests.conftest import make_message


def _service(store_factory) -> tuple[object, GroupCommitService]:
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, start=False)
    return store, GroupCommitService(store.commit_log.mapped_file_queue, store.checkpoint)


def test_puts_of_one_round_share_its_request_until_the_flush_thread_takes_it(store_factory):
    _, service = _service(store_factory)
    first = service.request_flush(100, 3000)
    assert service.request_flush(300, 3000) is first
    assert service.request_flush(200, 3000) is first
    assert first.next_offset == 300  # the round's newest end: covers every older one
    service.on_wait_end()  # the flush thread takes the round
    second = service.request_flush(400, 3000)
    assert second is not first
    assert first.next_offset == 300  # a taken round's request no longer moves


def test_a_request_put_back_for_the_next_round_is_not_joined(store_factory):
    # (its deadline is an older put's: a new put would time out early with it)
    _, service = _service(store_factory)
    old = GroupCommitRequest(100, 3000)
    old.deadline -= 1.0
    service.put_request(old)
    assert service.request_flush(200, 3000) is not old


def test_every_put_of_a_running_store_learns_its_own_bytes_are_flushed(store_factory):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert isinstance(store.flush_service, GroupCommitService)
    ends = []
    for _ in range(20):  # (faster than the flush thread's rounds: some share a request)
        result, request = store.put_message_nowait(make_message(body=b"x" * 100))
        ends.append((result.append.next_offset, request))
    for end, request in ends:
        assert request.wait(5)
        assert request.flushed_to >= end
    assert store.commit_log.mapped_file_queue.flushed_where >= ends[-1][0]


def test_requests_are_resolved_with_where_the_flush_stood(store_factory):
    store, service = _service(store_factory)
    store.put_message_nowait(make_message(body=b"y" * 100))
    end = store.commit_log.get_max_offset()
    request = service.request_flush(end, 3000)
    service.on_wait_end()
    deadline = time.monotonic() + 5
    while not request.done() and time.monotonic() < deadline:
        service._do_commit()
    assert request.flush_ok
    assert request.flushed_to >= end


def test_a_blocking_put_whose_own_bytes_were_flushed_is_put_ok_though_its_round_failed():
    from storage.errors import PutMessageStatus
    from storage.message_store import DefaultMessageStore

    class Result:
        status = PutMessageStatus.PUT_OK
        append = type("Append", (), {"next_offset": 100})()

    shared = GroupCommitRequest(200, 0)
    shared.flushed_to = 150
    shared.complete(False)  # the round's newest end was not reached; this put's was
    assert DefaultMessageStore._await_flush(Result(), shared).status is PutMessageStatus.PUT_OK
    later = Result()
    later.append = type("Append", (), {"next_offset": 200})()
    assert DefaultMessageStore._await_flush(later, shared).status \
        is PutMessageStatus.FLUSH_DISK_TIMEOUT
