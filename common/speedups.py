"""Which implementation of the hot paths runs: the compiled core or the pure-Python reference.

The remoting codec (decoding and encoding frame headers) and Java's ``String.hashCode`` cost a
broker a good third of its CPU per message in Python, the store's per-record work (encoding a
record, scanning its properties for dispatch, writing its index entries) most of the rest.
``common/_speedups.c`` and ``common/_storecore.c`` do the same work in C, the way uvloop,
asyncpg or msgspec ship a compiled core: ``pip install -e .`` builds them next to their
source (setup.py). The pure functions stay the reference: the compiled ones return exactly
their results and write exactly their bytes (tests/unit/remoting/test_speedups.py and
tests/unit/storage/test_storecore.py check it with hypothesis) and hand anything unusual back
to them by returning None.

``ROCKETDESK_PURE=1`` (or ``true``/``yes``) runs the pure path everywhere, to compare or to rule
the C out; a machine without a C compiler gets it too, since the extension is optional.

A leaf like the rest of ``common``: the callers (cluster.remoting.codec, storage.message,
storage.record, storage.index_file, storage.dispatch_runs, storage.get_message) ask this
module once, at import, and bind the functions they will call.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_ENV = "ROCKETDESK_PURE"


def _wants_pure() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in {"1", "true", "yes"}


def _load() -> tuple[ModuleType | None, ModuleType | None, str]:
    if _wants_pure():
        return None, None, f"pure Python ({PURE_ENV}=1)"
    try:
        import common._speedups as compiled
        import common._storecore as compiled_store
    except ImportError:  # not built (no compiler at install time, or not installed with pip)
        return None, None, "pure Python (the compiled core is not built)"
    # (how the body CRC of every put is computed: carry-less multiplication where the CPU has
    # it, else tables; common/_crc32.c)
    # (getattr: a build from before the CRC's choice, not yet rebuilt, still loads)
    kernel = getattr(compiled_store, "crc_kernel", lambda: "table")()
    return compiled, compiled_store, f"compiled core (body CRC: {kernel})"


# ``core``: the remoting codec and Java's hashCode; ``store_core``: the store's per-record work
# (record encode and decode, dispatch's property scan, index writes). Both or neither.
core, store_core, _description = _load()


def describe() -> str:
    """Which path runs, for ``rocketdesk --version`` and logs."""
    return _description


__all__ = ["PURE_ENV", "core", "describe", "store_core"]
