"""Names that become file and folder names: what the file system under the store accepts.

A topic is a ConsumeQueue folder (consumequeue/<topic>/<queue>). RocketMQ's alphabet allows
``|``, and names like ``CON`` or ``NUL``, which Windows refuses as file names (Microsoft's
"Naming Files" rules). And the file systems macOS and Windows install ignore case: there
``Orders`` and ``orders`` would be one folder, two queues writing into the same files."""

from __future__ import annotations

import os
import sys
import uuid

_WINDOWS_FORBIDDEN = set('<>:"/\\|?*')
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))}


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a file here, or None."""
    if sys.platform != "win32":
        return None
    if any(char in _WINDOWS_FORBIDDEN for char in name):
        return f"{name!r} contains a character Windows does not allow in a file name"
    if name.split(".", maxsplit=1)[0].upper() in _WINDOWS_RESERVED or name.endswith((".", " ")):
        return f"{name!r} is not a name Windows allows for a file"
    return None


def ignores_case(folder: str) -> bool:
    """Whether the file system holding ``folder`` takes ``a`` and ``A`` for one name (asked of
    the file system itself: a Linux disk can ignore case, a Mac's can respect it)."""
    os.makedirs(folder, exist_ok=True)
    probe = os.path.join(folder, f".case-probe-{uuid.uuid4().hex}")
    with open(probe, "wb"):
        pass
    try:
        return os.path.exists(os.path.join(folder, os.path.basename(probe).upper()))
    finally:
        os.remove(probe)
