"""KVConfigManager: namespaced key/value settings kept by the name server (kvConfig.json).

House rules:

* The table is bounded (MAX_* below). ORDER_TOPIC_CONFIG goes back in every REGISTER_BROKER
  answer, which must fit one 16 MiB frame beside its header: unbounded, a namespace past that
  made every registration answer unencodable, and slaves never learnt their master.
* Sizes are counted as the entries' JSON in the answers (ASCII-escaped, compact), so a value
  of control characters counts the six bytes each costs on the wire, not one.
* Changes land in memory at once; :meth:`KVConfigManager.persisted` waits for them to reach the
  disk. One write, on a worker thread, carries every change made before it began, so a burst
  of puts costs one or two rewrites of the file, and none of them on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

from cluster.namesrv.errors import KVConfigLimitError
from common.platform.files import write_config_file

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

# One namespace: what one answer carries (ORDER_TOPIC_CONFIG in REGISTER_BROKER, any in
# GET_KVLIST_BY_NAMESPACE); 2 MiB is an eighth of a frame, and some 20,000 order-topic entries.
MAX_NAMESPACE_KEYS = 20_000
MAX_NAMESPACE_BYTES = 2 * 1024 * 1024
# The whole table: what every change rewrites (compact JSON of 8 MiB is some tens of ms on a
# worker thread, shared by every change made meanwhile).
MAX_TABLE_KEYS = 100_000
MAX_TABLE_BYTES = 8 * 1024 * 1024


def _json_size(text: str) -> int:
    return len(json.dumps(text))


def entry_size(key: str, value: str) -> int:
    """Bytes of ``"key":"value",`` in a compact, ASCII-escaped JSON object."""
    return _json_size(key) + _json_size(value) + 2


class KVConfigManager:
    """``{"configTable": {namespace: {key: value}}}``; safe to call from any thread, but
    :meth:`persisted` belongs to the event loop."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._namespace_bytes: dict[str, int] = {}
        self._total_bytes = 0
        self._total_keys = 0
        self._bodies: dict[str, bytes] = {}  # a namespace's KVTable JSON, until it changes
        self._changes = 0  # changes made to the table
        self._written = 0  # of which this many are on disk
        self._writer: asyncio.Future | None = None

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
            with self._lock:
                self.table = {ns: {str(k): str(v) for k, v in kv.items()}
                              for ns, kv in table.items()}
                self._recount()
            if self._total_bytes > MAX_TABLE_BYTES or self._total_keys > MAX_TABLE_KEYS:
                # An operator's file is kept whole; only growing it further is refused.
                log.warning("%s holds %d entries in %d bytes, over the bounds (%d, %d): puts "
                            "are refused until entries are deleted", candidate,
                            self._total_keys, self._total_bytes, MAX_TABLE_KEYS, MAX_TABLE_BYTES)
            return

    def _recount(self) -> None:
        self._namespace_bytes = {ns: sum(entry_size(k, v) for k, v in kv.items())
                                 for ns, kv in self.table.items()}
        self._total_bytes = sum(self._namespace_bytes[ns] + _json_size(ns)
                                for ns in self.table)
        self._total_keys = sum(len(kv) for kv in self.table.values())
        self._bodies.clear()

    # -- changes ----------------------------------------------------------------------------
    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``key`` in memory (KVConfigLimitError past a bound); :meth:`persisted` writes it."""
        with self._lock:
            kv = self.table.get(namespace)
            old = kv.get(key) if kv is not None else None
            grow = entry_size(key, value) - (entry_size(key, old) if old is not None else 0)
            new_keys = 0 if old is not None else 1
            ns_bytes = self._namespace_bytes.get(namespace, 0) + grow
            ns_keys = (len(kv) if kv is not None else 0) + new_keys
            total_bytes = self._total_bytes + grow + (0 if kv is not None else _json_size(namespace))
            total_keys = self._total_keys + new_keys
            if grow > 0 or new_keys:
                self._check(namespace, ns_keys, ns_bytes, total_keys, total_bytes)
            if kv is None:
                kv = self.table[namespace] = {}
            kv[key] = value
            self._namespace_bytes[namespace] = ns_bytes
            self._total_bytes, self._total_keys = total_bytes, total_keys
            self._changed(namespace)

    @staticmethod
    def _check(namespace: str, ns_keys: int, ns_bytes: int, total_keys: int,
               total_bytes: int) -> None:
        for count, limit, what in (
                (ns_keys, MAX_NAMESPACE_KEYS, f"namespace {namespace} would hold {{}} keys"),
                (ns_bytes, MAX_NAMESPACE_BYTES, f"namespace {namespace} would hold {{}} bytes"),
                (total_keys, MAX_TABLE_KEYS, "the KV config would hold {} keys"),
                (total_bytes, MAX_TABLE_BYTES, "the KV config would hold {} bytes")):
            if count > limit:
                raise KVConfigLimitError(f"{what.format(count)}; the limit is {limit} (delete "
                                         f"entries with DELETE_KV_CONFIG first)")

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            kv = self.table.get(namespace)
            if kv is None or key not in kv:
                return
            size = entry_size(key, kv.pop(key))
            self._namespace_bytes[namespace] -= size
            self._total_bytes -= size
            self._total_keys -= 1
            if not kv:
                del self.table[namespace]
                del self._namespace_bytes[namespace]
                self._total_bytes -= _json_size(namespace)
            self._changed(namespace)

    def _changed(self, namespace: str) -> None:
        self._bodies.pop(namespace, None)
        self._changes += 1

    # -- persisting ---------------------------------------------------------------------------
    async def persisted(self) -> None:
        """Return once every change made before the call is on disk (OSError if the write
        failed: the change stays in memory, as RocketMQ keeps it)."""
        wanted = self._changes
        while self._written < wanted:
            writer = self._writer
            if writer is None or writer.done():
                # One writer at a time: two would race for the file's renames.
                writer = self._writer = asyncio.get_running_loop().run_in_executor(
                    None, self.persist)
            await asyncio.shield(writer)

    def persist(self) -> None:
        """Write the table as it is now (temp file, sync, then the rename; the old file is kept
        as .bak). Called by :meth:`persisted` on a worker thread."""
        with self._lock:
            changes = self._changes
            snapshot = {ns: dict(kv) for ns, kv in self.table.items()}
        if self.path:
            # Compact: json's C encoder serves only indent=None; indented, a large table took
            # several times as long to write.
            text = json.dumps({"configTable": snapshot}, separators=(",", ":"), sort_keys=True)
            write_config_file(self.path, text)
        self._written = max(self._written, changes)

    # -- reads ----------------------------------------------------------------------------------
    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self.table.get(namespace, {}).get(key)

    def get_namespace(self, namespace: str) -> dict[str, str] | None:
        with self._lock:
            table = self.table.get(namespace)
            return dict(table) if table is not None else None

    def namespace_body(self, namespace: str) -> bytes | None:
        """The namespace as RocketMQ's KVTable JSON (``{"table": {...}}``), or None when it is
        empty; made once per change, not once per registration that carries it."""
        with self._lock:
            body = self._bodies.get(namespace)
            if body is None:
                table = self.table.get(namespace)
                if not table:
                    return None
                body = json.dumps({"table": table}, separators=(",", ":")).encode()
                self._bodies[namespace] = body
            return body
