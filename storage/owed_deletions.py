"""Store files this process still owes the disk: out of every queue, never read again, deleted
as soon as nothing keeps them.

* Cut off (a truncated tail, a deleted topic's queue) while a reader held them: unmapped and
  deleted once the reader lets go, or forcibly after ``FORCIBLY_MS`` (MappedFile.destroy).
* Refused by the platform (Windows: another process has them open or mapped): already emptied
  by MappedFile.destroy, deleted on a later round.

Kept for the whole process, not per queue: a deleted topic's queue is gone while its files may
still be owed, and a new file must never take the name of one still there (its stale records
would read as the new file's). Every deletion round of every queue settles what it can."""

from __future__ import annotations

import os
import threading

from common.platform.files import remove_file
from storage.mapped_file import MappedFile

FORCIBLY_MS = 1000


class OwedDeletions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[MappedFile] = []  # still mapped: a reader holds them
        self._paths: list[str] = []  # unmapped, emptied, not deleted: another process has them

    def leave(self, mapped_file: MappedFile, destroyed: bool) -> None:
        """``mapped_file`` left its queue; ``destroyed`` is what its destroy() answered."""
        with self._lock:
            if not destroyed:
                self._held.append(mapped_file)
            elif mapped_file.left_behind:
                self._paths.append(mapped_file.path)

    def remove_or_owe(self, path: str) -> None:
        """Delete an emptied file found at load, or owe it while another process keeps it."""
        if not remove_file(path):
            with self._lock:
                self._paths.append(path)

    def settle(self) -> None:
        """Finish what can be finished now."""
        with self._lock:
            if not self._held and not self._paths:
                return
            held, self._held = self._held, []
            for mapped_file in held:
                if not mapped_file.destroy(FORCIBLY_MS):
                    self._held.append(mapped_file)
                elif mapped_file.left_behind:
                    self._paths.append(mapped_file.path)
            self._paths = [p for p in self._paths if not remove_file(p)]

    def still_there(self, path: str) -> bool:
        with self._lock:
            return path in self._paths or any(f.path == path for f in self._held)

    def under(self, folder: str) -> list[str]:
        """The owed files in ``folder`` and below (for inspection and tests)."""
        prefix = folder.rstrip("/\\") + os.sep
        with self._lock:
            return sorted(p for p in [*self._paths, *(f.path for f in self._held)]
                          if p.startswith(prefix))


OWED = OwedDeletions()
