"""What follows a CommitLog append on a broker: dispatch, and waking the slaves' writers.

Puts run on the event loop. Dispatching what they appended on the loop too, once per burst
(``call_soon`` after the first put of a loop iteration, so every request read in that iteration
is in), builds the ConsumeQueue and index entries without waking the store's dispatch thread
and without handing it the interpreter lock: with a thread, each message cost two wakeups and
lock handoffs that the sender waited on. Only what the put path has just appended is
dispatched here; records that must be decoded from the log (a slave's replicated bytes, a
backlog after a restart) and appends made on another thread are left to the dispatch thread,
which also keeps its backstop round every second.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class AppendNotifier:
    def __init__(self, loop: asyncio.AbstractEventLoop, store) -> None:
        self.loop = loop
        self.store = store
        self._loop_thread = threading.get_ident()
        self._scheduled = False
        # Called after the burst's dispatch (a master wakes its HA writers here).
        self.after_dispatch: list[Callable[[], None]] = []

    def on_append(self) -> None:
        """The CommitLog's hook, called after every successful append (on any thread)."""
        if threading.get_ident() != self._loop_thread:
            self.store.reput.wakeup()
            for callback in self.after_dispatch:
                callback()
            return
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._dispatch_burst)

    def _dispatch_burst(self) -> None:
        self._scheduled = False
        try:
            self.store.reput.reput_inline()
        except Exception:  # the dispatch thread's own round picks the records up
            log.exception("dispatching on the event loop failed; the dispatch thread retries")
            self.store.reput.wakeup()
        for callback in self.after_dispatch:
            callback()
