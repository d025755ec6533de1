"""The open-files limit where the platform has one (RLIMIT_NOFILE; Windows has none)."""

from __future__ import annotations


def open_files_limit() -> int | None:
    """The soft limit on open files, or None where there is none to ask (or it is unlimited)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


# What a node asks for: every store file it maps keeps a descriptor open (a ConsumeQueue file a
# queue, the CommitLog's, the index's), besides its connections. macOS starts programs with a
# soft limit of 256 (a few dozen topics), Linux with 1024; macOS refuses more than OPEN_MAX,
# 10240, for a process however high the hard limit.
NODE_OPEN_FILES = 10240


def raise_open_files_limit(wanted: int = NODE_OPEN_FILES) -> int | None:
    """Raise the soft limit on open files towards ``wanted`` (never past the hard limit, never
    lowering it); the soft limit now, or None where there is none."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # refused (a sandbox): the limit stays as it was
            pass
    return None if soft == resource.RLIM_INFINITY else soft
