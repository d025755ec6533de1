"""PageWarmer: bring in the CommitLog's pages ahead of the writer (and an index file's hash
slots once), on a native thread that never takes the interpreter lock.

The first write to each 4 KiB page of a file finds and zeroes a page-cache page for it, under
the put lock while holding the interpreter lock. RocketMQ pre-touches whole files
(``warmMapedFileEnable``) for the same reason. Here the writer, each time it has claimed blocks
ahead (``MappedFile.ensure_allocated``), hands the newly claimed range to a ``Populator``
(common/_populator.c), whose thread populates it for reading (Linux's MADV_POPULATE_READ): the
page-cache pages exist before the writer's pwrite gets there, no page is mapped writable (see
``MappedFile.write_at``) and no byte changes. An index file's hash slots, which are written
through the mapping, are populated for writing. `bench store` in batches, warmer forced on, same
run alternating (docs/benchmarks.md, session 12): for reading 174-199k msg/s, none 141-174k,
for writing 138-159k. That thread is C only: an earlier Python thread took the interpreter lock
to wake up and between its calls, and on two busy cores the OS preempted it holding the lock
while the broker's loop waited (docs/benchmarks.md, session 11).

Only with the compiled core and where the kernel can (Linux 5.14 on). A warmer that falls
behind costs nothing: the writer allocates whatever is not warm yet, as it does without one.
"""

from __future__ import annotations

from common import speedups
from storage.config import MessageStoreConfig

# Requests smaller than this wait for more (one wakeup and one system call per megabyte).
STEP = 1 << 20
# How far ahead of the writer pages are populated, at most (and never past the claimed blocks).
AHEAD = 16 << 20


class PageWarmer:
    """Decides which claimed ranges of the file being written to populate; a ``Populator``
    (or a test's recorder with its ``submit``/``submit_once``/``supported``) does it."""

    def __init__(self, populator) -> None:
        self._populator = populator
        self.requested_end = 0  # log offset up to which pages have been asked for

    @property
    def supported(self) -> bool:
        return self._populator.supported

    @property
    def warmed_bytes(self) -> int:
        return self._populator.warmed_bytes

    def after_claim(self, mapped_file, end: int) -> None:
        """The writer's call after writing up to ``end`` of ``mapped_file``: ask for the
        claimed pages ahead of it, a megabyte or more at a time. Never waits."""
        base = mapped_file.file_from_offset
        upto = min(mapped_file.allocated_position, end + AHEAD)
        if base + upto >= self.requested_end + STEP and self._populator.supported:
            start = max(end, self.requested_end - base)
            self.requested_end = base + upto
            self._submit(self._populator.submit, mapped_file.mm, start, upto)

    def warm_once(self, mapped_file, start: int, end: int) -> None:
        """Populate ``[start, end)`` of ``mapped_file`` soon, once: an index file's hash slots,
        which its writer touches at random (a fault a key until all are in). Never waits."""
        self._submit(self._populator.submit_once, mapped_file.mm, start, end)

    @staticmethod
    def _submit(submit, mm, start: int, end: int) -> None:
        if mm is None or mm.closed:
            return
        try:
            submit(mm, start, end)
        except (ValueError, BufferError):  # closed between the check and the call
            pass

    def shutdown(self) -> None:
        """Stop the thread (after its current step of at most 256 KiB) and wait for it."""
        self._populator.stop()


def page_warmer_for(config: MessageStoreConfig, pooled: bool) -> PageWarmer | None:
    """A running warmer for a store, where one can run: asked for (``warmCommitLogPages``), the
    compiled core built, and no write buffers (a pool's buffers are warm already)."""
    populator_type = getattr(speedups.store_core, "Populator", None)  # (not in an old build)
    if not config.warm_commit_log_pages or pooled or populator_type is None:
        return None
    populator = populator_type()
    # A kernel that cannot populate (before 5.14): no warmer, so the writer claims no blocks
    # early for it either.
    return PageWarmer(populator) if populator.supported else None
