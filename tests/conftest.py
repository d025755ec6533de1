"""Shared fixtures: small stores in tmp_path, so file rolls are exercised; a watchdog that ends
a run whose test hangs where pytest-timeout cannot reach it; and at the run's end, whatever
node process is still up under its temporary folder is ended (an interrupted run skips the
fixtures' teardown)."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `./dev.sh test` runs the test modules on pytest-xdist's workers, side by side: clusters that
# took RocketMQ's default ports when free (a `single` profile's 9876 and 10911, any cluster's
# proxy at 8081) could find one free on two workers at once and both plan on it. Every cluster
# of the suite takes free ports (the nodes started here inherit this); test_supervisor.py
# checks the preference itself.
os.environ["ROCKETDESK_DEFAULT_PORTS"] = "0"
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


def process_gone(pid: int) -> bool:
    """Whether a process has ended (exited, or a zombie its parent has not reaped yet)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


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
# test also has a watchdog: HANG_MARGIN past its own timeout it prints every thread's stack,
# ends the processes the test started and exits the run. The native faulthandler timer is the
# last resort when the stuck thread holds the interpreter lock and the watchdog thread cannot
# run (left to pytest's own when faulthandler_timeout is set: there is one such timer).
HANG_MARGIN = float(os.environ.get("ROCKETDESK_TEST_HANG_MARGIN", "120"))


def pytest_configure(config):
    # A copy of the real stderr, taken before any test's output is captured.
    config._hang_report_fd = os.dup(2)


def _timeout_of(item) -> float:
    """The test's pytest-timeout limit: its marker, else the command line, else the ini."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        if value is not None:
            return float(value)
    option = item.config.getoption("timeout", None)
    if option is not None:
        return float(option)
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    config = item.config
    timeout = _timeout_of(item)
    if timeout <= 0 or config.getoption("usepdb", False):  # no limit asked for, or a debugger
        yield
        return
    limit = timeout + HANG_MARGIN
    fd = config._hang_report_fd
    finished = threading.Event()
    watchdog = threading.Thread(target=_watch, args=(item.nodeid, limit, fd, finished),
                                daemon=True, name="hang-watchdog")
    watchdog.start()
    native = not float(config.getini("faulthandler_timeout") or 0)
    if native:
        faulthandler.dump_traceback_later(limit + 60, exit=True, file=fd)
    try:
        yield
    finally:
        if native:
            faulthandler.cancel_dump_traceback_later()
        finished.set()
        watchdog.join()


def _watch(nodeid: str, limit: float, fd: int, finished: threading.Event) -> None:
    if finished.wait(limit):
        return
    os.write(fd, f"\n{nodeid} still running after {limit:.0f} s: "
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


def pytest_sessionfinish(session, exitstatus):
    """End the processes left running under this run's temporary folder.

    A run interrupted with Ctrl-C skips the fixtures' teardown, and a cluster a test started
    through the command line stays up: its nodes are not the run's children (the supervisor
    detaches them), so nothing else would end them. In a run that was not interrupted the
    fixtures have ended them already (and fail the test that left one)."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None)  # (None: no test asked for a folder)
    if base is None:
        return
    end_processes_under(str(base))


def end_processes_under(folder: str, grace: float = 5.0) -> list[int]:
    """Terminate (then kill, after ``grace`` seconds) every process but this one and its
    ancestors whose command line names ``folder``; their pids."""
    import psutil

    found = []
    # Not this run nor what runs it: a wrapper given --basetemp names the folder too.
    spared = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.pid not in spared and folder in " ".join(process.info["cmdline"] or []):
                process.terminate()
                found.append(process)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(found, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    return [process.pid for process in found]
