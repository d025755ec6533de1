"""Start real RocketDesk processes on loopback, read their bound address, always clean up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOT = re.compile(r"boot success.*listening on (\S+)")


class Node:
    """A running node process and the lines it printed."""

    def __init__(self, process: subprocess.Popen, address: str, lines: list[str]) -> None:
        self.process = process
        self.address = address
        self.lines = lines

    def terminate(self, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


@contextmanager
def running(module: str, *args: str, env: dict | None = None, boot_timeout: float = 20):
    """Run ``python -m module args`` until its boot line; kill it on exit whatever happens."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
    )
    lines: list[str] = []
    found = threading.Event()
    address: list[str] = []

    def pump():
        for line in process.stdout:
            lines.append(line)
            match = BOOT.search(line)
            if match and not found.is_set():
                address.append(match.group(1))
                found.set()
        found.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + boot_timeout
        while not found.wait(0.05):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{module} did not boot: {''.join(lines)[-2000:]}")
        if not address:
            raise RuntimeError(f"{module} exited: {''.join(lines)[-2000:]}")
        yield Node(process, address[0], lines)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        reader.join(5)
        process.stdout.close()


_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    """Where the kernel starts picking client connections' local ports (Linux's setting; the
    IANA range's 49152 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_port() -> int:
    """A loopback port free right now, and the one after it (a broker's HA port is listenPort
    + 1), for nodes that must come back on the same ports. Picked below the kernel's ephemeral
    range: a port the kernel picked could meanwhile become the local port of any client
    connection, and a broker restarted on it then failed to bind (seen once in a full run)."""
    import random

    from cluster.supervisor.ports import port_is_free

    low = _ephemeral_low()
    top = low - 2 if low > 21000 else 60000  # (a kernel that hands out nearly every port: any)
    # Each of the run's workers (pytest-xdist: gw0, gw1, …) picks in a slice of its own: two
    # picking one port free at once would both hand it out.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    span = (top - 20000) // max(workers, 1)
    first = 20000 + span * (int(worker) if worker.isdigit() else 0)
    for _ in range(500):
        port = random.randrange(first, first + span - 1)
        pair = {port, port + 1}
        if not pair & _HANDED_OUT and all(map(port_is_free, pair)):
            _HANDED_OUT.update(pair)
            return port
    raise RuntimeError(f"no two free loopback ports found between 20000 and {top}")
