"""Findings of the first-time walk through the console (issue 16), each held by a test: no
cluster needed, the views driven as a user would (offscreen)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.gui


def test_the_store_browser_offers_the_open_clusters_stores(qtbot, loop, tmp_path):
    from gui.cluster_model import ClusterModel
    from gui.views.store_browser import StoreBrowserView
    from storage.message import MessageExtBrokerInner
    from storage.message_store import DefaultMessageStore
    from tests.conftest import small_config

    root = tmp_path / "broker-a-0" / "store"
    store = DefaultMessageStore(small_config(root))
    store.load()
    store.start()
    store.put_message(MessageExtBrokerInner(topic="Orders", body=b"x", queue_id=0))
    store.shutdown()

    model = ClusterModel()
    view = StoreBrowserView(model)
    qtbot.addWidget(view)
    assert not view.cluster_stores.isEnabled()  # no cluster run here: nothing to offer
    model.supervisor = SimpleNamespace(state=SimpleNamespace(nodes=[
        SimpleNamespace(name="namesrv-0", kind="namesrv", store_dir=str(tmp_path / "n")),
        SimpleNamespace(name="broker-a-0", kind="broker", store_dir=str(root)),
        SimpleNamespace(name="broker-a-1", kind="broker", store_dir=str(tmp_path / "b1"))]))
    model.cluster_changed.emit("test")
    assert [view.cluster_stores.itemText(i) for i in range(view.cluster_stores.count())] == [
        "broker-a-0's store", "broker-a-1's store"]
    assert view.path.text() == str(root)  # pre-filled with the first broker's store
    view.cluster_stores.activated.emit(0)
    assert "1 records" in view.summary.text()
    assert "Orders" in view.summary.text()
    assert view.table.rowCount() == 1  # its records listed at once
    header = view.table.horizontalHeader()
    assert header.sectionSize(3) >= header.fontMetrics().horizontalAdvance("commitLog offset")
    # A path the user typed stays when the cluster changes.
    view.path.setText("/somewhere/else")
    model.cluster_changed.emit("test")
    assert view.path.text() == "/somewhere/else"
    model.supervisor = None


def test_an_empty_group_list_says_so_and_creates_a_group(qtbot, loop, monkeypatch):
    from gui.cluster_model import ClusterModel
    from gui.views.groups import GroupsView

    model = ClusterModel()
    view = GroupsView(model)
    qtbot.addWidget(view)
    view._show_groups([])
    assert "No consumer group yet" in view.empty.text()
    assert "create one below" in view.empty.text()
    said, created = [], []

    async def create_group(group):
        created.append(group)
        return ["127.0.0.1:10911"]

    model.message.connect(said.append)
    view.new_group.setText("CID-orders")
    view.create_group()  # no cluster open: a sentence, not a traceback
    assert said[-1] == "open a cluster first: a group is created on its masters"
    model.admin = SimpleNamespace(create_group=create_group)

    async def listing():
        from gui.models.groups import GroupRow

        return [GroupRow(g, 0, None, 0, "-", 0, 16) for g in ["CID-a", *created]]

    monkeypatch.setattr(view, "_load_groups", listing)
    monkeypatch.setattr(view, "show_group", lambda: None)
    view.new_group.setText("bad name")
    view.create_group()
    assert created == []
    assert "characters other than" in said[-1]
    view.new_group.setText("CID-orders")
    view.create_group()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert created == ["CID-orders"]
    assert said[-1] == "group CID-orders created on every master"
    assert view.new_group.text() == ""
    assert view.selected_group() == "CID-orders"  # listed and picked
    # The reset time says which zone it is in.
    assert view.reset_time.displayFormat().endswith(" t")
    assert "local time" in view.reset_time.toolTip()


def test_the_new_topology_dialog_shows_whole_columns(qtbot, loop):
    from gui.views.topology import GROUP_COLUMNS, TopologyDialog

    dialog = TopologyDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    header = dialog.groups.horizontalHeader()
    metrics = header.fontMetrics()
    for column, title in enumerate(GROUP_COLUMNS):
        assert header.sectionSize(column) >= metrics.horizontalAdvance(title)
    total = sum(header.sectionSize(c) for c in range(len(GROUP_COLUMNS)))
    assert dialog.width() >= total  # the table fits the dialog: nothing cut off to the right
    role = dialog.groups.cellWidget(0, 1)
    assert header.sectionSize(1) >= role.sizeHint().width()  # "ASYNC_MASTER", not "ASYNC_MAS"


def test_the_fault_table_and_the_dark_theme_read_whole(qtbot, loop, home):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    header = window.load.faults.horizontalHeader()
    metrics = header.fontMetrics()
    assert header.sectionSize(1) >= metrics.horizontalAdvance("current latency (ms)")
    window.set_dark(True)
    palette = QApplication.instance().palette()
    placeholder = palette.color(QPalette.ColorRole.PlaceholderText)
    base = palette.color(QPalette.ColorRole.Base)
    assert placeholder.lightness() - base.lightness() > 100  # readable on the dark base
    assert window.dark.text() == "Light theme"
    window.set_dark(False)


def test_the_export_form_offers_topics_and_a_folder_that_follows_the_topic(qtbot, loop,
                                                                            monkeypatch):
    from collections import deque

    from gui.cluster_model import ClusterModel
    from gui.views import export_view
    from gui.views.export_view import EXPORTS_FOLDER, ExportView

    model = ClusterModel()
    model.topic_totals = {"Orders": deque(), "Payments": deque(), "RMQ_SYS_TRACE_TOPIC": deque(),
                          "%RETRY%CID-a": deque()}
    view = ExportView(model)
    qtbot.addWidget(view)
    view.show()  # the picker is filled when the tab is shown
    assert view.topic_names.stringList() == ["Orders", "Payments"]
    view.topic.setText("Orders")
    assert view.out.text() == f"{EXPORTS_FOLDER}/Orders"
    view.topic.setText("Payments")
    assert view.out.text() == f"{EXPORTS_FOLDER}/Payments"
    # A folder of the user's own stays, whatever the topic.
    monkeypatch.setattr(export_view.QFileDialog, "getExistingDirectory",
                        lambda *args: "/data/lake")
    view.choose_folder()
    view.topic.setText("Orders")
    assert view.out.text() == "/data/lake"


def test_the_load_charts_follow_the_theme(qtbot, loop, home):
    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    assert window.load.tps.backgroundBrush().color().name() == "#ffffff"
    window.set_dark(True)
    assert window.load.tps.backgroundBrush().color().name() == "#000000"
    window.set_dark(False)
    assert window.load.rt.backgroundBrush().color().name() == "#ffffff"


def test_a_reset_preview_asks_the_admin_client_and_says_where_each_queue_moves(qtbot, loop):
    from cluster.client.route import MessageQueue
    from gui.cluster_model import ClusterModel
    from gui.views.groups import GroupsView

    model = ClusterModel()
    view = GroupsView(model)
    qtbot.addWidget(view)
    asked = []

    async def preview_reset_by_time(group, topic, ms):
        asked.append((group, topic, ms))
        return [(MessageQueue(topic, "broker-a", 0), 120, 40), (MessageQueue(topic, "broker-a", 1),
                                                                -1, 0)]

    model.admin = SimpleNamespace(preview_reset_by_time=preview_reset_by_time)
    loop.run_until_complete(view._preview("CID-a", "Orders", 1_700_000_000_000))
    assert asked == [("CID-a", "Orders", 1_700_000_000_000)]
    assert view.preview.text().splitlines() == [
        "preview (nothing changed yet):", "broker-a queue 0: 120 -> 40", "broker-a queue 1: -1 -> 0"]


def test_a_refreshed_topic_table_refreshes_the_detail_and_keeps_the_forms(qtbot, loop):
    from gui.cluster_model import ClusterModel
    from gui.models.topics import TopicRow
    from gui.views.topics import TopicsView

    model = ClusterModel()
    view = TopicsView(model)
    qtbot.addWidget(view)
    answers = iter(["offsets 0..10", "offsets 0..20", "offsets 0..30"])

    async def detail(topic):
        return f"{topic}: {next(answers)}"

    view._topic_detail = detail
    model.admin = SimpleNamespace()
    rows = [TopicRow("Orders", 8, "read/write", 10, 1.0, (), 0),
            TopicRow("Audit", 2, "read/write", 5, None, (), 0)]
    view._show_topics(rows)
    view.select_topic("Orders")
    loop.run_until_complete(asyncio.sleep(0.05))
    assert view.topic_detail.toPlainText() == "Orders: offsets 0..10"
    view.finder.query_topic.setText("Audit")  # the user typed another topic to search
    view._show_topics(rows)  # the 5-second refresh
    loop.run_until_complete(asyncio.sleep(0.05))
    assert view.topic_detail.toPlainText() == "Orders: offsets 0..20"
    assert view.finder.query_topic.text() == "Audit"
    assert view.selected_topic() == "Orders"


def test_the_selected_groups_lag_refreshes_with_the_table(qtbot, loop):
    from cluster.client.route import MessageQueue
    from gui.cluster_model import ClusterModel
    from gui.models.groups import GroupRow
    from gui.views.groups import GroupsView

    model = ClusterModel()
    view = GroupsView(model)
    qtbot.addWidget(view)
    broker_offsets = iter([4206, 4300])

    async def consume_stats(group, topic=None):
        return {MessageQueue("Orders", "broker-a", 0): {"brokerOffset": next(broker_offsets),
                                                        "consumerOffset": 0}}

    async def consumer_connections(group):
        return {}

    model.admin = SimpleNamespace(consume_stats=consume_stats,
                                  consumer_connections=consumer_connections)
    rows = [GroupRow("CID-a", 4206, None, 0, "-", 0, 16)]
    view._show_groups(rows)
    view.groups.blockSignals(True)
    view.select_group("CID-a", load=False)
    view.groups.blockSignals(False)
    view.show_group()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert "total lag 4,206" in view.summary.text()
    view._show_groups(rows)  # the 5-second refresh, the same group still selected
    loop.run_until_complete(asyncio.sleep(0.05))
    assert "total lag 4,300" in view.summary.text()


def test_every_window_action_is_in_a_menu_with_its_shortcut_shown(qtbot, loop, home,
                                                                   monkeypatch):
    from PySide6.QtCore import Qt

    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=3000)  # shortcuts reach the active window
    menus = {m.title(): m for m in (a.menu() for a in window.menuBar().actions())}
    assert list(menus) == ["&Cluster", "&Node", "&View"]
    shortcuts = {a.text(): a.shortcut().toString() for m in menus.values() for a in m.actions()
                 if not a.isSeparator()}
    assert shortcuts["&New topology…"] == "Ctrl+N"
    assert shortcuts["&Refresh this tab"] == "F5"
    assert shortcuts["Cluster"] == "Ctrl+2"
    assert shortcuts["Topics && messages"] == "Ctrl+4"
    assert "Kill" in " ".join(shortcuts)
    assert window.create_button.toolTip() == "Create and start the profile (Ctrl+Shift+N)"
    assert "(Ctrl+Shift+D)" in window.dark.toolTip()
    # The keys work: a tab, the theme, the address field.
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.nodes
    qtbot.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert window.external.hasFocus()
    refreshed = []
    monkeypatch.setattr(window.groups, "refresh", lambda: refreshed.append("groups"))
    window.tabs.setCurrentWidget(window.groups)
    assert refreshed == ["groups"]  # shown: refreshed at once
    qtbot.keyClick(window, Qt.Key.Key_F5)
    assert refreshed == ["groups", "groups"]
    # The Node menu acts on the node picked on the Cluster tab, and says so when none is.
    said, acted = [], []
    window.model.message.connect(said.append)
    window._node_action("pause")
    assert window.tabs.currentWidget() is window.nodes
    assert "pick a node on the Cluster tab first" in window.statusBar().currentMessage()
    monkeypatch.setattr(window.nodes, "run_action", acted.append)
    window.nodes.show_nodes([{"name": "broker-a-0", "kind": "broker", "role": "ASYNC_MASTER",
                              "address": "127.0.0.1:10911", "haPort": 10912, "pid": 1,
                              "state": "running", "health": "ok", "cpuPercent": 0.0,
                              "rssBytes": 1, "openFiles": 1, "diskBytes": 1}])
    window.nodes.select("broker-a-0")
    window._node_action("pause")
    assert acted == ["pause"]


def test_a_chart_reads_out_its_values_under_the_mouse(qtbot, loop):
    from gui.cluster_model import ClusterModel
    from gui.views.charts import ChartsView

    view = ChartsView(ClusterModel())
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    plot = view.tps
    plot.plot([-10, -5, -1], [100, 2500, 3120], name="broker-a-0")
    plot.plot([-10, -5, -1], [90, 2400, 3050], name="broker-b-0")
    plot.getPlotItem().vb.setRange(xRange=(-12, 0), yRange=(0, 4000), padding=0)
    box = plot.getPlotItem().vb
    point = box.mapViewToScene(pg_point(-5, 1000))
    plot.hover_moved(point)
    assert plot.hover_readout.isVisible()
    assert plot.hover_readout.textItem.toPlainText() == (
        "5 s ago: broker-a-0 2,500 msg/s · broker-b-0 2,400 msg/s")
    plot.hover_moved(box.sceneBoundingRect().bottomRight() + pg_point(50, 50))  # outside
    assert not plot.hover_readout.isVisible()


def pg_point(x, y):
    from PySide6.QtCore import QPointF

    return QPointF(x, y)


def test_the_export_says_how_long_spark_has_been_starting(qtbot, loop, tmp_path):
    import json
    import time

    from gui.cluster_model import ClusterModel
    from gui.views.export_view import ExportView

    view = ExportView(ClusterModel())
    qtbot.addWidget(view)
    events = tmp_path / "events.jsonl"
    events.write_text("")
    view.events_path, view.state = str(events), "running"
    view._started, view._planned = time.monotonic() - 12.4, False
    view.poll_events()
    assert view.status.text().startswith("starting Spark… 12 s")
    events.write_text(json.dumps({"event": "planned", "total": 20000}) + "\n")
    view.poll_events()
    assert view.status.text() == "20,000 messages to export"
    view.poll_events()  # planned: no more talk of Spark starting
    assert view.status.text() == "20,000 messages to export"


def test_a_late_answer_about_another_group_does_not_fill_the_pane(qtbot, loop):
    from cluster.client.route import MessageQueue
    from gui.cluster_model import ClusterModel
    from gui.models.groups import GroupRow
    from gui.views.groups import GroupsView

    model = ClusterModel()
    view = GroupsView(model)
    qtbot.addWidget(view)
    gate = asyncio.Event()

    async def consume_stats(group, topic=None):
        if group == "CID-a":
            await gate.wait()  # slow
        return {MessageQueue(f"T-{group}", "broker-a", 0): {"brokerOffset": 5,
                                                            "consumerOffset": 0}}

    async def consumer_connections(group):
        return {}

    model.admin = SimpleNamespace(consume_stats=consume_stats,
                                  consumer_connections=consumer_connections)
    view.group_rows = [GroupRow(g, 0, None, 0, "-", 0, 16) for g in ("CID-a", "CID-b")]
    view._fill_groups()
    view.select_group("CID-a", load=False)  # starts CID-a's slow load
    view.select_group("CID-b", load=False)
    loop.run_until_complete(asyncio.sleep(0.05))
    gate.set()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert view.summary.text().startswith("group CID-b")
    assert view.reset_topic.text() == "T-CID-b"


def test_a_deleted_topic_leaves_no_detail_and_a_log_or_stop_says_what_happens(qtbot, loop, home,
                                                                              monkeypatch):
    from gui.main_window import MainWindow
    from gui.models.topics import TopicRow

    window = MainWindow()
    qtbot.addWidget(window)
    view = window.topics
    view.topic_detail.setPlainText("Orders: offsets 0..10")
    view._show_topics([TopicRow("Audit", 2, "read/write", 5, None, (), 0)])  # Orders went
    assert view.topic_detail.toPlainText() == ""
    window.open_log("broker-x-0")  # a node RocketDesk does not run
    assert "no log of broker-x-0 here" in window.statusBar().currentMessage()
    asked, stopped = [], []
    monkeypatch.setattr(window.nodes, "confirm", asked.append)

    async def stop_cluster():
        stopped.append(True)

    monkeypatch.setattr(window.model, "stop_cluster", stop_cluster)
    window.model.supervisor = object()  # (a cluster RocketDesk runs: there is one to stop)
    window.stop_cluster()  # answered no
    window.model.supervisor = None
    loop.run_until_complete(asyncio.sleep(0.02))
    assert len(asked) == 1
    assert "Stop every node" in asked[0]
    assert stopped == []


def test_empty_charts_say_why_over_plain_axes_and_legends_follow_the_theme(qtbot, loop, home):
    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    charts, load = window.charts, window.load
    charts.redraw({})
    # No group: a sentence, the 5-minute window below and no numbers on the left (not 0.1..0.9).
    note = charts.group_lag.empty_note
    assert note.isVisible()
    assert "no consumer group yet" in note.textItem.toPlainText()
    assert charts.group_lag.getViewBox().viewRange()[0] == [-300, 0]
    assert not charts.group_lag.getAxis("left").style["showValues"]
    for plot, words in ((load.tps, "no load yet"), (load.rt, "no producer yet")):
        assert plot.empty_note.isVisible()
        assert words in plot.empty_note.textItem.toPlainText()
        assert not plot.getAxis("left").style["showValues"]
    assert not load.rt.getAxis("bottom").style["showValues"]  # buckets, not time: nothing below

    # Data arrives: the sentence goes and the axes follow the data again.
    from collections import deque

    window.model.lag = {"CID-orders": deque([(__import__("time").time() - 5, 1200)])}
    charts.redraw({})
    assert not note.isVisible()
    assert charts.group_lag.getAxis("left").style["showValues"]

    # A legend label drawn in the light theme is redrawn in the dark one (it kept its colour).
    legend = charts.group_lag.getPlotItem().legend
    _sample, label = legend.items[0]
    assert label.text == "CID-orders"
    window.set_dark(True)
    assert "#dddddd" in label.item.toHtml()
    window.set_dark(False)
    assert "#333333" in label.item.toHtml()
    assert "#dddddd" not in label.item.toHtml()


def test_the_topic_and_group_tables_show_every_column_at_the_default_size(qtbot, loop, home):
    from gui.main_window import MainWindow
    from gui.models.groups import GroupRow
    from gui.models.topics import TopicRow

    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    window.topics._show_topics([TopicRow("Orders", 8, "read/write", 1_250_000, 1234.5,
                                         ("CID-orders",), 1764120000000)])
    window.groups._show_groups([GroupRow("CID-orders", 120_000, 950.5, 4, "4.x push", 0, 16)])
    for tab, table in ((window.topics, window.topics.topics), (window.groups, window.groups.groups)):
        window.tabs.setCurrentWidget(tab)
        qtbot.wait(50)
        # Every column whole on screen, no scroll bar hiding the figures (a pane a third as
        # wide as its columns was the finding).
        assert table.horizontalHeader().length() <= table.viewport().width(), tab
    # Short headers, each explained where the pointer rests on it.
    assert window.topics.topics.horizontalHeaderItem(4).toolTip() == (
        "messages put per second over the last minute")


def test_local_exports_run_on_the_warm_spark_the_tab_starts_and_that_ends_with_the_console(
        qtbot, loop, monkeypatch, tmp_path):
    import os

    from gui.cluster_model import ClusterModel
    from gui.views import export_view
    from gui.views.export_view import ExportView

    monkeypatch.setenv("ROCKETDESK_EXPORT_WARM", "1")
    started = []

    def fake_start(process):  # the warm-up's `rocketdesk export service start`
        env = process.processEnvironment()
        started.append((process.arguments(), env.value("ROCKETDESK_EXPORT_SERVICE_PARENT")))

    def fake_launch(launch):  # an export's `rocketdesk export`
        started.append((launch.args, launch.env.get("ROCKETDESK_EXPORT_SERVICE_PARENT")))

    monkeypatch.setattr(export_view.QProcess, "start", fake_start)
    monkeypatch.setattr(export_view.ExportLaunch, "start", fake_launch)
    model = ClusterModel()
    model.external = "127.0.0.1:9876"
    view = ExportView(model)
    qtbot.addWidget(view)
    view.show()  # the first show warms Spark up, once
    view.hide()
    view.show()
    assert [args[2:5] for args, _ in started] == [["export", "service", "start"]]
    assert "warming up" in view.spark_state.text()
    view.topic.setText("Orders")
    view.out.setText(str(tmp_path / "out"))
    view.start()
    args, parent = started[-1]
    assert "--warm" in args
    assert parent == str(os.getpid())  # a service it starts ends with this console
    view.master.setText("spark://somewhere:7077")
    view.start()
    assert "--warm" not in started[-1][0]  # a Spark cluster runs each export on its own


def test_the_export_tab_lists_every_export_and_stops_a_continuous_one(qtbot, loop, home,
                                                                      monkeypatch, tmp_path):
    import json
    import os

    from gui.cluster_model import ClusterModel
    from gui.views import export_view
    from gui.views.export_view import ExportView

    jobs = home / "exports" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "20261126-040000-aaaaaa.json").write_text(json.dumps(
        {"id": "20261126-040000-aaaaaa", "created": 100.0, "state": "finished", "topics": ["Orders"],
         "exported": 9000, "total": 9000, "out": str(tmp_path), "service": True}))
    (jobs / "20261126-050000-bbbbbb.json").write_text(json.dumps(
        {"id": "20261126-050000-bbbbbb", "created": 200.0, "state": "running", "topics": ["Live"],
         "exported": 4000, "lag": 7, "continuous": True, "pid": os.getpid(), "out": "/lake"}))
    detached = []
    monkeypatch.setattr(export_view.QProcess, "startDetached",
                        staticmethod(lambda program, args: detached.append(args)))
    model = ClusterModel()
    model.external = "127.0.0.1:9876"
    view = ExportView(model)
    qtbot.addWidget(view)
    view.show()  # (warming is off in these tests)
    cells = [[view.jobs.item(r, c).text() for c in range(3)] for r in range(view.jobs.rowCount())]
    assert [c[1:] for c in cells] == [["running (continuous)", "Live"], ["finished", "Orders"]]
    said = []
    model.message.connect(said.append)
    view.jobs.selectRow(1)
    view.stop_selected()  # a finished export: nothing to stop
    assert detached == []
    assert said[-1] == "select a running export to stop or cancel"
    view.jobs.selectRow(0)
    view.stop_selected()
    assert detached == [["-m", "rocketdesk.cli", "export", "cancel", "20261126-050000-bbbbbb"]]

    # A continuous export from the form: the button stops it, the status says how far behind.
    started = []
    monkeypatch.setattr(export_view.ExportLaunch, "start", lambda launch: started.append(launch.args))
    view.topic.setText("Live")
    view.continuous.setChecked(True)
    assert view.cancel_button.text() == "Stop"
    view.start()
    assert "--continuous" in started[-1]
    view.on_event({"event": "progress", "exported": 1200, "total": None, "lag": 30})
    assert view.status.text() == "kept up to date: 1,200 messages exported so far, 30 behind the topic"


def test_the_exports_table_follows_the_running_export_with_its_progress_line(qtbot, loop, home,
                                                                             tmp_path):
    import os

    from export.job import Events
    from export.job_record import JobRecord
    from gui.cluster_model import ClusterModel
    from gui.views.export_view import ExportView

    jobs = home / "exports" / "jobs"
    jobs.mkdir(parents=True)
    record = JobRecord(str(jobs / "20261127-100000-cccccc.json"),
                       {"topics": ["Orders"], "pid": os.getpid(), "out": str(tmp_path)})
    view = ExportView(ClusterModel())
    qtbot.addWidget(view)
    view.show()
    view.jobs_timer.stop()  # only the export's own events move the table here
    events = tmp_path / "events.jsonl"
    events.write_text("")
    view.events_path, view.state, view._planned = str(events), "running", True

    emitter = Events(str(events), record)  # as the export's process writes both
    emitter.emit("planned", total=381024)
    emitter.emit("progress", exported=47628, total=381024, rate=9000)
    emitter.close()
    view.poll_events()
    assert view.status.text().startswith("exported 47,628 of 381,024")
    row = [view.jobs.item(0, c).text() for c in range(view.jobs.columnCount())]
    assert any("47,628" in cell for cell in row), row
