"""ServiceThread: a background loop that sleeps on an event and never misses a wakeup.

Mirrors RocketMQ's ``ServiceThread``: ``wakeup()`` sets a flag; ``wait_for_running(ms)``
returns at once if the flag was set while the loop was busy, otherwise sleeps until woken or
the interval passes. ``on_wait_end`` runs after every wait (the group-commit list swap).
"""

from __future__ import annotations

import logging
import threading

from storage.running_flags import LogThrottle

log = logging.getLogger(__name__)


class ServiceThread:
    """Base class: subclasses implement ``run_once`` (called in a loop) and may override hooks."""

    name = "ServiceThread"

    def __init__(self) -> None:
        self._event = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # Its thread outlived shutdown's wait (stuck in a system call, e.g. msync on a hung
        # disk): whoever shuts down next must not repeat that call.
        self.abandoned = False

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopped.clear()
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    @property
    def is_stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wakeup(self) -> None:
        """Make the next (or current) wait return at once."""
        if not self._event.is_set():
            self._event.set()

    def wait_for_running(self, interval_ms: float) -> None:
        """Sleep until woken or ``interval_ms`` passes, then call ``on_wait_end``."""
        self._event.wait(interval_ms / 1000)
        self._event.clear()
        self.on_wait_end()

    def on_wait_end(self) -> None:
        """Hook run after every wait."""

    def run_once(self) -> None:
        raise NotImplementedError

    def on_shutdown(self) -> None:
        """Hook run once in the service thread after the loop ends (final flush, …)."""

    def _main(self) -> None:
        log.debug("%s service started", self.name)
        throttle = LogThrottle()
        failing = None
        while not self._stopped.is_set():
            try:
                self.run_once()
            except Exception as exc:
                # A failure that repeats every round (a disk that stays full) logs its traceback
                # once, then a line a minute: the log must stay readable while it lasts.
                key = f"{type(exc).__name__}: {exc}"
                if key != failing:
                    throttle.forget(self.name)
                    failing = key
                due, suppressed = throttle.should_log(self.name)
                if due and suppressed == 0:
                    log.exception("%s service has exception", self.name)
                elif due:
                    log.error("%s service still failing (%d times since the last line): %s",
                              self.name, suppressed + 1, key)
                self._stopped.wait(0.1)
        try:
            self.on_shutdown()
        except Exception:
            log.exception("%s service failed while shutting down", self.name)
        log.debug("%s service end", self.name)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the loop and wait for the thread (its ``on_shutdown`` included)."""
        self._stopped.set()
        self._event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                self.abandoned = True
                log.error("%s service did not stop within %.1f s; left running", self.name,
                          timeout)
        self._thread = None
