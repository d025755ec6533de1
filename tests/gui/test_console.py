"""The console's real views against a real cluster, driven as a user would (offscreen)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from common.platform import processes
from gui.main_window import MainWindow
from tests.conftest import process_gone

pytestmark = [pytest.mark.gui, pytest.mark.integration]


_last: dict = {}


def every(seconds: float, action) -> None:
    """Do ``action`` again at most every ``seconds`` (a user clicking Refresh while waiting)."""
    now = time.monotonic()
    if now - _last.get(action, 0) >= seconds:
        _last[action] = now
        action()


def close_console(window, loop, pump) -> None:
    """Stop the cluster the test started (as the Stop button does) and close the window."""
    from gui.tasks import spawn

    done = []
    spawn(window.model.stop_cluster(), on_done=done.append, on_error=done.append)
    pump(lambda: done, 60, "the cluster to stop")
    loop.run_until_complete(window.model.close())
    window.close()


def cell(table, row, column) -> str:
    item = table.item(row, column)
    return item.text() if item else ""


def node_row(window, name):
    table = window.nodes.table
    for row in range(table.rowCount()):
        if cell(table, row, 0) == name:
            return {table.horizontalHeaderItem(c).text(): cell(table, row, c)
                    for c in range(table.columnCount())}
    return None


def test_console_runs_a_cluster_topics_messages_charts_and_an_export(qtbot, loop, pump, home, tmp_path,
                                                                     monkeypatch):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    try:
        # Create and start a cluster from a profile; its nodes show up healthy.
        window.profile.setCurrentText("single")
        window.create_button.click()
        pump(lambda: (node_row(window, "broker-a-0") or {}).get("health") == "ok", 60, "healthy nodes")
        assert node_row(window, "namesrv-0")["state"] == "running"
        assert "name server" in window.nodes.address.text()

        # A topic, a message, found again by key, resent.
        topics = window.topics
        topics.new_topic.setText("ConsoleTopic")
        topics.queues.setValue(4)
        topics.create_topic()
        def listed():  # the name server learns of a topic with the broker's next registration
            every(0.5, topics.refresh)
            return topics.topics.findItems("ConsoleTopic", Qt.MatchFlag.MatchExactly) != []

        pump(listed, 20, "the new topic in the list")
        topics.send_topic.setText("ConsoleTopic")
        topics.send_keys.setText("console-key-1")
        topics.send_body.setText('{"hello": "console"}')
        topics.send_props.setText("origin=console; shard=7")
        topics.send_message()
        pump(lambda: "SEND_OK" in window.statusBar().currentMessage(), 20, "the send")
        topics.finder.query_topic.setText("ConsoleTopic")
        topics.finder.query_key.setText("console-key-1")

        def found(count=1):
            if topics.finder.results.rowCount() < count:
                every(0.5, topics.finder.find)
            return topics.finder.results.rowCount() >= count

        pump(found, 20, "the message by key")
        assert '"hello": "console"' in topics.finder.detail.toPlainText()
        # properties one per line, not a Python dict
        assert re.search(r"^\s+shard\s+= 7$", topics.finder.detail.toPlainText(), re.M)
        topics.finder.trace()  # sent from the console, so traced
        pump(lambda: "Pub       rocketdesk-console ok" in topics.finder.detail.toPlainText(), 20, "the trace")
        topics.finder.resend()
        pump(lambda: "resent to ConsoleTopic: SEND_OK" in window.statusBar().currentMessage(), 20,
             "the resend")
        pump(lambda: found(2), 20, "both copies")
        topics.finder.body_mode.setCurrentText("hex")
        assert "7b 22 68 65" in topics.finder.detail.toPlainText()  # {"he…
        topics.finder.body_mode.setCurrentText("pretty JSON")
        topics.finder.save_body(str(tmp_path / "body.bin"))
        assert (tmp_path / "body.bin").read_bytes() == b'{"hello": "console"}'
        topics.finder.export_results(str(tmp_path / "results.json"))
        assert len((tmp_path / "results.json").read_text().splitlines()) == 2

        # Browse the queue the message is in, from offset 0, as a tool (nothing committed).
        first = topics.finder.records[0]
        topics.finder.records, before = [], topics.finder.results.rowCount()
        topics.finder.results.setRowCount(0)
        topics.finder.browse_broker.setText("broker-a")
        topics.finder.browse_queue.setValue(first.queue_id)
        topics.finder.browse_offset.setValue(0)
        topics.finder.browse()
        pump(lambda: topics.finder.results.rowCount() >= 1, 20, "the browsed queue")
        assert any(r.keys == "console-key-1" for r in topics.finder.records)
        assert before == 2

        # Charts receive one-second samples.
        pump(lambda: window.charts.sample_count() >= 3, 20, "chart samples")
        xs, ys = window.charts.points("broker-a-0", "max")
        assert len(xs) >= 3
        assert ys[-1] > 0
        assert [label for label, _ in window.charts.latency_last_second()][:1] == ["[<=0ms]"]

        # Live tail: a message sent now shows up.
        topics.finder.query_topic.setText("ConsoleTopic")
        topics.finder.tail_button.setChecked(True)
        loop.run_until_complete(asyncio.sleep(1.5))
        topics.send_keys.setText("tailed-1")
        topics.send_props.setText("")
        topics.send_message()
        pump(lambda: any(r.keys == "tailed-1" for r in topics.finder.records), 20, "the tailed message")
        topics.finder.tail_button.setChecked(False)

        # Start an export from the topic, and cancel it; the form is usable again.
        export = window.export
        topics.topics.setCurrentItem(topics.topics.findItems("ConsoleTopic", Qt.MatchFlag.MatchExactly)[0])
        topics.export_topic()
        assert window.tabs.currentWidget() is export
        assert export.topic.text() == "ConsoleTopic"
        topics.finder.query_key.setText("console-key-1")
        topics.finder.export_query()
        assert export.keys.text() == "console-key-1"
        export.keys.setText("")
        export.out.setText(str(tmp_path / "console-export"))
        export.start()
        events = export.events_path
        pump(lambda: export.state == "running", 10)
        loop.run_until_complete(asyncio.sleep(1.0))
        export.cancel()
        pump(lambda: export.state in ("cancelled", "finished", "failed"), 90, "the export to stop")
        assert export.state == "cancelled"
        assert export.start_button.isEnabled()
        assert events
        assert not Path(events).exists()  # read to its end, then removed
        assert not (tmp_path / "console-export").exists()

        # Another export, let go as its view closes (what "Keep it running" does when the
        # console closes): it goes on without the view, verified to the end, and its launcher
        # cleans up as when it is followed (its scratch, Spark's temporary files).
        import os

        from export.job_record import jobs_dir, read_records
        from gui.views import export_view

        launcher_tmp = tmp_path / "launcher-tmp"
        launcher_tmp.mkdir()
        tmpdir = os.environ.get("TMPDIR")
        monkeypatch.setenv("TMPDIR", str(launcher_tmp))  # (read at the start only)
        monkeypatch.setattr(export_view, "ask_on_close", lambda *_: "keep")
        kept = export_view.ExportView(window.model)
        kept.topic.setText("ConsoleTopic")
        kept.out.setText(str(tmp_path / "kept-export"))
        kept.start()
        if tmpdir is None:
            monkeypatch.delenv("TMPDIR")
        else:
            monkeypatch.setenv("TMPDIR", tmpdir)
        launch = kept.launch
        assert kept.may_close()
        kept.deleteLater()
        del kept

        # A consumer group with its lag per queue; the log of a node, searched; the store of the
        # broker browsed from its files; the dark theme.
        from cluster.client.consumer import PushConsumer

        consumed = []
        consumer = PushConsumer("cg-console", window.model.namesrv_addr,
                                consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe("ConsoleTopic", "*")

        async def listener(messages):
            consumed.extend(messages)

        consumer.register_listener(listener)
        loop.run_until_complete(consumer.start())
        pump(lambda: len(consumed) >= 2, 30, "the consumer")
        loop.run_until_complete(consumer.persist_offsets(oneway=False))
        groups = window.groups

        def group_listed():
            every(0.5, groups.refresh)
            return groups.groups.findItems("cg-console", Qt.MatchFlag.MatchExactly) != []

        pump(group_listed, 20, "the consumer group")
        groups.groups.setCurrentItem(groups.groups.findItems("cg-console", Qt.MatchFlag.MatchExactly)[0])
        pump(lambda: "total lag 0" in groups.summary.text(), 20, "the group's lag")
        assert "1 client(s) online" in groups.clients.text()
        pump(lambda: "cg-console" in window.model.lag, 20, "the group's lag history")
        loop.run_until_complete(consumer.shutdown())

        # The message's track: which groups consumed it; the topic's route and offsets.
        topics.finder.results.selectRow(0)
        topics.finder.track()
        pump(lambda: "cg-console: CONSUMED" in topics.finder.detail.toPlainText(), 20, "the message track")
        items = topics.topics.findItems("ConsoleTopic", Qt.MatchFlag.MatchExactly)
        topics.topics.setCurrentItem(items[0])
        topics.show_topic("ConsoleTopic")
        pump(lambda: "read by: cg-console" in topics.topic_detail.toPlainText(), 20,
             "the topic detail: " + window.statusBar().currentMessage())
        assert "4 read / 4 write queues" in topics.topic_detail.toPlainText()

        window.logs.node.setCurrentText("broker-a-0")
        pump(lambda: "boot success" in window.logs.text.toPlainText(), 10, "the broker's log")
        window.logs.search.setText("boot success")
        assert window.logs.find_next()

        store_dir = window.model.supervisor.node("broker-a-0").store_dir
        window.store.path.setText(store_dir)
        window.store.open_store()
        assert "ConsoleTopic" in window.store.summary.text()
        window.store.topic.setText("ConsoleTopic")
        window.store.scan()
        assert window.store.table.rowCount() == 3  # the message, its resent copy, the tailed one
        window.dark.setChecked(True)
        window.dark.setChecked(False)

        # Load from the console: a producer and a slow consumer, charted with the fault table.
        load = window.load
        load.topic.setText("ConsoleTopic")
        load.rate.setValue(200)
        load.start_producer()
        load.slow.setValue(5)
        load.start_consumer()
        pump(lambda: all(len(lp.seconds) >= 2 for lp in load.loads.values()) and len(load.loads) == 2,
             45, "load processes reporting")
        pump(lambda: any(v > 0 for _, v in window.model.topic_tps().get("ConsoleTopic", [])), 30,
             "the topic's TPS")
        producer = load.loads["producer 1"]
        assert sum(s["tps"] for s in producer.seconds) > 0
        assert load.faults.rowCount() >= 1  # the producer has sent to broker-a
        # Stopped as on Windows, where QProcess.terminate never reaches a console program: by
        # a request file each load process looks for (it ends on its own, exit code 0).
        as_on_this_platform = processes.STOP_BY_REQUEST
        monkeypatch.setattr(processes, "STOP_BY_REQUEST", True)
        asked, ask = [], processes.stop_requests.ask
        monkeypatch.setattr(processes.stop_requests, "ask", lambda p: asked.append(p.pid) or ask(p))
        pids = sorted(lp.process.processId() for lp in load.loads.values())
        load.stop_all()
        pump(lambda: "no load running" in load.running.text(), 20, "the load to stop")
        assert sorted(asked) == pids  # through the platform layer (not QProcess.terminate)
        assert [lp.process.exitCode() for lp in load.loads.values()] == [0, 0]
        # (not monkeypatch.undo(): that would also undo the fixtures' isolated home)
        monkeypatch.setattr(processes, "STOP_BY_REQUEST", as_on_this_platform)

        # A wrong address: a sentence, and the cluster on screen stays.
        namesrv = window.model.namesrv_addr
        supervisor = window.model.supervisor
        said: list[str] = []
        window.model.message.connect(said.append)
        window.external.setText("127.0.0.1:1")
        window.connect_external()
        pump(lambda: any("no name server answers at 127.0.0.1:1" in s for s in said), 10,
             "the refusal")
        assert window.model.supervisor is supervisor
        assert window.model.external is None
        assert not any("Errno" in s for s in said)

        # The same cluster seen as an external one, by its name-server address only.
        window.external.setText(namesrv)
        window.connect_external()
        pump(lambda: node_row(window, "broker-a-0") is not None
             and node_row(window, "broker-a-0")["state"] == "running"
             and node_row(window, f"namesrv {namesrv}") is not None, 20, "the external view")
        window.model.attach(supervisor.state.name, supervisor)
        pump(lambda: node_row(window, "namesrv-0") is not None, 20, "the managed view again")

        # The export let go has ended on its own (before the broker it reads from is killed).
        pump(lambda: launch.poll() is not None, 180, "the export let go to end")
        assert launch.poll() == 0, read_records(str(jobs_dir()))
        [record] = [r for r in read_records(str(jobs_dir())) if r.get("out") == str(tmp_path / "kept-export")]
        assert (record["state"], record["exported"]) == ("finished", record["total"]), record
        assert record["total"] >= 3
        assert list(launcher_tmp.iterdir()) == []

        # Kill the broker from the node table: it is marked down.
        window.nodes.select("broker-a-0")
        pid = int(node_row(window, "broker-a-0")["pid"])
        asked: list[str] = []
        window.nodes.confirm = lambda question: asked.append(question) is None and len(asked) > 1
        window.nodes.run_action("kill")  # asks, and "no" leaves it running
        assert "Kill broker-a-0" in asked[0]
        assert node_row(window, "broker-a-0")["state"] == "running"
        window.nodes.run_action("kill")  # "yes" the second time
        pump(lambda: (node_row(window, "broker-a-0") or {}).get("state") in ("stopped", "died"), 20,
             "the killed broker marked down")
        assert process_gone(pid)
    finally:
        close_console(window, loop, pump)


def test_a_cluster_designed_in_the_topology_editor_starts(qtbot, loop, pump, home):
    from gui.views.topology import TopologyDialog

    window = MainWindow()
    qtbot.addWidget(window)
    dialog = TopologyDialog(window)
    dialog.name.setText("designed")
    dialog.groups.cellWidget(0, 1).setCurrentText("SYNC_MASTER")
    dialog.accept_if_valid()  # a SYNC_MASTER without a slave is refused, with a sentence
    assert "SLAVE_NOT_AVAILABLE" in dialog.problem.text()
    dialog.groups.cellWidget(0, 3).setValue(1)
    dialog.groups.cellWidget(0, 4).setValue(64)
    spec = dialog.spec()
    assert [(g.master_role, g.slaves, g.commitlog_file_size) for g in spec.groups] == [
        ("SYNC_MASTER", 1, 64 << 20)]
    try:
        window.start_spec(spec)
        pump(lambda: (node_row(window, "broker-a-1") or {}).get("health") == "ok", 60, "the designed cluster")
        assert node_row(window, "broker-a-0")["role"] == "SYNC_MASTER"
        assert node_row(window, "broker-a-1")["role"] == "SLAVE"
    finally:
        close_console(window, loop, pump)


def test_the_console_redrives_a_dead_letter(qtbot, loop, pump, home):
    from cluster.client.consumer import ConsumeStatus, PushConsumer
    from cluster.client.message import Message
    from cluster.client.producer import Producer

    window = MainWindow()
    qtbot.addWidget(window)
    try:
        window.create_cluster()
        pump(lambda: (node_row(window, "broker-a-0") or {}).get("health") == "ok", 60, "the cluster")
        namesrv = window.model.namesrv_addr

        async def poison():
            async with Producer("pg-poison", namesrv) as producer:
                await producer.send(Message("Payments", b"cannot be processed", keys="pay-1"))

        loop.run_until_complete(poison())
        delivered = []
        # No retries allowed: the first failure goes straight to the dead-letter queue.
        consumer = PushConsumer("cg-payments", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                max_reconsume_times=0)
        consumer.subscribe("Payments", "*")

        async def listener(messages):
            delivered.extend(messages)
            return ConsumeStatus.RECONSUME_LATER if len(delivered) == 1 else ConsumeStatus.CONSUME_SUCCESS

        consumer.register_listener(listener)
        loop.run_until_complete(consumer.start())
        pump(lambda: len(delivered) >= 1, 30, "the first delivery")

        groups = window.groups
        groups.refresh()
        pump(lambda: groups.groups.findItems("cg-payments", Qt.MatchFlag.MatchExactly) != [], 20, "the group")
        groups.groups.setCurrentItem(groups.groups.findItems("cg-payments", Qt.MatchFlag.MatchExactly)[0])

        def dead_listed():
            every(0.5, groups.show_dead_letters)
            return groups.dead.rowCount() == 1

        pump(dead_listed, 30, "the dead letter")
        assert cell(groups.dead, 0, 0) == "Payments"
        assert cell(groups.dead, 0, 1) == "pay-1"
        groups.redrive(selected_only=False)
        pump(lambda: cell(groups.dead, 0, 6).startswith("SEND_OK"), 20, "the redrive receipt")
        # Redriven to its topic, the message reaches the (now healthy) consumer again.
        pump(lambda: len(delivered) >= 2, 30, "the redriven message")
        assert delivered[1].body == b"cannot be processed"
        assert delivered[1].topic == "Payments"
        loop.run_until_complete(consumer.shutdown())

        # A transaction left open shows among the pending half messages.
        from cluster.client.producer import LocalTransactionState, TransactionProducer

        async def open_transaction():
            producer = TransactionProducer("pg-open", namesrv)
            await producer.start()
            try:
                async def undecided(msg, result):
                    return LocalTransactionState.UNKNOW

                await producer.send_message_in_transaction(Message("Payments", b"t", keys="tx-1"),
                                                           undecided)
            finally:
                await producer.shutdown()

        loop.run_until_complete(open_transaction())
        window.topics.show_pending_transactions()
        pump(lambda: any(r.keys == "tx-1" for r in window.topics.finder.records), 20,
             "the pending transaction")
        assert cell(window.topics.finder.results, 0, 0) == "Payments (half, checks: 0)"
    finally:
        close_console(window, loop, pump)
