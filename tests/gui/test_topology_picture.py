"""The topology picture on the Cluster tab (no cluster needed): boxes coloured by state, a click
that picks the node in the table too, a node's menu that acts on it, a fault that shows."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsRectItem

pytestmark = pytest.mark.gui


def _rows(**states):
    base = {"haPort": None, "pid": 1, "cpuPercent": 1.0, "rssBytes": 1 << 20, "openFiles": 9,
            "diskBytes": 4096, "health": "ok", "state": "running"}
    rows = [dict(base, name="namesrv-0", kind="namesrv", role="NAMESRV", address="127.0.0.1:9876"),
            dict(base, name="broker-a-0", kind="broker", group="broker-a", brokerId=0,
                 role="SYNC_MASTER", address="127.0.0.1:10911"),
            dict(base, name="broker-a-1", kind="broker", group="broker-a", brokerId=1,
                 role="SLAVE", address="127.0.0.1:10921")]
    return [dict(r, **states.get(r["name"], {})) for r in rows]


def _edges(view) -> dict[str, str]:
    return {item.data(0): item.pen().color().name() for item in view.picture.scene().items()
            if isinstance(item, QGraphicsRectItem)}


def test_the_picture_follows_the_nodes_and_picks_and_acts_on_them(qtbot, loop, monkeypatch):
    from gui.cluster_model import ClusterModel
    from gui.views.nodes import NodesView

    model = ClusterModel()
    view = NodesView(model)
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    texts = [i.toPlainText() for i in view.picture.scene().items() if hasattr(i, "toPlainText")]
    assert any("No cluster open" in t for t in texts)

    model.samples = {"broker-a-0": deque([{"haLag": 2048}])}
    view.show_nodes(_rows())
    assert _edges(view) == {"namesrv-0": "#2e7d32", "broker-a-0": "#2e7d32",
                            "broker-a-1": "#2e7d32"}
    texts = [i.toPlainText() for i in view.picture.scene().items() if hasattr(i, "toPlainText")]
    assert "HA lag 2.0 KiB" in texts

    # A click on a box picks that node in the table, and the picture marks it.
    box = view.picture.picture.box("broker-a-1")
    point = view.picture.mapFromScene(box.x + box.width / 2, box.y + box.height / 2)
    qtbot.mouseClick(view.picture.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert view.selected_node() == "broker-a-1"
    assert _edges(view)["broker-a-1"] == "#1565c0"
    # Arrow keys move along the boxes; picking a row in the table marks the picture too.
    view.picture.setFocus()
    qtbot.keyClick(view.picture, Qt.Key.Key_Left)
    assert view.selected_node() == "broker-a-0"
    view.select("namesrv-0")
    assert view.picture.selected == "namesrv-0"

    # The node's menu: kill asks first, then acts on the node the menu was opened on.
    acted, logs = [], []

    async def node_action(action, node):
        acted.append((action, node))

    monkeypatch.setattr(model, "node_action", node_action)
    monkeypatch.setattr(view, "confirm", lambda question: "SIGKILL" in question)
    view.logs_requested.connect(logs.append)
    menu = view.picture.node_menu("broker-a-0")
    labels = [a.text() for a in menu.actions()]
    assert labels[:2] == ["Start", "Stop…"]
    assert "Show its log" in labels
    next(a for a in menu.actions() if a.text().startswith("Kill")).trigger()
    next(a for a in menu.actions() if a.text() == "Show its log").trigger()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert acted == [("kill", "broker-a-0")]
    assert logs == ["broker-a-0"]
    assert view.selected_node() == "broker-a-0"

    # The drill as it happens: the master died, the slave paused.
    view.show_nodes(_rows(**{"broker-a-0": {"state": "died", "pid": None, "lastLog": "x"},
                             "broker-a-1": {"state": "paused", "health": "-"}}))
    edges = _edges(view)
    assert edges["broker-a-1"] == "#ef6c00"
    assert edges["namesrv-0"] == "#2e7d32"
    texts = [i.toPlainText() for i in view.picture.scene().items() if hasattr(i, "toPlainText")]
    assert "not replicating" in texts
    assert "died" in texts
    assert "paused" in texts


def test_the_cluster_tab_opens_a_nodes_log_from_the_picture(qtbot, loop, home):
    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.nodes.show_nodes(_rows())
    window.logs.node.addItems(["namesrv-0", "broker-a-0"])
    window.nodes.logs_requested.emit("broker-a-0")
    assert window.tabs.currentWidget() is window.logs
    assert window.logs.node.currentText() == "broker-a-0"
    window.set_dark(True)  # the picture follows the theme without losing its boxes
    assert len(window.nodes.picture.picture.boxes) == 3
    assert window.nodes.picture.text_color.name() == "#e0e0e0"
    window.set_dark(False)
