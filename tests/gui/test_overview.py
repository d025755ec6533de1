"""The Overview tab from the cluster model's figures (no cluster needed): its cards, its alerts,
and an alert that opens the tab explaining it."""

from __future__ import annotations

from collections import deque

import pytest
from PySide6.QtCore import Qt

pytestmark = pytest.mark.gui


def test_overview_shows_health_and_opens_the_view_an_alert_is_about(qtbot, loop):
    from gui.cluster_model import ClusterModel
    from gui.views.overview import OverviewView

    model = ClusterModel()
    view = OverviewView(model)
    qtbot.addWidget(view)
    view.refresh()
    assert "no cluster open" in view.headline.text()

    model.nodes = [
        {"name": "broker-a-0", "kind": "broker", "role": "ASYNC_MASTER", "state": "died",
         "health": "-", "diskBytes": 4096},
        {"name": "proxy-0", "kind": "proxy", "role": "PROXY", "state": "running", "health": "ok",
         "diskBytes": 0}]
    model.samples = {"broker-b-0": deque([{"time": 1, "putTps": 1500.0, "getTps": 2.0,
                                           "role": "ASYNC_MASTER"}])}
    model.lag = {"CID-late": deque([(1, 20_000)])}
    model.topic_totals = {"Orders": deque([(1, 42)])}
    model.title = "cluster demo"
    view.refresh()
    # The cluster by its name, not by a list of name-server addresses.
    assert view.headline.text().startswith("cluster demo: needs attention")
    assert "1 / 2" in view.cards["nodes"].text()
    assert "1,500" in view.cards["traffic"].text()  # a count, not "1.5 k"
    texts = [view.alerts.item(i).text() for i in range(view.alerts.count())]
    assert texts[0].startswith("ERROR: broker-a-0 died")
    assert any("CID-late is 20,000 messages behind" in t for t in texts)

    opened = []
    view.open_view.connect(lambda tab, subject: opened.append((tab, subject)))
    view.alerts.itemActivated.emit(view.alerts.item(0))
    assert opened == [("cluster", "broker-a-0")]
    assert view.alerts.item(0).data(Qt.ItemDataRole.UserRole) == ("cluster", "broker-a-0")


def test_transactions_left_open_show_on_the_overview_and_their_alert_lists_them(qtbot, loop, home,
                                                                             monkeypatch):
    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    model = window.model
    model.title = "cluster demo"
    model.nodes = [{"name": "broker-a-0", "kind": "broker", "role": "ASYNC_MASTER",
                    "state": "running", "health": "ok", "transactionsOpen": 7,
                    "transactionsChecking": 2, "producers": 1, "consumers": 3}]
    window.overview.refresh()
    cards = window.overview.cards
    assert "7 open" in cards["transactions"].text()
    assert "2 past their timeout" in cards["transactions"].text()
    assert "1 producer, 3 consumers" in cards["clients"].text()
    listed = []
    monkeypatch.setattr(window.topics, "show_pending_transactions", lambda: listed.append(True))
    window.overview.alerts.itemActivated.emit(window.overview.alerts.item(0))
    assert window.tabs.currentWidget() is window.topics
    assert listed == [True]  # the pending transactions, listed in the results table


def test_the_node_table_colours_states_and_shows_full_text_in_tooltips(qtbot, loop):
    from gui.cluster_model import ClusterModel
    from gui.views.nodes import NodesView

    model = ClusterModel()
    view = NodesView(model)
    qtbot.addWidget(view)
    row = {"name": "broker-a-0", "role": "ASYNC_MASTER", "address": "127.0.0.1:10911",
           "haPort": 10912, "pid": 42, "cpuPercent": 1.0, "rssBytes": 1 << 20, "openFiles": 9,
           "diskBytes": 4096}
    view.show_nodes([dict(row, state="running", health="ok"),
                     dict(row, name="broker-a-1", role="SLAVE", state="died", health="-",
                          lastLog="boom")])
    assert view.table.item(0, 5).foreground().color().name() == "#2e7d32"
    assert view.table.item(1, 5).foreground().color().name() == "#c62828"
    assert view.table.item(0, 2).toolTip() == "127.0.0.1:10911"
    assert "died" in view.table.item(1, 5).toolTip()
    assert "broker-a-1 died" in view.log_hint.text()
    said = []
    model.message.connect(said.append)
    view.copy_address()
    assert said == ["no cluster open: nothing to copy"]


def test_the_topics_table_sorts_by_value_and_filters(qtbot, loop):
    from gui.cluster_model import ClusterModel
    from gui.models.topics import TopicRow
    from gui.views.topics import TopicsView

    model = ClusterModel()
    view = TopicsView(model)
    qtbot.addWidget(view)
    view._show_topics([TopicRow("Orders", 8, "read/write", 900, 12.5, ("CID-a",), 0),
                       TopicRow("Payments", 4, "read only", 10_000, 3.0, (), 0),
                       TopicRow("Audit", 2, "read/write", 50, None, ("CID-audit",), 0)])
    assert view.topics.rowCount() == 3
    view.topics.sortItems(3)  # messages, as numbers: 50 < 900 < 10,000
    assert [view.topics.item(r, 0).text() for r in range(3)] == ["Audit", "Orders", "Payments"]
    assert view.topics.item(2, 3).text() == "10,000"
    view.select_topic("Orders")
    assert view.selected_topic() == "Orders"
    # the forms work on the selected topic, and say so
    assert (view.finder.query_topic.text(), view.send_topic.text()) == ("Orders", "Orders")
    # The send form is folded away until wanted.
    assert not view.send_topic.isVisibleTo(view)
    view.send_toggle.click()
    assert view.send_topic.isVisibleTo(view)
    assert view.send_toggle.text() == "▾ Send a test message"
    view.topic_filter.setText("audit")
    assert [view.topics.item(r, 0).text() for r in range(view.topics.rowCount())] == ["Audit"]


def test_the_log_view_filters_by_level_and_text(qtbot, loop, tmp_path):
    from types import SimpleNamespace

    from gui.cluster_model import ClusterModel
    from gui.views.logs import LogsView

    log = tmp_path / "node.log"
    log.write_text("2026-11-25 12:00:01,100 INFO cluster.broker - started\n"
                   "2026-11-25 12:00:03,100 ERROR cluster.broker - put failed\n"
                   "Traceback (most recent call last):\n"
                   "2026-11-25 12:00:04,100 INFO cluster.broker - registered\n")
    model = ClusterModel()
    model.supervisor = SimpleNamespace(node=lambda name: SimpleNamespace(log_path=str(log)))
    view = LogsView(model)
    qtbot.addWidget(view)
    view.open_node("broker-a-0")
    assert view.text.toPlainText().count("\n") == 4
    view.level.setCurrentText("ERROR")
    assert view.text.toPlainText().splitlines() == [
        "2026-11-25 12:00:03,100 ERROR cluster.broker - put failed",
        "Traceback (most recent call last):"]
    view.level.setCurrentText("DEBUG")
    view.only_matching.setChecked(True)
    view.search.setText("registered")
    assert view.text.toPlainText().splitlines() == [
        "2026-11-25 12:00:04,100 INFO cluster.broker - registered"]
    with log.open("a") as handle:  # new lines go through the same filter
        handle.write("2026-11-25 12:00:05,100 INFO x - registered again\nnot this one\n")
    view.poll()
    assert view.text.toPlainText().splitlines()[-1].endswith("registered again")
    model.supervisor = None


def test_the_groups_table_shows_figures_says_when_empty_and_selects(qtbot, loop):
    from gui.cluster_model import ClusterModel
    from gui.models.groups import GroupRow
    from gui.views.groups import GroupsView

    model = ClusterModel()
    view = GroupsView(model)
    qtbot.addWidget(view)
    view._show_groups([])
    assert "No consumer group yet" in view.empty.text()
    view._show_groups([GroupRow("CID-a", 1200, 15.0, 2, "4.x push", 0, 16),
                       GroupRow("CID-b", 30, None, 0, "-", 4, 1)])
    assert view.empty.text() == ""
    assert [view.groups.item(r, 3).text() for r in range(2)] == ["2", "offline"]
    view.groups.sortItems(1)  # lag, as numbers
    assert view.groups.item(0, 0).text() == "CID-b"
    view.select_group("CID-a", load=False)
    assert view.selected_group() == "CID-a"
