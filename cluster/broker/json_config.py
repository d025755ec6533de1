"""Config files persisted as RocketMQ persists them: JSON, previous copy kept as ``.bak``.

Loading falls back to ``.bak`` when the file is missing, empty or does not parse; writing goes
through a temporary file, fsync and rename, so a crash never leaves half a file.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from cluster.remoting import fastjson
from common.platform.durability import sync_all
from common.platform.files import replace_file

log = logging.getLogger(__name__)


class JsonConfigFile:
    """One config file (topics.json, consumerOffset.json, …)."""

    # While writes keep failing (a full or read-only disk), say so once a minute, not on
    # every change or every periodic save.
    REMIND_SECONDS = 60.0

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.failing_since: float | None = None
        self._last_said = 0.0

    def load(self) -> dict | None:
        """The parsed content, or None when neither the file nor its .bak holds any."""
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, encoding="utf-8") as handle:
                    text = handle.read()
            except FileNotFoundError:
                continue
            if not text.strip():
                continue
            try:
                data = fastjson.loads(text)
            except ValueError as exc:
                log.warning("%s does not parse (%s); trying its backup", candidate, exc)
                continue
            if isinstance(data, dict):
                return data
        return None

    def persist(self, text: str) -> bool:
        """Replace the file's content atomically, keeping the previous content as .bak.

        A write that fails (ENOSPC, EROFS…) keeps the old file and is reported, not raised, as
        RocketMQ's ConfigManager does: the broker goes on with what it holds in memory and the
        next save tries again. Returns whether the file now holds ``text``.
        """
        with self._lock:
            tmp = self.path + ".tmp"
            try:
                directory = os.path.dirname(self.path) or "."
                os.makedirs(directory, exist_ok=True)
                with open(tmp, "w", encoding="utf-8") as handle:
                    handle.write(text)
                    handle.flush()
                    sync_all(handle.fileno())
                if os.path.exists(self.path):
                    replace_file(self.path, self.path + ".bak")
                replace_file(tmp, self.path)  # (an inspector may be reading it: Windows refuses)
            except OSError as exc:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                self._report(exc)
                return False
            if self.failing_since is not None:
                log.warning("%s is written again", self.path)
                self.failing_since = None
            return True

    def _report(self, exc: OSError) -> None:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        elif now - self._last_said < self.REMIND_SECONDS:
            return
        self._last_said = now
        log.warning("cannot write %s (%s); keeping the change in memory and trying again on "
                    "the next save", self.path, exc.strerror or exc)
