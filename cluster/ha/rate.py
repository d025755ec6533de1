"""Bytes per second over the last whole second (the console charts transfer rates)."""

from __future__ import annotations

import time


class ByteRate:
    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._second = int(clock())
        self._current = 0
        self._last = 0
        self.total = 0

    def add(self, count: int) -> None:
        self._roll()
        self._current += count
        self.total += count

    def per_second(self) -> int:
        """What the last complete second carried."""
        self._roll()
        return self._last

    def _roll(self) -> None:
        second = int(self._clock())
        if second != self._second:
            # A gap of more than one second means the last whole second carried nothing.
            self._last = self._current if second == self._second + 1 else 0
            self._current = 0
            self._second = second
