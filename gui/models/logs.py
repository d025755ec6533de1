"""What the Logs tab shows of a node's log, without Qt: lines at or above a level, and only the
lines that contain a text when asked. A line with no level of its own (a traceback, a boot
line) belongs with the line before it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
_LEVEL = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


@dataclass(slots=True)
class LogFilter:
    level: str = "DEBUG"  # the lowest level shown
    text: str = ""
    only_matching: bool = False
    _last_level: str = field(default="INFO", repr=False)

    def keep(self, line: str) -> bool:
        """Whether ``line`` shows; call it for every line in order (levels carry over)."""
        found = _LEVEL.match(line)
        if found:
            self._last_level = found.group(1)
        if LEVELS.index(self._last_level) < LEVELS.index(self.level):
            return False
        return not (self.only_matching and self.text and self.text.lower() not in line.lower())

    def apply(self, lines: list[str]) -> list[str]:
        self._last_level = "INFO"
        return [line for line in lines if self.keep(line)]
