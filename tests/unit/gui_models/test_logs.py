"""The Logs tab's filter, without Qt: a level floor (tracebacks stay with their line), and
only the lines with a text."""

from __future__ import annotations

from gui.models.logs import LogFilter

LINES = [
    "=== 2026-11-25 12:00:00 starting broker-a-0",
    "2026-11-25 12:00:01,100 INFO cluster.broker - started",
    "2026-11-25 12:00:02,100 WARNING cluster.broker - slow flush",
    "2026-11-25 12:00:03,100 ERROR cluster.broker - put failed",
    "Traceback (most recent call last):",
    '  File "x.py", line 1',
    "2026-11-25 12:00:04,100 INFO cluster.broker - registered",
]


def test_a_level_floor_keeps_tracebacks_with_their_line():
    assert LogFilter(level="WARNING").apply(LINES) == LINES[2:6]
    assert LogFilter(level="ERROR").apply(LINES) == LINES[3:6]
    assert LogFilter().apply(LINES) == LINES


def test_only_the_lines_with_a_text():
    assert LogFilter(text="FLUSH", only_matching=True).apply(LINES) == [LINES[2]]
    assert LogFilter(text="flush").apply(LINES) == LINES  # searching alone filters nothing
