"""Why the store refuses writes right now (RocketMQ's ``RunningFlags``), and quiet logging.

A store service that cannot write (dispatch cannot create a ConsumeQueue file, a flush fails,
the disk is over ``diskSpaceWarningLevelRatio``) raises its flag with a sentence; puts are then
refused with SERVICE_NOT_AVAILABLE and that sentence. The service keeps retrying on its own
schedule and lowers the flag on its first success, so writes resume by themselves when space
comes back. A flag raised with ``refuse_writes=False`` only tracks the state for the log (the
put path's own disk errors: every put retries, and each refusal carries its own reason).

Logging: one line when a flag goes up, one when it comes down, and while it stays up at most
one reminder per ``reminder_interval`` (a put refused a thousand times a second must not write
a thousand lines a second). ``LogThrottle`` gives other repeated failures the same treatment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

DISK_FULL = "DISK_FULL"  # the clean service: usage above diskSpaceWarningLevelRatio
WRITE_LOGICS_QUEUE_ERROR = "WRITE_LOGICS_QUEUE_ERROR"  # dispatch: ConsumeQueue or index
FLUSH_COMMIT_LOG_ERROR = "FLUSH_COMMIT_LOG_ERROR"  # CommitLog fdatasync
COMMIT_COMMIT_LOG_ERROR = "COMMIT_COMMIT_LOG_ERROR"  # transient pool buffer -> CommitLog file
FLUSH_CONSUME_QUEUE_ERROR = "FLUSH_CONSUME_QUEUE_ERROR"  # ConsumeQueue, index or checkpoint
WRITE_COMMIT_LOG_ERROR = "WRITE_COMMIT_LOG_ERROR"  # a put could not get its bytes on disk

REMINDER_INTERVAL_S = 60.0


class LogThrottle:
    """Logs a repeated failure once, then at most once per interval with a count.

    Keyed by the caller's choice (a service name, a flag): a new key or a key whose message
    changed after it was quiet logs at once.
    """

    def __init__(self, interval: float = REMINDER_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def should_log(self, key: str) -> tuple[bool, int]:
        """(log now?, how many were suppressed since the last line)."""
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False, 0
            self._last[key] = now
            return True, self._suppressed.pop(key, 0)

    def forget(self, key: str) -> None:
        """The failure is over: the next one logs at once."""
        with self._lock:
            self._last.pop(key, None)
            self._suppressed.pop(key, None)


class RunningFlags:
    """The store's raised flags, each with the sentence that explains it."""

    def __init__(self, reminder_interval: float = REMINDER_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # Replaced, never mutated in place: the put path reads it without the lock.
        self._reasons: dict[str, str] = {}
        self._refusing: dict[str, str] = {}
        self._lock = threading.Lock()
        self._throttle = LogThrottle(reminder_interval, clock)

    def set(self, flag: str, reason: str, refuse_writes: bool = True) -> None:
        """Raise ``flag`` (or keep it raised) for ``reason``."""
        with self._lock:
            raised = flag not in self._reasons
            reasons = dict(self._reasons)
            reasons[flag] = reason
            self._reasons = reasons
            if refuse_writes:
                refusing = dict(self._refusing)
                refusing[flag] = reason
                self._refusing = refusing
        if raised:
            self._throttle.forget(flag)
            self._throttle.should_log(flag)
            log.error("%s: %s%s", flag, reason,
                      "; writes are refused until it clears" if refuse_writes else "")
            return
        due, suppressed = self._throttle.should_log(flag)
        if due:
            log.warning("%s still raised (%d more times since the last line): %s",
                        flag, suppressed + 1, reason)

    def clear(self, flag: str) -> None:
        """Lower ``flag``; logs once when it was raised."""
        if flag not in self._reasons:
            return  # the common case, without taking the lock
        with self._lock:
            reasons = dict(self._reasons)
            reason = reasons.pop(flag, None)
            self._reasons = reasons
            if flag in self._refusing:
                refusing = dict(self._refusing)
                del refusing[flag]
                self._refusing = refusing
        if reason is not None:
            self._throttle.forget(flag)
            log.warning("%s cleared (it was: %s)", flag, reason)

    def is_set(self, flag: str) -> bool:
        return flag in self._reasons

    def reason(self, flag: str) -> str | None:
        return self._reasons.get(flag)

    def write_refusal(self) -> str | None:
        """Why writes are refused now, or None when they are accepted."""
        refusing = self._refusing
        if not refusing:
            return None
        return "; ".join(refusing.values())

    def raised(self) -> dict[str, str]:
        """Every raised flag and its reason (runtime info, tests)."""
        return dict(self._reasons)
