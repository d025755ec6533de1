"""ASYNC_FLUSH wakes its flush thread only once there is enough to flush (issue 14): a wakeup
per put took the interpreter lock from the put path for a round that flushed nothing."""

from __future__ import annotations

from storage.flush import FlushRealTimeService
from storage.mapped_file import OS_PAGE_SIZE
from tests.conftest import make_message


def test_the_flush_is_woken_once_least_pages_are_dirty(store_factory):
    store = store_factory(start=False)
    service = store.flush_service
    if not isinstance(service, FlushRealTimeService):  # built at load() for ASYNC_FLUSH
        service = FlushRealTimeService(store.commit_log.mapped_file_queue, store.config,
                                       store.checkpoint)
        store.flush_service = service
    wakeups = []
    service.wakeup = lambda: wakeups.append(store.commit_log.get_max_offset())
    least = store.config.flush_commit_log_least_pages * OS_PAGE_SIZE
    body = b"x" * 1000
    while store.commit_log.get_max_offset() < least - 2000:
        store.put_message_nowait(make_message(body=body))
    assert wakeups == []
    while store.commit_log.get_max_offset() < least + 2000:
        store.put_message_nowait(make_message(body=body))
    assert wakeups
    assert wakeups[0] >= least
