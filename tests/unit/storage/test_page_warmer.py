"""The page warmer: what it asks the kernel to populate, and that a store using it keeps every
byte (it populates pages the writer has claimed, ahead of the writer, and changes nothing)."""

from __future__ import annotations

import errno
import importlib
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


def _recorder(rc: int = 0):
    calls = []

    def populate(mm, start, end):
        calls.append((start, end))
        return rc

    return calls, populate


def test_it_asks_for_claimed_pages_ahead_a_megabyte_or_more_at_a_time():
    calls, populate = _recorder()
    warmer = PageWarmer(populate)
    f = FakeFile(base=1 << 30, allocated=4 << 20, mm=FakeMap())
    warmer.after_claim(f, 1000)
    warmer.warm_pending()
    assert calls == [(1000, 4 << 20)]  # up to the claim, not past it
    warmer.after_claim(f, 2000)  # nothing new claimed: no request
    f.allocated_position = (4 << 20) + STEP // 2
    warmer.after_claim(f, 3000)  # less than a step more: wait for more
    warmer.warm_pending()
    assert len(calls) == 1
    f.allocated_position = 64 << 20
    warmer.after_claim(f, 4000)
    warmer.warm_pending()
    assert calls[-1] == (4 << 20, 4000 + AHEAD)  # from where the last request ended, AHEAD at most
    assert warmer.warmed_bytes == (4 << 20) - 1000 + (4000 + AHEAD - (4 << 20))


def test_a_new_file_starts_at_the_writer():
    calls, populate = _recorder()
    warmer = PageWarmer(populate)
    warmer.after_claim(FakeFile(0, 8 << 20, FakeMap()), 100)
    warmer.warm_pending()
    warmer.after_claim(FakeFile(1 << 30, 4 << 20, FakeMap()), 500)
    warmer.warm_pending()
    assert calls == [(100, 8 << 20), (500, 4 << 20)]


def test_a_kernel_that_cannot_populate_is_asked_once():
    calls, populate = _recorder(errno.EINVAL)
    warmer = PageWarmer(populate)
    f = FakeFile(0, 8 << 20, FakeMap())
    warmer.after_claim(f, 0)
    warmer.warm_pending()
    f.allocated_position = 32 << 20
    warmer.after_claim(f, 10)
    warmer.warm_pending()
    assert len(calls) == 1
    assert not warmer.supported
    assert warmer.warmed_bytes == 0


def test_a_closed_mapping_is_left_alone():
    calls, populate = _recorder()
    warmer = PageWarmer(populate)
    closed = FakeMap()
    closed.closed = True
    warmer.after_claim(FakeFile(0, 8 << 20, closed), 0)
    warmer.warm_pending()
    assert calls == []


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
        assert warmer is not None
        ledger = Ledger()
        for i in range(3500):
            ledger.put(store, MessageExtBrokerInner(topic="Warm", body=bytes([i % 251]) * 1500,
                                                    properties={"KEYS": f"k{i}"}))
        deadline = time.monotonic() + 10
        while warmer.warmed_bytes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert warmer.supported is False or warmer.warmed_bytes > 0
        store.wait_dispatched(timeout=30)
        assert_store_holds(store, ledger)
        assert_recovers_exactly(store, ledger, tmp_path / "crash")
    finally:
        store.shutdown()


def test_ranges_asked_once_are_populated_once():
    calls, populate = _recorder()
    warmer = PageWarmer(populate)
    target = FakeFile(0, 0, FakeMap())
    warmer.warm_once(target, 0, 4096 * 5)
    warmer.warm_pending()
    warmer.warm_pending()
    assert calls == [(0, 4096 * 5)]


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

