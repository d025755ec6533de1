"""What a user can do wrong, or too early, in the console gets a sentence, never a traceback
(pytest-qt fails a test whose slot raises): driven through the widgets, as a user would, with
no cluster where none is needed."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.gui

NO_CLUSTER = "no cluster is open yet"


@pytest.fixture
def said(qtbot, loop, home):
    """The console's model with no cluster open, and every sentence it says."""
    from gui.cluster_model import ClusterModel

    model = ClusterModel()
    sentences: list[str] = []
    model.message.connect(sentences.append)
    return model, sentences


def _button(view, text: str):
    from PySide6.QtWidgets import QPushButton

    (button,) = [b for b in view.findChildren(QPushButton) if b.text() == text]
    return button


def test_asking_the_cluster_before_one_is_open_says_so(qtbot, loop, said):
    """The first cluster is still starting (or failed to): a find, a topic created or deleted,
    a group created, a reset, the pending transactions."""
    from gui.views.groups import GroupsView
    from gui.views.topics import TopicsView

    model, sentences = said
    topics = TopicsView(model)
    qtbot.addWidget(topics)
    topics.finder.query_topic.setText("Orders")
    topics.finder.query_key.setText("order-1")
    topics.finder.query_key.returnPressed.emit()
    assert sentences[-1].startswith(NO_CLUSTER)
    topics.new_topic.setText("Orders")
    _button(topics, "Create or update").click()
    assert sentences[-1].startswith(NO_CLUSTER)
    sentences.clear()
    topics.show_pending_transactions()
    assert sentences
    assert sentences[-1].startswith(NO_CLUSTER)

    # Browse and live tail: their coroutines ask for the cluster, and say there is none.
    import asyncio

    topics.finder.browse_broker.setText("broker-a")
    topics.finder.browse()
    loop.run_until_complete(asyncio.sleep(0.1))
    assert sentences[-1].startswith(NO_CLUSTER)
    topics.finder.tail_button.setChecked(True)
    loop.run_until_complete(asyncio.sleep(0.1))
    assert sentences[-1].startswith(f"the live tail stopped: {NO_CLUSTER}")

    groups = GroupsView(model)
    qtbot.addWidget(groups)
    groups.new_group.setText("cg-orders")
    groups.new_group.returnPressed.emit()
    assert sentences[-1].startswith("open a cluster first")


def test_save_full_body_asks_where_and_a_folder_that_is_not_there_is_a_sentence(
        qtbot, said, tmp_path, monkeypatch):
    """The button opens the file dialog (its ``clicked`` passed ``False`` as the path: nothing
    happened at all); a path the console cannot write to is said, for the body as for the
    results."""
    from types import SimpleNamespace

    from PySide6.QtWidgets import QFileDialog

    from gui.views.messages import MessageFinder

    model, sentences = said
    finder = MessageFinder(model)
    qtbot.addWidget(finder)
    message = SimpleNamespace(uniq_key="AC11000100002A9F0000000000000001", body=b"a body")
    monkeypatch.setattr(finder, "selected_record", lambda: message)
    asked = []

    def where(parent, title, suggested, *rest):
        asked.append(suggested)
        return str(tmp_path / "body.bin"), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", where)
    _button(finder, "Save full body…").click()
    assert asked == [f"{message.uniq_key}.bin"]
    assert (tmp_path / "body.bin").read_bytes() == b"a body"

    finder.save_body(str(tmp_path / "missing" / "body.bin"))
    assert "No such file or directory" in sentences[-1]
    finder.export_results(str(tmp_path / "missing" / "messages.json"))
    assert "No such file or directory" in sentences[-1]


def test_a_body_or_filter_beyond_what_python_parses_is_said_as_such(qtbot, said):
    from gui.models.message_filter import ResultFilter
    from gui.views.filter_bar import FilterBar
    from gui.views.messages import MessageFinder

    model, _sentences = said
    finder = MessageFinder(model)
    qtbot.addWidget(finder)
    finder.body_mode.setCurrentText("pretty JSON")
    deep = b"[" * 200_000
    assert finder.render_body(deep).startswith("(the body is not JSON)")
    path_filter = ResultFilter.parse("", "", "$.order.total > 100", None, None)
    assert path_filter.json is not None
    assert not path_filter.json.holds(deep)

    bar = FilterBar()
    qtbot.addWidget(bar)
    problems = []
    bar.problem.connect(problems.append)
    bar.sql.setText("a > " + "9" * 5000)
    bar.apply()
    assert problems
    assert "too long" in problems[-1]


def test_picking_a_cluster_removed_meanwhile_says_so_and_keeps_the_one_on_screen(
        qtbot, loop, home):
    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    said = []
    window.statusBar().messageChanged.connect(said.append)
    window._shown_cluster = ""
    window.clusters.addItem("gone")  # listed when the console looked; `rocketdesk rm` since
    window.clusters.activated.emit(window.clusters.count() - 1)
    assert any("gone" in text for text in said), said
    assert window.clusters.findText("gone") == -1  # the list is what is there now
    assert window.model.supervisor is None


def test_a_designed_cluster_with_the_name_of_one_that_exists_is_refused_in_the_dialog(
        qtbot, loop, home, monkeypatch):
    from cluster.supervisor import state
    from gui.views import topology
    from gui.views.topology import TopologyDialog

    monkeypatch.setattr(topology, "cluster_names", lambda: ["my-cluster"])
    assert "my-cluster" not in state.cluster_names()  # (the test's own home: none there)
    dialog = TopologyDialog()
    qtbot.addWidget(dialog)
    dialog.accept_if_valid()
    assert "exists already" in dialog.problem.text()
    assert dialog.result() != TopologyDialog.DialogCode.Accepted
    dialog.name.setText("my-other-cluster")
    dialog.accept_if_valid()
    assert dialog.result() == TopologyDialog.DialogCode.Accepted


def test_stop_cluster_and_connect_say_what_they_cannot_do(qtbot, loop, home, monkeypatch):
    from gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    said = []
    window.statusBar().messageChanged.connect(said.append)
    window.model.message.connect(said.append)
    asked = []
    monkeypatch.setattr(window.nodes, "confirm", lambda question: asked.append(question) or True)
    window.stop_cluster()
    assert asked == []  # nothing to stop: not asked whether to
    assert "nothing to stop" in said[-1]

    window.external.setText("localhost:²")  # a digit to str.isdigit, not to int()

    async def settle():
        import asyncio
        for _ in range(20):
            await asyncio.sleep(0.05)

    window.connect_external()
    loop.run_until_complete(settle())
    assert "is not host:port" in said[-1]


def test_a_load_that_fails_says_how_and_one_without_a_topic_does_not_start(qtbot, said):
    import json

    from PySide6.QtCore import QProcess

    from gui.views.load import LoadProcess, LoadView

    model, sentences = said
    model.external = "127.0.0.1:9876"  # (a cluster on screen: the view starts loads)
    view = LoadView(model)
    qtbot.addWidget(view)
    view.topic.setText("  ")
    view.start_producer()
    assert sentences[-1] == "give the topic to send to"
    assert not view.loads

    # Every send failing: the running line says so, and why, every second.
    process = QProcess(view)
    process.setProgram(sys.executable)
    second = {"event": "second", "time": 0, "tps": 0, "failures": 812, "maxRt": 0,
              "histogram": [0] * 12, "buckets": list(range(11)), "faults": [],
              "error": "no route info of this topic: NoTopic"}
    process.setArguments(["-c", "import sys, time; print(sys.argv[1], flush=True); time.sleep(1); "
                          "sys.stderr.write('the load could not go on: no name server\\n'); "
                          "sys.exit(3)", json.dumps(second)])
    load = LoadProcess("producer 1", process)
    view.loads[load.name] = load
    lines = []

    def read():
        view._read(load)
        lines.append(view.running.text())

    process.readyReadStandardOutput.connect(read)
    with qtbot.waitSignal(process.finished, timeout=20_000):
        process.start()
    view._finished(load)
    assert any("812 failed in the last second: no route info of this topic: NoTopic" in line
               for line in lines), lines
    assert sentences[-1] == "producer 1 ended: the load could not go on: no name server"
