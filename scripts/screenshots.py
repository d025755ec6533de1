"""Screenshots of the console's main views from a real run, under offscreen Qt.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshots.py [docs/screenshots]

Starts a scratch `ha` cluster (its own data folder), puts load on it, and saves the cluster
overview and the cluster table, the charts under load, a message's detail and an export in
progress.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ROCKETDESK_HOME", tempfile.mkdtemp(prefix="rocketdesk-shots-"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import qasync
from PySide6.QtWidgets import QApplication

from cluster.client.message import Message
from cluster.client.producer import Producer
from gui.main_window import MainWindow


async def until(predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the console did not get there")
        await asyncio.sleep(0.1)


async def load(namesrv: str, seconds: float) -> None:
    async with Producer("screenshots", namesrv) as producer:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            batch = [Message("Orders", f'{{"order": {n + i}, "total": {(n + i) * 3}}}'.encode(),
                             tags="paid", keys=f"order-{n + i}") for i in range(16)]
            await asyncio.gather(*(producer.send(message) for message in batch))
            n += 16


async def main(out: str) -> None:
    window = MainWindow()
    window.resize(1280, 820)
    window.show()
    await window.model.create_and_start("ha")
    try:
        await shoot(window, out)
    finally:  # the scratch cluster goes, whatever happened
        await window.model.stop_cluster()
        await window.model.close()
        window.close()


async def shoot(window: MainWindow, out: str) -> None:
    namesrv = window.model.namesrv_addr
    await window.model.admin.create_topic("Orders", 4, 4)
    loader = asyncio.ensure_future(load(namesrv, 25))
    await until(lambda: window.charts.sample_count() >= 20)
    window.tabs.setCurrentWidget(window.overview)
    await asyncio.sleep(1.5)
    window.grab().save(os.path.join(out, "overview.png"))
    window.tabs.setCurrentWidget(window.nodes)
    await asyncio.sleep(1.5)
    window.grab().save(os.path.join(out, "cluster.png"))
    window.tabs.setCurrentWidget(window.charts)
    await asyncio.sleep(1.5)
    window.grab().save(os.path.join(out, "charts.png"))
    await loader
    window.tabs.setCurrentWidget(window.topics)
    window.topics.refresh()
    window.topics.query_topic.setText("Orders")
    window.topics.query_key.setText("order-42")
    window.topics.find()
    await until(lambda: window.topics.results.rowCount() > 0)
    await asyncio.sleep(0.5)
    window.grab().save(os.path.join(out, "message.png"))
    window.tabs.setCurrentWidget(window.export)
    window.export.topic.setText("Orders")
    window.export.out.setText(os.path.join(os.environ["ROCKETDESK_HOME"], "orders-export"))
    window.export.start()
    await until(lambda: window.export.progress.value() > 0 or window.export.state != "running", 180)
    window.grab().save(os.path.join(out, "export.png"))
    await until(lambda: window.export.state != "running", 300)


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join("docs", "screenshots")
    os.makedirs(target, exist_ok=True)
    app = QApplication(sys.argv[:1])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        loop.run_until_complete(main(target))
    print(f"screenshots written to {target}")
