"""Config files persisted as RocketMQ persists them: JSON, previous copy kept as ``.bak``.

Loading falls back to ``.bak`` when the file is missing, empty or does not parse; writing goes
through a temporary file, fsync and rename, so a crash never leaves half a file.

topics.json and subscriptionGroup.json are written aside (:class:`AsideWriter`), never on the
event loop: what a request creates on its way (a heartbeat's group and retry topic, a send's
topic), a slave's copies, and an admin's changes, whose handlers await the write. On a disk
busy with other writers one fsync took seconds, every client of the broker waited behind it,
and the official C++ client, whose heartbeat waits 3 s, closed its connection and lost its
rebalance's offset queries (it then starts the queue at its end, skipping what was there).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from cluster.remoting import fastjson
from common.platform.files import write_config_file

log = logging.getLogger(__name__)


def _entry_encoder():
    """json's C encoder, made once (``json.dumps`` makes one a call, half its time on small
    values), or None where there is none (another Python): then json.dumps."""
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii
        if c_make_encoder is None:
            return None

        def refuse(value: object) -> object:
            raise TypeError(f"{type(value).__name__} is not JSON serializable")

        # (markers, default, encoder, indent, key separator, item separator, sort_keys,
        # skipkeys, allow_nan): what json.dumps uses with its defaults
        make = c_make_encoder(None, refuse, encode_basestring_ascii, None, ": ", ", ", False,
                              False, True)
        if "".join(make({"a": [1, "é"]}, 0)) != json.dumps({"a": [1, "é"]}):
            return None
    except Exception:  # (a Python whose private encoder differs)
        return None
    return lambda value: "".join(make(value, 0))


_encode = _entry_encoder() or json.dumps


def table_text(wrapper: dict, table_key: str) -> str:
    """A config file's text (topics.json, subscriptionGroup.json): ``wrapper``'s fields, then
    its table ``table_key`` one entry a line, each encoded by json's C encoder. (Indented, as
    ``json.dumps(indent=1)`` wrote it, the pure-Python encoder ran: 11 ms for 2,000 topics on
    the event loop, at every topic created, half of what a creation cost the broker.)"""
    encode = _encode
    fields = [f" {encode(key)}: {encode(value)}" for key, value in wrapper.items()
              if key != table_key]
    entries = ",\n".join(f"  {encode(name)}: {encode(value)}"
                         for name, value in wrapper[table_key].items())
    table = f" {encode(table_key)}: " + ("{\n" + entries + "\n }" if entries else "{}")
    return "{\n" + ",\n".join([*fields, table]) + "\n}\n"


class PersistBatch:
    """Persists asked for inside ``with batch:`` on one thread, asked for once when the
    outermost block ends.

    A request may change a file many times: a HEART_BEAT naming 1,024 new groups creates a
    group and a retry topic for each, and one write (fsync and rename) a change rewrote the
    whole, growing subscriptionGroup.json and topics.json 1,024 times each on the event loop
    (9 s, then 26 s for the next such heartbeat). Inside a batch only the writes in between,
    which nothing could observe, are skipped. The depth is the thread's own: a change made on
    another thread meanwhile is persisted as it is made, not when this thread's request ends.
    """

    def __init__(self, persist: Callable[[], object]) -> None:
        self._persist = persist
        self._local = threading.local()

    def __enter__(self) -> PersistBatch:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._local.depth -= 1
        if self._local.depth == 0 and getattr(self._local, "owed", False):
            self._local.owed = False
            self._persist()

    def persist(self) -> None:
        """Persist now, or when the batch this thread is in ends."""
        if getattr(self._local, "depth", 0):
            self._local.owed = True
        else:
            self._persist()


class JsonConfigFile:
    """One config file (topics.json, consumerOffset.json, …)."""

    # While writes keep failing (a full or read-only disk), say so once a minute, not on
    # every change or every periodic save.
    REMIND_SECONDS = 60.0

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.failing_since: float | None = None
        self._last_said = 0.0
        self._sequence = itertools.count(1)  # (its next() is one atomic call)
        self._on_disk = 0  # the sequence number of the snapshot the file holds

    def next_sequence(self) -> int:
        """A number for a snapshot of the content, to be taken under the owner's lock with
        the snapshot: the numbers then follow the order of the states they were taken from,
        and :meth:`persist` never lets an older snapshot replace a newer one (two threads may
        write one file: the aside writer and a caller that must see its change on disk)."""
        return next(self._sequence)

    def load(self) -> dict | None:
        """The parsed content, or None when neither the file nor its .bak holds any."""
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, encoding="utf-8") as handle:
                    text = handle.read()
            except FileNotFoundError:
                continue
            if not text.strip():
                continue
            try:
                data = fastjson.loads(text)
            except ValueError as exc:
                log.warning("%s does not parse (%s); trying its backup", candidate, exc)
                continue
            if isinstance(data, dict):
                return data
        return None

    def persist(self, text: str, sequence: int | None = None) -> bool:
        """Replace the file's content atomically, keeping the previous content as .bak.

        A write that fails (ENOSPC, EROFS…) keeps the old file and is reported, not raised, as
        RocketMQ's ConfigManager does: the broker goes on with what it holds in memory and the
        next save tries again. Returns whether the file now holds ``text`` (or, for a snapshot
        numbered by :meth:`next_sequence`, a later one, when that is written already).
        """
        with self._lock:
            if sequence is not None and sequence <= self._on_disk:
                return True
            try:
                write_config_file(self.path, text)
            except OSError as exc:
                self._report(exc)
                return False
            if sequence is not None:
                self._on_disk = sequence
            if self.failing_since is not None:
                log.warning("%s is written again", self.path)
                self.failing_since = None
            return True

    def _report(self, exc: OSError) -> None:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        elif now - self._last_said < self.REMIND_SECONDS:
            return
        self._last_said = now
        log.warning("cannot write %s (%s); keeping the change in memory and trying again on "
                    "the next save", self.path, exc.strerror or exc)


class AsideWriter:
    """Writes one config file on a thread of its own when asked: ``ask()`` returns at once,
    and the write that follows holds the content as it is then or later.

    Asks that come while a write is under way share the next one, so a burst of changes costs
    one or two writes. The thread starts at the first ask; ``close`` lets it finish what was
    asked, and asks after it are written in the asking thread.
    """

    def __init__(self, write: Callable[[], bool], name: str) -> None:
        self._write = write  # takes a snapshot and writes it; whether it reached the disk
        self._name = name
        self._cond = threading.Condition()
        self._waiting: list[Future[bool]] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._busy = False  # a write under way
        self._last: Future[bool] = Future()  # (none asked yet: done, nothing to wait for)
        self._last.set_running_or_notify_cancel()
        self._last.set_result(True)

    def ask(self) -> Future[bool]:
        """A write to come; its future tells whether the file then held the content. After
        ``close`` (shutdown), the write is made before this returns, in the asking thread."""
        future: Future[bool] = Future()
        with self._cond:
            self._last = future
            inline = self._closed
            if not inline:
                self._waiting.append(future)
                if self._thread is None:
                    inline = not self._start()
                self._cond.notify_all()
        if inline:
            future.set_running_or_notify_cancel()
            future.set_result(self._written())
        return future

    def last_asked(self) -> Future[bool]:
        """The future of the latest ask: its write holds every change asked for before it."""
        with self._cond:
            return self._last

    def _start(self) -> bool:
        """Start the thread (the condition held); False, the asks taken back, if it cannot."""
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # (can't start new thread: written by the asker instead)
            log.warning("no thread to write %s aside; writing it at once", self._name)
            self._waiting.clear()
            return False
        self._thread = thread
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until what was asked so far is written; whether it was, within ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and not self._busy, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Write what was asked, then end the thread (waiting at most ``timeout``)."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                waiting, self._waiting = self._waiting, []
                self._busy = True
            # (an asker that gave up has cancelled its future: no answer for it; the others can
            # no longer be cancelled)
            waiting = [future for future in waiting if future.set_running_or_notify_cancel()]
            ok = self._written()
            for future in waiting:
                future.set_result(ok)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _written(self) -> bool:
        try:
            return self._write()
        except Exception:  # (a bug; an OSError is reported by the file and returns False)
            log.exception("writing %s failed", self._name)
            return False


class AsideWrittenTable:
    """What a manager of one table file (topics.json, subscriptionGroup.json) does to write it:
    now, in the calling thread (``persist``), or aside (``persist_aside``; a request's changes
    in one write: ``persist_once``), never an older snapshot over a newer one. The manager
    calls ``_init_writes`` and gives ``_snapshot``."""

    TABLE_KEY = ""
    file: JsonConfigFile

    def _init_writes(self, path: str) -> None:
        self.file = JsonConfigFile(path)
        self._aside = AsideWriter(self._write_snapshot, f"{path} writer")
        self._batch = PersistBatch(self._aside.ask)

    def _snapshot(self) -> tuple[dict, int]:
        """The file's content as a wrapper, and its number from ``file.next_sequence()``, both
        taken under the manager's lock."""
        raise NotImplementedError

    def _write_snapshot(self) -> bool:
        wrapper, sequence = self._snapshot()
        return self.file.persist(table_text(wrapper, self.TABLE_KEY), sequence)

    def persist(self) -> None:
        """Write the table now, in the calling thread."""
        self._write_snapshot()

    def persist_aside(self) -> Future[bool]:
        """Write the table on the writer's thread; the future tells when it is done."""
        return self._aside.ask()

    def written_aside(self) -> Future[bool]:
        """When the changes made so far are on disk: the write the latest of them asked for
        (each change asks for one itself; asking again could cost a second write)."""
        return self._aside.last_asked()

    def wait_written(self, timeout: float | None = None) -> bool:
        """Wait until the writes asked for aside so far are done; whether they were."""
        return self._aside.wait_idle(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Finish the writes asked for aside (at shutdown, before the last ``persist``)."""
        self._aside.close(timeout)

    def persist_once(self) -> PersistBatch:
        """``with manager.persist_once():`` what is created inside is written in one write,
        asked for when it ends (a heartbeat's groups and retry topics; see PersistBatch)."""
        return self._batch
