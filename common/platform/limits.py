"""The open-files limit where the platform has one to ask (RLIMIT_NOFILE; Windows has none)."""

from __future__ import annotations


def open_files_limit() -> int | None:
    """The soft limit on open files, or None where there is none to ask (or it is unlimited)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft
