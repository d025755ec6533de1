"""The open-files limit where the platform has one (RLIMIT_NOFILE; Windows has none)."""

from __future__ import annotations

import sys


def open_files_limit() -> int | None:
    """The soft limit on open files, or None where there is none to ask (or it is unlimited)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


# What a node asks for: every store file it maps keeps two descriptors open (the store's own,
# and the one Python's mmap duplicates for itself) -- a ConsumeQueue file a queue, the CommitLog's,
# the index's -- besides its connections. Linux starts programs with a soft limit of 1024 and
# lets them go up to the hard limit (commonly 524,288 or more): a node asks for all of it, up to
# LINUX_OPEN_FILES (RocketMQ asks its operators for 655,350), so that ten thousand queues fit.
# macOS starts programs at 256 (a few dozen topics) and refuses more than OPEN_MAX, 10240, for a
# process however high the hard limit.
NODE_OPEN_FILES = 10240
LINUX_OPEN_FILES = 1 << 20


def node_open_files() -> int:
    """The open-files limit a node asks for on this platform."""
    return LINUX_OPEN_FILES if sys.platform.startswith("linux") else NODE_OPEN_FILES


def raise_open_files_limit(wanted: int | None = None) -> int | None:
    """Raise the soft limit on open files towards ``wanted`` (by default node_open_files();
    never past the hard limit, never lowering it); the soft limit now, or None where there is
    none."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return None
    if wanted is None:
        wanted = node_open_files()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # refused (a sandbox): the limit stays as it was
            pass
    return None if soft == resource.RLIM_INFINITY else soft
