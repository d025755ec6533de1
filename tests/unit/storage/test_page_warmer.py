"""The page warmer: what it asks the kernel to populate, and that a store using it keeps every
byte (it populates pages the writer has claimed, ahead of the writer, and changes nothing)."""

from __future__ import annotations

import errno
import importlib
import os
import time

import pytest

from storage.mapped_file import MappedFile
from storage.message import MessageExtBrokerInner
from storage.message_store import DefaultMessageStore
from storage.page_warmer import AHEAD, STEP, PageWarmer
from tests.conftest import small_config
from tests.unit.storage.store_checks import Ledger, assert_recovers_exactly, assert_store_holds


class FakeFile:
    def __init__(self, base: int, allocated: int, mm) -> None:
        self.file_from_offset = base
        self.allocated_position = allocated
        self.mm = mm


class FakeMap:
    closed = False


class Recorder:
    """A Populator's interface, recording what it is asked for."""

    def __init__(self, supported: bool = True) -> None:
        self.calls: list[tuple[int, int]] = []
        self.once: list[tuple[int, int]] = []
        self.supported = supported
        self.warmed_bytes = 0

    def submit(self, mm, start, end):
        self.calls.append((start, end))
        return True

    def submit_once(self, mm, start, end):
        self.once.append((start, end))
        return True


def test_it_asks_for_claimed_pages_ahead_a_megabyte_or_more_at_a_time():
    recorder = Recorder()
    warmer = PageWarmer(recorder)
    f = FakeFile(base=1 << 30, allocated=4 << 20, mm=FakeMap())
    warmer.after_claim(f, 1000)
    assert recorder.calls == [(1000, 4 << 20)]  # up to the claim, not past it
    warmer.after_claim(f, 2000)  # nothing new claimed: no request
    f.allocated_position = (4 << 20) + STEP // 2
    warmer.after_claim(f, 3000)  # less than a step more: wait for more
    assert len(recorder.calls) == 1
    f.allocated_position = 64 << 20
    warmer.after_claim(f, 4000)
    # from where the last request ended, AHEAD at most
    assert recorder.calls[-1] == (4 << 20, 4000 + AHEAD)


def test_a_new_file_starts_at_the_writer():
    recorder = Recorder()
    warmer = PageWarmer(recorder)
    warmer.after_claim(FakeFile(0, 8 << 20, FakeMap()), 100)
    warmer.after_claim(FakeFile(1 << 30, 4 << 20, FakeMap()), 500)
    assert recorder.calls == [(100, 8 << 20), (500, 4 << 20)]


def test_a_kernel_that_cannot_populate_is_not_asked():
    recorder = Recorder(supported=False)
    warmer = PageWarmer(recorder)
    warmer.after_claim(FakeFile(0, 8 << 20, FakeMap()), 0)
    assert recorder.calls == []


def test_a_closed_mapping_is_left_alone():
    recorder = Recorder()
    warmer = PageWarmer(recorder)
    closed = FakeMap()
    closed.closed = True
    warmer.after_claim(FakeFile(0, 8 << 20, closed), 0)
    warmer.warm_once(FakeFile(0, 8 << 20, closed), 0, 4096)
    assert recorder.calls == []
    assert recorder.once == []


def test_claim_early_claims_the_next_step_before_the_writer_needs_it(tmp_path):
    mf = MappedFile(str(tmp_path / f"{0:020d}"), 64 << 20, allocate_ahead=4 << 20)
    try:
        mf.ensure_allocated(100)
        first = mf.allocated_position
        mf.claim_early(100)  # far from the claimed end: nothing
        assert mf.allocated_position == first
        mf.claim_early(first - 1000)  # within half a step: the next step is claimed now
        assert mf.allocated_position > first
    finally:
        mf.destroy(0)


def test_claim_early_leaves_a_full_disk_to_the_claim_that_matters(tmp_path, monkeypatch):
    import storage.mapped_file as module

    mf = MappedFile(str(tmp_path / f"{0:020d}"), 64 << 20, allocate_ahead=4 << 20)
    try:
        mf.ensure_allocated(100)
        claimed = mf.allocated_position

        def full(*_args):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(module, "claim", full)
        mf.claim_early(claimed - 10)  # no exception, nothing changed
        assert mf.allocated_position == claimed
        with pytest.raises(OSError, match="No space"):
            mf.ensure_allocated(claimed + 10)
    finally:
        mf.destroy(0)


@pytest.mark.skipif(importlib.util.find_spec("common._storecore") is None,
                    reason="the compiled core is not built")
def test_a_store_with_the_warmer_keeps_every_message(tmp_path):
    from common import speedups

    if speedups.store_core is None:
        pytest.skip("ROCKETDESK_PURE=1: no warmer on the pure path")
    config = small_config(tmp_path, warm_commit_log_pages=True)  # (off by default on 2 cores)
    config.mapped_file_size_commit_log = 64 << 20
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    try:
        warmer = store.commit_log.page_warmer
        if warmer is None:
            assert not speedups.store_core.Populator().supported  # only where it cannot run
            pytest.skip("this kernel cannot populate (before Linux 5.14)")
        ledger = Ledger()
        for i in range(3500):
            ledger.put(store, MessageExtBrokerInner(topic="Warm", body=bytes([i % 251]) * 1500,
                                                    properties={"KEYS": f"k{i}"}))
        deadline = time.monotonic() + 10
        while warmer.warmed_bytes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert warmer.warmed_bytes > 0
        store.wait_dispatched(timeout=30)
        assert_store_holds(store, ledger)
        assert_recovers_exactly(store, ledger, tmp_path / "crash")
    finally:
        store.shutdown()


def test_ranges_asked_once_go_beside_the_writers_range():
    recorder = Recorder()
    warmer = PageWarmer(recorder)
    warmer.warm_once(FakeFile(0, 0, FakeMap()), 0, 4096 * 5)
    assert recorder.once == [(0, 4096 * 5)]
    assert recorder.calls == []


def test_index_hash_slots_are_warmed_for_the_file_being_written_and_each_new_one(tmp_path):
    from storage.index_file import IndexService

    asked = []

    class Recording:
        def warm_once(self, mapped_file, start, end):
            asked.append((mapped_file.file_name, start, end))

    service = IndexService(str(tmp_path / "index"), hash_slot_num=100, index_num=400)
    service.use_page_warmer(Recording())
    assert asked == []  # no file yet: nothing to warm
    service.build_index("T", "k1", None, 0, 1)
    first = service.index_files[-1]
    slots_end = first._entries_base
    assert asked == [(first.mapped_file.file_name, 0, slots_end)]
    for i in range(500):  # past index_num: a second file
        service.build_index("T", f"k{i}", None, 100 + i, 2 + i)
    assert len(service.index_files) == 2
    assert asked[-1] == (service.index_files[-1].mapped_file.file_name, 0, slots_end)
    service.destroy()



# -- the native thread (common/_populator.c) -------------------------------------------------------
def _populator_class():
    from common import speedups

    if speedups.store_core is None:
        pytest.skip("the compiled core is not built, or ROCKETDESK_PURE=1")
    return speedups.store_core.Populator


def _wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    return predicate()


def _resident_kib(path: str, *fields: str) -> int:
    """Kilobytes of this process's mappings of ``path`` in ``fields`` (Rss unless named), from
    /proc/self/smaps."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(path)
            elif inside and line.split(":")[0] in (fields or ("Rss",)):
                total += int(line.split()[1])
    return total


def _dirty_kib(path: str) -> int:
    return _resident_kib(path, "Shared_Dirty", "Private_Dirty")


def test_the_populator_faults_in_a_files_pages_and_changes_no_byte(tmp_path):
    import mmap
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("MADV_POPULATE_READ/_WRITE are Linux's")
    populator = _populator_class()()
    path = tmp_path / "log"
    content = bytes(range(256)) * (4 << 12)  # 4 MiB
    path.write_bytes(content)
    with open(path, "r+b") as f:
        os.fsync(f.fileno())  # clean pages: populating for reading must leave them clean
        mm = mmap.mmap(f.fileno(), len(content))
    try:
        before = _resident_kib(str(path))
        assert populator.submit(mm, 4096, 3 << 20) is True
        if not _wait_for(lambda: populator.warmed_bytes > 0 or not populator.supported):
            pytest.fail("nothing populated within 10 s")
        if not populator.supported:
            pytest.skip("this kernel cannot populate (before Linux 5.14)")
        assert populator.warmed_bytes == (3 << 20) - 4096
        # Faulted in: the pages of the range are now resident in this mapping.
        assert _resident_kib(str(path)) - before >= ((3 << 20) - 8192) // 1024
        # ... for reading (the CommitLog's writer uses pwrite): no page was made writable.
        assert _dirty_kib(str(path)) == 0
        assert populator.submit(mm, 10, 10) is False  # an empty range: nothing to do
        # An index file's hash slots are written through the mapping: populated for writing.
        assert populator.submit_once(mm, 3 << 20, 4 << 20) is True
        assert _wait_for(lambda: populator.warmed_bytes == (4 << 20) - 4096)
        assert _dirty_kib(str(path)) >= ((1 << 20) - 4096) // 1024
        assert mm[:] == content
    finally:
        populator.stop()
        mm.close()
    assert path.read_bytes() == content
    assert populator.running is False
    assert populator.submit(mmap.mmap(-1, 4096), 0, 4096) is False  # stopped: nothing queued
    populator.stop()  # again: harmless


def test_a_closed_mapping_is_refused_and_a_dropped_populator_stops_its_thread():
    import mmap
    import os
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the thread runs on Linux only (MADV_POPULATE_WRITE)")
    # By the threads' ids, not their count: another thread of the process (a test runner's,
    # one an earlier test left to end) may come or go meanwhile.
    def tasks() -> set[str]:
        return set(os.listdir("/proc/self/task"))

    before = tasks()
    populator = _populator_class()()
    started = tasks() - before  # (its thread, and rarely another's)
    assert started
    mm = mmap.mmap(-1, 1 << 20)
    mm.close()
    with pytest.raises(ValueError, match="closed"):
        populator.submit(mm, 0, 4096)
    assert populator.running is True
    del populator  # its thread is stopped and joined on the way out
    assert started - tasks(), "the dropped populator's thread still runs"

