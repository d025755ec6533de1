"""Where one sender's round trip goes: a timeline of the client's and the broker's system calls.

    .venv/bin/python scripts/round_trip_timeline.py CLIENT_PID BROKER_PID [--seconds 1]

Run it while one sender sends (e.g. `rocketdesk bench producer -w 1`) against a broker with
ASYNC_FLUSH. It records the entry and exit of read, write, pwrite64 and epoll_pwait in both
processes with `perf` (tracepoints: far less overhead than strace, still a few µs a call) and
walks the exchanges: the client's write of a request, the broker's wakeup, its work before and
after the CommitLog's pwrite, its write of the answer, the client's wakeup and its work up to
the next request. Prints the median, mean and 90th percentile of each step in µs.

Needs `perf` (Debian: linux-perf) and the right to trace (root, or perf_event_paranoid <= 1).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_EVENTS = ",".join(f"syscalls:sys_{edge}_{name}" for name in ("read", "write", "pwrite64",
                                                               "epoll_pwait")
                   for edge in ("enter", "exit"))
_LINE = re.compile(r"\s*\S+\s+(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+):")

STEPS = (
    ("client write (wakes the broker)", "the client's write of the request, its system call"),
    ("to the broker awake", "from the client's write to the broker's epoll_pwait returning"),
    ("broker, before pwrite", "read, split, the send lane, the record's encoding"),
    ("broker pwrite", "the CommitLog append"),
    ("broker, after pwrite", "bookkeeping, the answer's frame, handing it to the transport"),
    ("broker write (wakes the client)", "the answer's write, its system call"),
    ("to the client awake", "from the broker's write to the client's epoll_pwait returning"),
    ("client, answer to request", "read, the answer's future, the next send's request"),
    ("round trip", "from one request's write to the next"),
)


def exchanges(events: list[tuple[bool, float, str, str]]) -> dict[str, list[float]]:
    """The steps' durations (µs) of every whole exchange in ``events``: (is the broker, time in
    µs, enter|exit, system call), in time order."""
    out: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    count = len(events)

    def find(at: int, broker: bool, edge: str, call: str) -> int:
        while at < count:
            side, _, seen_edge, seen_call = events[at]
            if side == broker and seen_edge == edge and seen_call == call:
                return at
            at += 1
        return at

    at = 0
    while True:
        sent = find(at, False, "enter", "write")
        sent_done = find(sent, False, "exit", "write")
        woke = find(sent, True, "exit", "epoll_pwait")
        put = find(woke, True, "enter", "pwrite64")
        put_done = find(put, True, "exit", "pwrite64")
        answer = find(put_done, True, "enter", "write")
        answer_done = find(answer, True, "exit", "write")
        client_woke = find(answer, False, "exit", "epoll_pwait")
        next_sent = find(client_woke, False, "enter", "write")
        if next_sent >= count or answer_done >= count:
            return out
        t = [events[i][1] for i in (sent, sent_done, woke, put, put_done, answer, answer_done,
                                    client_woke, next_sent)]
        for (name, _), value in zip(STEPS, (t[1] - t[0], t[2] - t[0], t[3] - t[2], t[4] - t[3],
                                            t[5] - t[4], t[6] - t[5], t[7] - t[5], t[8] - t[7],
                                            t[8] - t[0]), strict=True):
            out[name].append(value)
        at = next_sent


def parse(script_output: str, client_tid: int, broker_tid: int
          ) -> list[tuple[bool, float, str, str]]:
    """The two event loops' system calls (other threads' are left out)."""
    events = []
    for line in script_output.splitlines():
        match = _LINE.match(line)
        if match and int(match[1]) in (client_tid, broker_tid):
            tid, when, edge, call = match.groups()
            events.append((int(tid) == broker_tid, float(when) * 1e6, edge, call))
    return events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("client_pid", type=int, help="the sender's (single-threaded) process")
    parser.add_argument("broker_pid", type=int, help="the broker's main (event loop) thread")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = str(Path(scratch) / "trace.data")
        subprocess.run(["perf", "record", "-q", "-o", data, "-e", _EVENTS, "-p",
                        f"{args.client_pid},{args.broker_pid}", "--", "sleep",
                        str(args.seconds)], check=True, stdout=subprocess.DEVNULL)
        script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,time,event"],
                                check=True, capture_output=True, text=True).stdout
    steps = exchanges(parse(script, args.client_pid, args.broker_pid))
    if not steps["round trip"]:
        print("no whole exchange seen: is one sender sending to this broker?", file=sys.stderr)
        return 1
    print(f"{len(steps['round trip'])} exchanges; µs")
    print(f"{'step':34}{'median':>8}{'mean':>8}{'p90':>8}  what")
    for name, what in STEPS:
        values = sorted(steps[name])
        print(f"{name:34}{values[len(values) // 2]:8.1f}{statistics.fmean(values):8.1f}"
              f"{values[int(len(values) * 0.9)]:8.1f}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
