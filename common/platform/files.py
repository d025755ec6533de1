"""Deleting and replacing files another process may have open.

POSIX lets a file be deleted or renamed over while others have it open (they keep reading the
old one). Windows refuses both while any handle is open (another process reading the store,
the console reading a job record): there a delete waits for a later round, and a replace is
tried again a few times."""

from __future__ import annotations

import os
import time


def remove_file(path: str) -> bool:
    """Delete ``path`` (gone already counts); False when the platform refuses because the file
    is in use, so the caller tries again later."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except PermissionError:
        return False
    return True


def replace_file(source: str, target: str, attempts: int = 20, pause: float = 0.05) -> None:
    """``os.replace``, tried again while the target is in use (Windows), for about a second."""
    for attempt in range(attempts):
        try:
            os.replace(source, target)
            return
        except PermissionError:
            if attempt == attempts - 1:
                raise
            time.sleep(pause)
