"""Shared fixtures: small stores in tmp_path, so file rolls are exercised; a watchdog that ends
a run whose test hangs where pytest-timeout cannot reach it."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from storage.config import FlushDiskType, MessageStoreConfig  # noqa: E402
from storage.message import MessageExtBrokerInner  # noqa: E402
from storage.message_store import DefaultMessageStore  # noqa: E402


def small_config(root, **overrides) -> MessageStoreConfig:
    """A store config with tiny files (4 KiB CommitLog files, 10-unit ConsumeQueue files)."""
    values = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 4096,
        "mapped_file_size_consume_queue": 20 * 10,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
        "delete_when": "99",
        "flush_disk_type": FlushDiskType.ASYNC_FLUSH,
    }
    values.update(overrides)
    return MessageStoreConfig(**values)


def make_message(topic="TopicTest", body=b"hello", queue_id=0, tags=None, keys=None, uniq=None,
                 **extra) -> MessageExtBrokerInner:
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    props.update(extra.pop("properties", {}))
    extra.setdefault("born_host", ("127.0.0.1", 40000))
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=props,
                                 born_timestamp=int(time.time() * 1000), **extra)


@pytest.fixture
def store_factory(tmp_path):
    """Open stores under tmp_path; every store opened is shut down after the test."""
    opened: list[DefaultMessageStore] = []

    def open_store(start=True, **overrides) -> DefaultMessageStore:
        store = DefaultMessageStore(small_config(tmp_path / "store", **overrides))
        store.load()
        if start:
            store.start()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.shutdown()


# pytest-timeout (300 s, pyproject.toml) fails a test by a signal whose Python handler runs only
# when the main thread runs Python again: a test stuck inside C (Qt's event loop with nothing
# scheduled, a thread join, a lock) never sees it, and CI would sit out its whole limit. So each
# test also has a watchdog: past HARD_LIMIT it prints every thread's stack, ends the processes the
# test started and exits the run. The native faulthandler timer is the last resort when the
# stuck thread holds the interpreter lock and the watchdog thread cannot run.
HARD_LIMIT = float(os.environ.get("ROCKETDESK_TEST_HANG_LIMIT", "420"))


def pytest_configure(config):
    # A copy of the real stderr, taken before any test's output is captured.
    config._hang_report_fd = os.dup(2)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    fd = item.config._hang_report_fd
    finished = threading.Event()
    watchdog = threading.Thread(target=_watch, args=(item.nodeid, fd, finished), daemon=True,
                                name="hang-watchdog")
    watchdog.start()
    faulthandler.dump_traceback_later(HARD_LIMIT + 60, exit=True, file=fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        finished.set()
        watchdog.join()


def _watch(nodeid: str, fd: int, finished: threading.Event) -> None:
    if finished.wait(HARD_LIMIT):
        return
    os.write(fd, f"\n{nodeid} still running after {HARD_LIMIT:.0f} s: "
                 "every thread's stack, then the run ends\n".encode())
    faulthandler.dump_traceback(file=fd, all_threads=True)
    try:
        import psutil

        children = psutil.Process().children(recursive=True)
        for child in children:
            child.kill()
        psutil.wait_procs(children, timeout=10)
    finally:
        os._exit(3)
