"""scripts/round_trip_timeline.py: a one-sender exchange cut into its steps from `perf script`
lines (the tool the session-20 figures in docs/benchmarks.md came from)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "round_trip_timeline.py"
_spec = importlib.util.spec_from_file_location("round_trip_timeline", _PATH)
timeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timeline)

CLIENT, BROKER, OTHER = 100, 200, 201


def _line(tid: int, us: float, edge: str, call: str) -> str:
    return f"   rocketdesk {tid} {us / 1e6:.6f}: syscalls:sys_{edge}_{call}: "


def _exchange(t0: float) -> list[str]:
    return [
        _line(CLIENT, t0, "enter", "write"), _line(CLIENT, t0 + 10, "exit", "write"),
        _line(OTHER, t0 + 12, "enter", "write"),  # (another broker thread: not the loop's)
        _line(BROKER, t0 + 30, "exit", "epoll_pwait"), _line(BROKER, t0 + 32, "enter", "read"),
        _line(BROKER, t0 + 33, "exit", "read"), _line(BROKER, t0 + 40, "enter", "pwrite64"),
        _line(BROKER, t0 + 43, "exit", "pwrite64"), _line(BROKER, t0 + 50, "enter", "write"),
        _line(BROKER, t0 + 62, "exit", "write"), _line(CLIENT, t0 + 80, "exit", "epoll_pwait"),
    ]


def test_each_step_of_an_exchange_is_timed():
    lines = _exchange(0) + _exchange(95) + _exchange(190)
    events = timeline.parse("\n".join(lines), CLIENT, BROKER)
    steps = timeline.exchanges(events)
    assert len(steps["round trip"]) == 2  # (the last has no next request)
    assert steps["round trip"] == [95, 95]
    assert steps["client write (wakes the broker)"] == [10, 10]
    assert steps["to the broker awake"] == [30, 30]
    assert steps["broker, before pwrite"] == [10, 10]
    assert steps["broker pwrite"] == [3, 3]
    assert steps["broker, after pwrite"] == [7, 7]
    assert steps["broker write (wakes the client)"] == [12, 12]
    assert steps["to the client awake"] == [30, 30]
    assert steps["client, answer to request"] == [15, 15]
