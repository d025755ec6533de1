"""A store's shutdown: stop its services, flush what they leave, write the checkpoint, unmap
everything, remove the abort file only when all of that reached the disk, let go of the lock.

A disk that refuses a last flush must not stop the files from being unmapped and the lock
released: the abort file then stays, and the next start recovers. A disk that hangs (the
CommitLog's last flush never ended: the flush service abandoned it after its wait) gets no
other sync at all, since each would hang the same way: the files are unmapped unsynced.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from storage.errors import describe_os_error

if TYPE_CHECKING:
    from storage.message_store import DefaultMessageStore

log = logging.getLogger(__name__)


def shut_down_store(store: DefaultMessageStore) -> None:
    """Shut ``store`` down; its caller makes sure this runs once."""
    for service in (store.clean_service, store.stats):
        service.shutdown()
    if store._started:
        if store.commit_service is not None:
            store.commit_service.shutdown()
        store.reput.shutdown()
        if store.commit_log.page_warmer is not None:
            store.commit_log.page_warmer.shutdown()
            store.commit_log.page_warmer = store.index_service.page_warmer = None
        if store.flush_service is not None:
            store.flush_service.shutdown()
            if store.flush_service.abandoned:
                store._cq_flusher.final_flush = False
                store._cq_flusher.shutdown()
                _close_without_syncing(store)
                return
        store._cq_flusher.shutdown()
    elif store.checkpoint is not None:
        store.reput.do_reput()
    failed = []

    def step(what: str, action) -> None:
        try:
            action()
        except OSError as exc:
            failed.append(what)
            log.error("shutdown: %s failed: %s; keeping the abort file so the next start "
                      "recovers from the checkpoint", what, describe_os_error(exc))

    step("flushing the CommitLog", store.commit_log.shutdown)
    step("flushing the ConsumeQueues", lambda: store._flush_consume_queues(0))
    if store.checkpoint is not None:
        ts = store.commit_log.mapped_file_queue.store_timestamp
        if ts:
            store.checkpoint.physic_msg_timestamp = ts
        checkpoint = store.checkpoint

        def flush_index() -> None:
            index_ts = store.index_service.flush()
            if index_ts:  # only what reached the disk
                checkpoint.index_msg_timestamp = index_ts

        step("flushing the index", flush_index)
        step("writing the checkpoint", checkpoint.shutdown)
    for queues in store.consume_queue_table.values():
        for queue in queues.values():
            step("closing a ConsumeQueue", queue.shutdown)
    step("closing the index", store.index_service.shutdown)
    if not failed and store._started and store.reput.behind() == 0 \
            and store.reput.stuck_reason is None:
        try:
            os.remove(store.config.abort_path)
        except FileNotFoundError:
            pass
    store._release_lock()


def _close_without_syncing(store: DefaultMessageStore) -> None:
    """The CommitLog's last flush never ended: the disk hangs. Any other sync on it (the
    ConsumeQueues, the index, the checkpoint: the same store root, most often the same device)
    would hang this shutdown the same way, so every file is unmapped unsynced and the lock let
    go. The abort file stays: the next start recovers from the checkpoint as it last reached
    the disk."""
    log.error("shutdown: the CommitLog's last flush did not end (the disk hangs); closing the "
              "store without syncing anything, keeping the abort file so the next start "
              "recovers")
    closers: list[Callable[[], None]] = [  # (no file time set either: metadata waits on it too)
        functools.partial(store.commit_log.mapped_file_queue.shutdown, stamp=False)]
    closers += [queue.mapped_file_queue.shutdown
                for queues in store.consume_queue_table.values() for queue in queues.values()]
    closers.append(store.index_service.close)
    if store.checkpoint is not None:
        closers.append(store.checkpoint.close)
    for close in closers:
        try:
            close()
        except OSError as exc:
            log.error("shutdown: closing a store file failed: %s", describe_os_error(exc))
    store._release_lock()


__all__ = ["shut_down_store"]
