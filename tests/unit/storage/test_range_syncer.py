"""common._storecore.RangeSyncer: one msync round at a time on a native thread, its end
signalled on an eventfd, its outcome taken once (common/_range_sync.c)."""

from __future__ import annotations

import mmap
import os
import select

import pytest

from common import speedups

RangeSyncer = getattr(speedups.store_core, "RangeSyncer", None)
pytestmark = pytest.mark.skipif(RangeSyncer is None or not hasattr(os, "eventfd"),
                                reason="the compiled core's syncer runs on Linux")

SIZE = 1 << 20


@pytest.fixture
def mapped(tmp_path):
    with open(tmp_path / "segment", "w+b") as file:
        file.truncate(SIZE)
        mm = mmap.mmap(file.fileno(), SIZE)
        yield file, mm
        mm.close()


@pytest.fixture
def syncer():
    made = RangeSyncer()
    yield made
    made.stop()


def _readable(fd: int, timeout: float = 5.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_a_round_ends_on_the_eventfd_and_its_outcome_is_taken_once(mapped, syncer):
    file, mm = mapped
    os.pwrite(file.fileno(), b"written with pwrite", 5000)  # (the CommitLog's way)
    mm[0:5] = b"mapped"[:5]
    assert syncer.result() is None  # no round yet
    syncer.sync([(mm, 0, 5), (mm, 5000, 5019)])
    assert _readable(syncer.fileno())
    assert syncer.result() == 0
    assert syncer.result() is None  # taken
    assert not _readable(syncer.fileno(), 0)  # read empty
    assert syncer.rounds == 1
    assert not syncer.busy
    assert syncer.synced == 2  # both ranges, in order
    assert syncer.sync_seconds > 0  # (msync ran: a dirty page's write-back is never free)


def test_a_round_not_taken_yet_blocks_the_next(mapped, syncer):
    _, mm = mapped
    syncer.sync([(mm, 0, 4096)])
    with pytest.raises(RuntimeError, match="in progress"):
        syncer.sync([(mm, 0, 4096)])  # ended or not: its outcome was not taken
    assert syncer.wait(5.0)
    assert syncer.result() == 0
    syncer.sync([(mm, 4096, 8192)])  # free again
    assert syncer.wait(5.0)
    assert syncer.result() == 0
    assert syncer.rounds == 2


def test_empty_ranges_make_a_round_that_syncs_nothing(mapped, syncer):
    _, mm = mapped
    syncer.sync([(mm, 100, 100), (mm, SIZE + 10, SIZE + 20)])  # (clamped to the mapping)
    assert syncer.wait(5.0)
    assert syncer.result() == 0
    assert syncer.synced == 2  # (nothing to sync counts as synced)
    assert syncer.sync_seconds < 1


@pytest.mark.parametrize(("ranges", "error"), [
    ([], ValueError),
    ([("m", 0, 1)] * 9, ValueError),
    (["not a tuple"], TypeError),
    ([("m", 0)], TypeError),
    ([("m", "0", 1)], TypeError),
    (42, TypeError),
])
def test_bad_ranges_are_refused_before_a_round_starts(mapped, syncer, ranges, error):
    _, mm = mapped
    ranges = [(mm, *r[1:]) if isinstance(r, tuple) and r[0] == "m" else r for r in ranges] \
        if isinstance(ranges, list) else ranges
    with pytest.raises(error):
        syncer.sync(ranges)
    assert not syncer.busy
    assert syncer.result() is None


def test_a_closed_mapping_is_refused(mapped, syncer):
    file, _ = mapped
    mm = mmap.mmap(file.fileno(), SIZE)
    mm.close()
    with pytest.raises(ValueError, match="closed"):
        syncer.sync([(mm, 0, 10)])
    assert not syncer.busy


def test_a_stopped_syncer_takes_no_round_and_stops_once(mapped):
    _, mm = mapped
    syncer = RangeSyncer()
    assert syncer.running
    syncer.stop()
    syncer.stop()
    assert not syncer.running
    with pytest.raises(RuntimeError, match="stopped"):
        syncer.sync([(mm, 0, 10)])
    assert syncer.wait(0.01)  # nothing in progress


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0, 0.0, 1e300])
def test_any_timeout_is_taken_without_overflow(syncer, timeout):
    # (inf once overflowed the deadline's seconds; nan waited nothing by accident)
    assert syncer.wait(timeout)  # nothing in progress: at once, whatever the timeout


def test_a_round_is_waited_for_on_a_huge_timeout(mapped, syncer):
    _, mm = mapped
    syncer.sync([(mm, 0, 4096)])
    assert syncer.wait(float("inf"))  # the round ends; a clamped deadline still waits for it
    assert syncer.result() == 0


def test_an_abandoned_syncer_is_kept_for_good_and_never_joined():
    import sys

    syncer = RangeSyncer()
    refs = sys.getrefcount(syncer)
    syncer.abandon()
    syncer.abandon()  # (once)
    assert syncer.abandoned
    assert sys.getrefcount(syncer) == refs + 1  # its thread may use it forever: never freed
    syncer.stop()  # no join: the thread could be in an msync that never returns
    assert syncer.running
