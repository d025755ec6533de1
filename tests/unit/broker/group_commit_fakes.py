"""What the loop group commit's tests share (test_loop_group_commit*.py): stores whose group
commit the running loop drives, with the native syncer or one the test ends by hand."""

from __future__ import annotations

import asyncio
import functools
import os
import threading

from cluster.broker.loop_group_commit import LoopGroupCommitService
from storage.config import FlushDiskType


def open_store(store_factory, loop, syncer_factory=None, **overrides):
    """A SYNC_FLUSH store whose group commit the running loop drives."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, start=False, **overrides)
    store.start(group_commit=functools.partial(LoopGroupCommitService, loop=loop,
                                               syncer_factory=syncer_factory))
    assert isinstance(store.flush_service, LoopGroupCommitService)
    return store


async def settled(requests, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not all(r.done() for r in requests) and loop.time() < deadline:
        await asyncio.sleep(0.002)
    return all(r.done() for r in requests)


class ManualSyncer:
    """A syncer whose rounds end when the test says (and sync nothing): what the loop hands
    it, and when, is then exact."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self.calls: list[list[tuple[int, int]]] = []
        self.busy = False
        self.running = True
        self.synced = 0
        self._ended = threading.Event()
        self._outcome: int | None = None

    def fileno(self) -> int:
        return self._read

    def sync(self, spans) -> None:
        assert not self.busy
        assert self._outcome is None
        self.calls.append([(start, end) for _, start, end in spans])
        self.busy = True
        self._ended.clear()

    def end(self, rc: int = 0, synced: int | None = None) -> None:
        self.synced = len(self.calls[-1]) if synced is None else synced
        self.busy, self._outcome = False, rc
        # (The eventfd first: a shutdown waiting on _ended may stop the syncer, closing it.)
        os.write(self._write, b"!")
        self._ended.set()

    def result(self) -> int | None:
        try:
            os.read(self._read, 64)
        except BlockingIOError:
            pass
        rc, self._outcome = self._outcome, None
        return rc

    def wait(self, timeout: float) -> bool:
        return not self.busy or self._ended.wait(timeout)

    def stop(self) -> None:
        if self.abandoned:
            return
        self.running = False
        os.close(self._read)
        os.close(self._write)

    abandoned = False

    def abandon(self) -> None:
        self.abandoned = True


def manual_store(store_factory, loop, syncer=None, **overrides):
    syncer = syncer or ManualSyncer()
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, start=False, **overrides)
    store.start(group_commit=functools.partial(
        LoopGroupCommitService, loop=loop, syncer_factory=lambda: syncer, idle_round_s=3600))
    return store, syncer


async def until(condition, timeout=2.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition() and loop.time() < deadline:
        await asyncio.sleep(0.001)
    return condition()
