"""Config files persisted as RocketMQ persists them: JSON, previous copy kept as ``.bak``.

Loading falls back to ``.bak`` when the file is missing, empty or does not parse; writing goes
through a temporary file, fsync and rename, so a crash never leaves half a file.
"""

from __future__ import annotations

import logging
import os
import threading

from cluster.remoting import fastjson

log = logging.getLogger(__name__)


class JsonConfigFile:
    """One config file (topics.json, consumerOffset.json, …)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

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

    def persist(self, text: str) -> None:
        """Replace the file's content atomically, keeping the previous content as .bak."""
        with self._lock:
            directory = os.path.dirname(self.path) or "."
            os.makedirs(directory, exist_ok=True)
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            if os.path.exists(self.path):
                os.replace(self.path, self.path + ".bak")
            os.replace(tmp, self.path)
