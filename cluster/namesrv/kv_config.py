"""KVConfigManager: namespaced key/value settings kept by the name server (kvConfig.json)."""

from __future__ import annotations

import json
import os
import threading

from common.platform.durability import sync_all
from common.platform.files import replace_file

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """``{"configTable": {namespace: {key: value}}}``, written to disk after every change."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        if not self.path:
            return
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, encoding="utf-8") as handle:
                    data = json.load(handle)
            except (FileNotFoundError, ValueError):
                continue
            table = data.get("configTable") or {}
            self.table = {ns: {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
            return

    def _persist(self) -> None:
        if not self.path:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"configTable": self.table}, handle, indent=1, sort_keys=True)
            handle.flush()
            sync_all(handle.fileno())
        if os.path.exists(self.path):
            replace_file(self.path, self.path + ".bak")
        replace_file(tmp, self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self.table.setdefault(namespace, {})[key] = value
            self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            table = self.table.get(namespace)
            if table is not None and table.pop(key, None) is not None:
                if not table:
                    del self.table[namespace]
                self._persist()

    def get_namespace(self, namespace: str) -> dict[str, str] | None:
        with self._lock:
            table = self.table.get(namespace)
            return dict(table) if table is not None else None
