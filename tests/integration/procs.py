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


def free_port() -> int:
    """A loopback port free right now (for nodes that must come back on the same port)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
