"""Which implementation of the hot paths runs: the compiled core or the pure-Python reference.

The remoting codec (decoding and encoding frame headers) and Java's ``String.hashCode`` cost a
broker a good third of its CPU per message in Python. ``common/_speedups.c`` does the same
work in C, the way uvloop, asyncpg or msgspec ship a compiled core: ``pip install -e .`` builds
it next to its source (setup.py). The pure functions stay the reference: the compiled ones
return exactly their results (tests/unit/remoting/test_speedups.py checks it with hypothesis)
and hand anything unusual back to them by returning None.

``ROCKETDESK_PURE=1`` (or ``true``/``yes``) runs the pure path everywhere, to compare or to rule
the C out; a machine without a C compiler gets it too, since the extension is optional.

A leaf like the rest of ``common``: the callers (cluster.remoting.codec, storage.message) ask
this module once, at import, and bind the functions they will call.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_ENV = "ROCKETDESK_PURE"


def _wants_pure() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in {"1", "true", "yes"}


def _load() -> tuple[ModuleType | None, str]:
    if _wants_pure():
        return None, f"pure Python ({PURE_ENV}=1)"
    try:
        import common._speedups as compiled
    except ImportError:  # not built (no compiler at install time, or not installed with pip)
        return None, "pure Python (the compiled core is not built)"
    return compiled, "compiled core"


core, _description = _load()


def describe() -> str:
    """Which path runs, for ``rocketdesk --version`` and logs."""
    return _description


__all__ = ["PURE_ENV", "core", "describe"]
