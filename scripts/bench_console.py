"""The console's own cost: seconds to the first window, and its CPU while the charts update at
1 Hz over a 2m-2s cluster (4 brokers) under producer load.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_console.py [--seconds 30]
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# A scratch home (its cluster's data: hundreds of MB), removed at the end, unless one is given.
SCRATCH_HOME = (None if "ROCKETDESK_HOME" in os.environ
                else tempfile.mkdtemp(prefix="rocketdesk-bench-console-"))
os.environ.setdefault("ROCKETDESK_HOME", SCRATCH_HOME or "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402
import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from gui.main_window import MainWindow  # noqa: E402


async def main(seconds: float) -> None:
    window = MainWindow()
    window.show()
    QApplication.processEvents()
    print(f"first window after {time.perf_counter() - STARTED:.2f} s (interpreter start excluded)")
    await window.model.create_and_start("2m-2s-async")
    window.tabs.setCurrentWidget(window.charts)
    load = subprocess.Popen([sys.executable, "-m", "rocketdesk.cli", "bench", "producer", "-n",
                             window.model.namesrv_addr, "-w", "16", "--duration", str(seconds + 10)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(5)
    me = psutil.Process()
    before, began = me.cpu_times(), time.monotonic()
    await asyncio.sleep(seconds)
    after, elapsed = me.cpu_times(), time.monotonic() - began
    used = (after.user - before.user) + (after.system - before.system)
    print(f"console CPU while charting 4 brokers under load: {used / elapsed:.1%} of one core "
          f"over {elapsed:.0f} s, {window.charts.sample_count()} samples drawn")
    load.terminate()
    load.wait()
    await window.model.stop_cluster()
    await window.model.close()
    window.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    app = QApplication(sys.argv[:1])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    try:
        with loop:
            loop.run_until_complete(main(args.seconds))
    finally:
        if SCRATCH_HOME is not None:
            shutil.rmtree(SCRATCH_HOME, ignore_errors=True)
