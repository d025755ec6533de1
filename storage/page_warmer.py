"""PageWarmer: fault in the CommitLog's pages ahead of the writer (and an index file's hash
slots once), on a thread of its own.

The first write to each 4 KiB page of a mapped file traps into the kernel, which finds and
zeroes a page-cache page for it: about 10 µs a page here, 2.5 µs of every 1 KiB message, paid
under the put lock while holding the interpreter lock (measured: a 32-message batch put costs
4 µs a message into fresh pages, 1.3 µs into populated ones). RocketMQ pre-touches whole
files (``warmMapedFileEnable``) for the same reason. Here the writer, each time it has claimed
blocks ahead (``MappedFile.ensure_allocated``), hands the newly claimed range to this thread,
which populates it with Linux's MADV_POPULATE_WRITE without the interpreter lock
(``common/_storecore.c``): the faults are taken on the other core, before the writer gets
there, and no byte changes.

Only with the compiled core (the pure path cannot let go of the interpreter lock for this) and
where the kernel can (Linux 5.14 on). A warmer that falls behind costs nothing: the writer
faults in whatever is not warm yet, as it does without one.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

from common import speedups
from storage.config import MessageStoreConfig
from storage.service_thread import ServiceThread

log = logging.getLogger(__name__)

# Requests smaller than this wait for more (one wakeup and one system call per megabyte).
STEP = 1 << 20
# How far ahead of the writer pages are populated, at most (and never past the claimed blocks).
AHEAD = 16 << 20


class PageWarmer(ServiceThread):
    """Populates the newest claimed range of the file being written."""

    name = "PageWarmer"

    def __init__(self, populate: Callable[[object, int, int], int]) -> None:
        super().__init__()
        self._populate = populate
        self._target: tuple[object, int, int] | None = None  # (mapped file, start, end)
        self._once: list[tuple[object, int, int]] = []  # whole ranges asked for once
        self.supported = True
        self.warmed_bytes = 0
        self.requested_end = 0  # log offset up to which pages have been asked for

    def after_claim(self, mapped_file, end: int) -> None:
        """The writer's call after writing up to ``end`` of ``mapped_file``: ask for the
        claimed pages ahead of it, a megabyte or more at a time. Never waits."""
        base = mapped_file.file_from_offset
        upto = min(mapped_file.allocated_position, end + AHEAD)
        if self.supported and base + upto >= self.requested_end + STEP:
            self._target = (mapped_file, max(end, self.requested_end - base), upto)
            self.requested_end = base + upto
            self.wakeup()

    def run_once(self) -> None:
        self.wait_for_running(1000)
        self.warm_pending()

    def warm_once(self, mapped_file, start: int, end: int) -> None:
        """Populate ``[start, end)`` of ``mapped_file`` soon, once: an index file's hash slots,
        which its writer touches at random (a fault a key until all are in). Never waits."""
        if self.supported:
            self._once.append((mapped_file, start, end))
            self.wakeup()

    def warm_pending(self) -> None:
        """Populate what the writer asked for last, if anything (on this service's thread)."""
        target, self._target = self._target, None
        if target is not None:
            self._warm(*target)
        while self._once:
            self._warm(*self._once.pop(0))

    def _warm(self, mapped_file, start: int, end: int) -> None:
        mm = mapped_file.mm
        if self.is_stopped or mm is None or mm.closed:
            return
        try:
            rc = self._populate(mm, start, end)
        except (ValueError, BufferError):  # closed between the check and the call
            return
        if rc == errno.EINVAL:
            self.supported = False  # this kernel cannot: stop asking
            log.info("the kernel cannot populate mapped pages ahead; the writer faults them in")
        elif rc == 0:
            self.warmed_bytes += end - start
        # else unmapped meanwhile, or out of memory: the writer faults as it would anyway


def page_warmer_for(config: MessageStoreConfig, pooled: bool) -> PageWarmer | None:
    """A started warmer for a store, where one can run: asked for (``warmCommitLogPages``), the
    compiled core built, and no write buffers (a pool's buffers are warm already)."""
    if not config.warm_commit_log_pages or pooled or speedups.store_core is None:
        return None
    warmer = PageWarmer(speedups.store_core.populate_write)
    warmer.start()
    return warmer
