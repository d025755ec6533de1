"""Screenshots of every tab of the console in both themes, from a real run.

    xvfb-run -a -s "-screen 0 1600x1000x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python scripts/screenshots.py [docs/screenshots]

(or QT_QPA_PLATFORM=offscreen without an X server). Starts a scratch `2m-2s-async` cluster (its
own data folder), puts load on it, and saves each tab in the light and the dark theme
(``light-<tab>.png``, ``dark-<tab>.png``), a message's detail, an export in progress, and the
Cluster tab during a fault drill (a slave paused, a master killed).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# A scratch home (its cluster's data: hundreds of MB), removed at the end, unless one is given.
SCRATCH_HOME = (None if "ROCKETDESK_HOME" in os.environ
                else tempfile.mkdtemp(prefix="rocketdesk-shots-"))
os.environ.setdefault("ROCKETDESK_HOME", SCRATCH_HOME or "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from cluster.client.message import Message  # noqa: E402
from cluster.client.producer import Producer  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402


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
                             tags="paid" if (n + i) % 3 else "refunded", keys=f"order-{n + i}",
                             properties={"region": "eu" if (n + i) % 2 else "us"})
                     for i in range(16)]
            await asyncio.gather(*(producer.send(message) for message in batch))
            n += 16


async def main(out: str) -> None:
    window = MainWindow()
    window.resize(1400, 900)
    window.show()
    await window.model.create_and_start("2m-2s-async")
    try:
        await shoot(window, out)
    finally:  # the scratch cluster goes, whatever happened
        await window.model.stop_cluster()
        await window.model.close()
        window.set_dark(False)
        window.close()


def _slug(title: str) -> str:
    return title.replace("&&", "and").lower().replace(" ", "-")


async def _every_tab(window: MainWindow, out: str, theme: str) -> None:
    for index in range(window.tabs.count()):
        window.tabs.setCurrentIndex(index)
        await asyncio.sleep(1.2)
        name = f"{theme}-{_slug(window.tabs.tabText(index))}.png"
        window.grab().save(os.path.join(out, name))


async def shoot(window: MainWindow, out: str) -> None:
    namesrv = window.model.namesrv_addr
    await window.model.admin.create_topic("Orders", 4, 4)
    await window.model.admin.create_group("CID-orders")
    loader = asyncio.ensure_future(load(namesrv, 40))
    # The Load tab's own processes: a producer and a consumer that falls behind (a group
    # with lag and a client online for the Consumer groups tab and the lag chart).
    window.load.rate.setValue(1000)
    window.load.start_producer()
    window.load.slow.setValue(2)
    window.load.start_consumer()
    await until(lambda: window.charts.sample_count() >= 20)
    # Tabs with something in them: a topic and a query, a group, a log, a store, an export.
    window.topics.refresh()
    window.groups.refresh()
    await asyncio.sleep(2)
    window.topics.select_topic("Orders")
    finder = window.topics.finder
    finder.query_key.setText("order-42")
    finder.find()
    await until(lambda: finder.results.rowCount() > 0)
    # The last minutes of broker-a's queues, a page, narrowed by a filter.
    finder.browse_broker.setText("broker-a")
    finder.browse_minutes.setValue(10)
    finder.browse()
    await until(lambda: len(finder.records) >= 64)
    finder.filter_bar.sql.setText("TAGS = 'paid' AND region IN ('eu', 'us')")
    finder.filter_bar.json_path.setText("$.total > 30")
    finder.filter_bar.apply()
    finder.results.selectRow(0)
    await until(lambda: "load-consumers" in window.model.lag, 60)
    window.groups.refresh()
    await asyncio.sleep(2)
    window.groups.select_group("load-consumers")
    window.logs.node.setCurrentText("broker-a-0")
    window.store.open_store()
    window.export.prefill("Orders")
    for theme in ("light", "dark"):
        window.set_dark(theme == "dark")
        await _every_tab(window, out, theme)
    window.set_dark(False)
    window.load.stop_all()
    await loader
    window.tabs.setCurrentWidget(window.topics)
    await asyncio.sleep(0.5)
    window.grab().save(os.path.join(out, "message.png"))
    # A fault drill as the picture shows it: a slave paused, the other group's master killed.
    window.tabs.setCurrentWidget(window.nodes)
    await window.model.node_action("pause", "broker-a-1")
    await window.model.node_action("kill", "broker-b-0")
    await until(lambda: any(r["name"] == "broker-b-0" and r["state"] != "running"
                            for r in window.model.nodes), 30)
    await asyncio.sleep(1.5)
    window.grab().save(os.path.join(out, "drill.png"))
    await window.model.node_action("resume", "broker-a-1")
    await window.model.node_action("start", "broker-b-0")
    window.tabs.setCurrentWidget(window.export)
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
    try:
        with loop:
            loop.run_until_complete(main(target))
    finally:
        if SCRATCH_HOME is not None:
            shutil.rmtree(SCRATCH_HOME, ignore_errors=True)
    print(f"screenshots written to {target}")
