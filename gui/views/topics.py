"""Topics and messages: list, create and delete topics; send a test message; find messages by
key; resend one to its topic."""

from __future__ import annotations

import json

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cluster.client.message import Message
from cluster.client.producer import Producer
from gui.models.display import body_preview, broker_addrs_text, is_text, properties_text
from gui.models.topics import COLUMNS as TOPIC_COLUMNS
from gui.models.topics import matches, topic_row
from gui.tasks import ConsoleError, spawn
from gui.views.table_items import SortableItem, row_table, selected_name
from storage.inspector import format_timestamp, record_to_json

RESULT_COLUMNS = ["topic", "queue", "offset", "keys", "tags", "msgId", "stored", "body"]


class TopicsView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.records = []
        layout = QHBoxLayout(self)

        left = QVBoxLayout()
        self.show_system = QCheckBox("show system topics")
        self.show_system.toggled.connect(lambda _: self.refresh())
        self.topic_filter = QLineEdit()
        self.topic_filter.setPlaceholderText("filter topics by name or group")
        self.topic_filter.textChanged.connect(lambda _: self._fill_topics())
        self.topics = row_table(TOPIC_COLUMNS, sorted_by_name=True)
        self.topics.itemSelectionChanged.connect(lambda: self.show_topic(self.selected_topic()))
        self.topic_rows: list = []
        # Live figures while the tab is shown (and the list is there without a click).
        self.topic_timer = QTimer(self)
        self.topic_timer.setInterval(5000)
        self.topic_timer.timeout.connect(lambda: self.refresh() if self.isVisible() else None)
        self.topic_timer.start()
        self.topic_detail = QPlainTextEdit()
        self.topic_detail.setReadOnly(True)
        self.topic_detail.setMaximumHeight(160)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        create_box = QGroupBox("Create or update a topic")
        form = QFormLayout(create_box)
        self.new_topic = QLineEdit()
        self.queues = QSpinBox()
        self.queues.setRange(1, 1024)
        self.queues.setValue(8)
        self.perm = QComboBox()
        self.perm.addItems(["read and write (6)", "read only (4)", "write only (2)"])
        create = QPushButton("Create or update")
        create.clicked.connect(self.create_topic)
        delete = QPushButton("Delete selected topic")
        delete.clicked.connect(self.delete_topic)
        export = QPushButton("Export selected topic…")
        export.clicked.connect(self.export_topic)
        self.tail_button = QPushButton("Live tail of the topic")
        self.tail_button.setToolTip("new messages of the topic in the Find/Browse topic field, "
                                    "as they arrive")
        self.tail_button.setCheckable(True)
        self.tail_button.toggled.connect(self.toggle_tail)
        form.addRow("name", self.new_topic)
        form.addRow("queues", self.queues)
        form.addRow("permission", self.perm)
        form.addRow(create)
        left.addWidget(self.show_system)
        left.addWidget(self.topic_filter)
        left.addWidget(self.topics, 1)
        left.addWidget(self.topic_detail)
        left.addWidget(refresh)
        left.addWidget(delete)
        left.addWidget(export)
        left.addWidget(self.tail_button)
        pending = QPushButton("Pending transactions")
        pending.clicked.connect(self.show_pending_transactions)
        left.addWidget(pending)
        left.addWidget(create_box)
        layout.addLayout(left, 1)

        right = QVBoxLayout()
        send_box = QGroupBox("Send a test message")
        send_form = QFormLayout(send_box)
        self.send_topic = QLineEdit()
        self.send_keys = QLineEdit()
        self.send_tags = QLineEdit()
        self.send_body = QLineEdit()
        self.send_props = QLineEdit()
        self.send_props.setPlaceholderText("name=value; name=value")
        self.send_delay = QSpinBox()
        self.send_delay.setRange(0, 18)
        self.send_delay.setSpecialValueText("no delay")
        send = QPushButton("Send")
        send.clicked.connect(self.send_message)
        for label, widget in (("topic", self.send_topic), ("keys", self.send_keys),
                              ("tags", self.send_tags), ("body", self.send_body),
                              ("properties", self.send_props), ("delay level", self.send_delay)):
            send_form.addRow(label, widget)
        send_form.addRow(send)
        right.addWidget(send_box)

        query_box = QGroupBox("Find messages by key (the topic here is also the one Browse and "
                              "Live tail read)")
        query_layout = QHBoxLayout(query_box)
        self.query_topic = QLineEdit()
        self.query_topic.setPlaceholderText("topic (select one on the left)")
        self.query_key = QLineEdit()
        self.query_key.setPlaceholderText("key or msgId")
        find = QPushButton("Find")
        find.clicked.connect(self.find)
        query_layout.addWidget(self.query_topic)
        query_layout.addWidget(self.query_key)
        query_layout.addWidget(find)
        export_query = QPushButton("Export…")
        export_query.clicked.connect(self.export_query)
        query_layout.addWidget(export_query)
        right.addWidget(query_box)
        browse_box = QGroupBox("Browse a queue, or a time range of the topic")
        browse_layout = QHBoxLayout(browse_box)
        self.browse_broker = QLineEdit()
        self.browse_broker.setPlaceholderText("broker (e.g. broker-a)")
        self.browse_queue = QSpinBox()
        self.browse_queue.setRange(0, 1023)
        self.browse_offset = QSpinBox()
        self.browse_offset.setRange(0, 2**31 - 1)
        self.browse_minutes = QSpinBox()
        self.browse_minutes.setRange(0, 7 * 24 * 60)
        self.browse_minutes.setSpecialValueText("from the offset")
        self.browse_minutes.setSuffix(" min ago")
        browse = QPushButton("Browse")
        browse.clicked.connect(self.browse)
        self.cancel_scan = QPushButton("Cancel")
        self.cancel_scan.clicked.connect(self.cancel_browse)
        for widget in (self.browse_broker, QLabel("queue"), self.browse_queue, QLabel("offset"),
                       self.browse_offset, QLabel("or since"), self.browse_minutes, browse, self.cancel_scan):
            browse_layout.addWidget(widget)
        right.addWidget(browse_box)
        self._browse_task = None
        self._tail_task = None
        self.results = QTableWidget(0, len(RESULT_COLUMNS))
        self.results.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.results.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.itemSelectionChanged.connect(self.show_detail)
        right.addWidget(self.results, 1)
        self.body_mode = QComboBox()
        self.body_mode.addItems(["text", "pretty JSON", "hex"])
        self.body_mode.currentTextChanged.connect(lambda _: self.show_detail())
        right.addWidget(self.body_mode)
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        right.addWidget(self.detail, 1)
        actions = QHBoxLayout()
        resend = QPushButton("Resend to its topic")
        resend.clicked.connect(self.resend)
        self.resend_group = QLineEdit()
        self.resend_group.setPlaceholderText("consumer group")
        self.resend_group.setMinimumWidth(160)  # a group name fits
        resend_group = QPushButton("Resend to the group")
        resend_group.clicked.connect(self.resend_to_group)
        save_body = QPushButton("Save full body…")
        save_body.clicked.connect(self.save_body)
        export = QPushButton("Export results…")
        export.clicked.connect(lambda: self.export_results(None))
        track = QPushButton("Which groups consumed it?")
        track.clicked.connect(self.track)
        trace = QPushButton("Trace")
        trace.clicked.connect(self.trace)
        for widget in (resend, self.resend_group, resend_group, save_body, export, track, trace):
            actions.addWidget(widget)
        right.addLayout(actions)
        layout.addLayout(right, 2)

    # -- topics ----------------------------------------------------------------------------------
    def refresh(self) -> None:
        if self.model.admin is None:
            return
        spawn(self._load_topics(), on_done=self._show_topics, on_error=self.model.message.emit)

    async def _load_topics(self) -> list:
        """A row a topic: its route, queue stats and readers, and its rate from the model's
        5-second samples."""
        admin = self.model.admin
        topics = await admin.topic_list()
        # Retry topics are the broker's business (a group's lag counts them); system ones too.
        shown = sorted(t for t in topics if self.show_system.isChecked() or not (
            self.model.is_internal_topic(t) or t.startswith("%RETRY%")))
        rates = self.model.topic_tps()
        rows = []
        for topic in shown:
            try:
                route = await admin.topic_route(topic)
                # the model sampled it within the last 5 s (system topics it does not sample)
                stats = self.model.topic_stats.get(topic) or await admin.topic_stats(topic)
                groups = await admin.groups_of_topic(topic)
            except Exception:  # deleted meanwhile, or its broker is down: the name alone
                route, stats, groups = {}, {}, []
            rows.append(topic_row(topic, route, stats, groups, rates.get(topic)))
        return rows

    def _show_topics(self, rows: list) -> None:
        self.topic_rows = rows
        self._fill_topics()

    def _fill_topics(self) -> None:
        selected = self.selected_topic()
        rows = [r for r in self.topic_rows if matches(r, self.topic_filter.text())]
        self.topics.setSortingEnabled(False)
        self.topics.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, (text, key) in enumerate(zip(row.cells(), row.sort_keys(), strict=True)):
                item = SortableItem(text, key)
                item.setToolTip(text)
                self.topics.setItem(r, c, item)
        self.topics.setSortingEnabled(True)
        if selected:
            self.select_topic(selected)

    def selected_topic(self) -> str | None:
        return selected_name(self.topics)

    def select_topic(self, topic: str) -> None:
        for row in range(self.topics.rowCount()):
            item = self.topics.item(row, 0)
            if item is not None and item.text() == topic:
                self.topics.selectRow(row)
                return

    def create_topic(self) -> None:
        name = self.new_topic.text().strip()
        if not name:
            self.model.message.emit("give the topic a name")
            return
        queues = self.queues.value()
        perm = int(self.perm.currentText().split("(")[1].rstrip(")"))
        spawn(self.model.admin.create_topic(name, queues, queues, perm),
              on_done=lambda _: (self.model.message.emit(f"topic {name} created with {queues} queues"),
                                 self.refresh()),
              on_error=self.model.message.emit)

    def show_topic(self, topic: str | None) -> None:
        if topic:
            # The selected topic is the one the forms work on: find, browse, live tail and send
            # all read the topic field, so it says which one that is.
            self.query_topic.setText(topic)
            self.send_topic.setText(topic)
        if topic and self.model.admin is not None:
            spawn(self._topic_detail(topic), on_done=self.topic_detail.setPlainText,
                  on_error=self.model.message.emit)

    async def _topic_detail(self, topic: str) -> str:
        route = await self.model.admin.topic_route(topic)
        stats = await self.model.admin.topic_stats(topic)
        groups = await self.model.admin.groups_of_topic(topic)
        lines = [f"{q['brokerName']}: {q['readQueueNums']} read / {q['writeQueueNums']} write queues, "
                 f"perm {q['perm']}" for q in route["queueDatas"]]
        lines += [broker_addrs_text(b["brokerName"], b.get("brokerAddrs") or {})
                  for b in route["brokerDatas"]]
        lines += [f"  {mq.broker_name} queue {mq.queue_id}: offsets {v['minOffset']}..{v['maxOffset']}"
                  for mq, v in sorted(stats.items(), key=lambda i: (i[0].broker_name, i[0].queue_id))]
        lines.append("read by: " + (", ".join(groups) or "no group yet"))
        return "\n".join(lines)

    export_requested = Signal(str, str)  # topic, keys

    def export_topic(self) -> None:
        topic = self.selected_topic() or self.query_topic.text().strip()
        if not topic:
            self.model.message.emit("select a topic to export")
            return
        self.export_requested.emit(topic, "")

    def export_query(self) -> None:
        """The current key query as an export: same topic, same key."""
        topic, key = self.query_topic.text().strip(), self.query_key.text().strip()
        if not topic:
            self.model.message.emit("give the query a topic first")
            return
        self.export_requested.emit(topic, key)

    def toggle_tail(self, on: bool) -> None:
        if not on:
            if self._tail_task is not None:
                self._tail_task.cancel()
            return
        topic = self.query_topic.text().strip()
        if not topic:
            self.model.message.emit("give a topic (in the query row) to tail")
            self.tail_button.setChecked(False)
            return
        self.records = []
        self.results.setRowCount(0)
        self._tail_task = spawn(self._tail(topic), on_error=self.model.message.emit)

    async def _tail(self, topic: str, limit: int = 500) -> None:
        """New messages of every queue of ``topic`` as they arrive (pulled each second from
        where the queues ended when the tail began; nothing committed)."""
        import asyncio

        from cluster.client.pull import TOOLS_GROUP, PullStatus, pull_message

        admin = self.model.admin
        instance = admin.instance
        queues = await admin.readable_queues(topic)
        positions = {mq: await admin.max_offset(mq) for mq in queues}
        self.model.message.emit(f"tailing {topic} ({len(queues)} queues)")
        while True:
            fresh = []
            for mq in queues:
                result = await pull_message(instance, TOOLS_GROUP, mq, "*", positions[mq], 32)
                if result.status is PullStatus.FOUND:
                    fresh.extend(m.record for m in result.messages)
                    positions[mq] = result.next_begin_offset
            if fresh:
                self.records = (self.records + sorted(fresh, key=lambda r: r.store_timestamp))[-limit:]
                self._show_results(self.records, announce=False)
            await asyncio.sleep(1.0)

    def show_pending_transactions(self) -> None:
        """Half messages waiting for END_TRANSACTION or a check-back, in the results table."""
        if self.model.admin is None:
            return
        spawn(self.model.admin.pending_half_messages(), on_done=self._show_pending,
              on_error=self.model.message.emit)

    def _show_pending(self, records) -> None:
        self._show_results(records, announce=False)
        for row, record in enumerate(self.records):
            # Where it goes when committed, and how often the broker has asked its producer.
            props = record.properties
            checks = int(props.get("TRANSACTION_CHECK_TIMES", "0") or 0)
            self.results.setItem(row, 0, QTableWidgetItem(
                f"{props.get('REAL_TOPIC', record.topic)} (half, checks: {checks})"))
        self.model.message.emit(f"{len(records)} transaction(s) pending: half messages waiting for "
                                "their producer's commit or rollback, or for the broker's check-back")

    def delete_topic(self) -> None:
        name = self.selected_topic()
        if name is None:
            self.model.message.emit("select a topic to delete")
            return
        spawn(self.model.admin.delete_topic(name),
              on_done=lambda _: (self.model.message.emit(f"topic {name} deleted"), self.refresh()),
              on_error=self.model.message.emit)

    # -- messages --------------------------------------------------------------------------------
    async def _send(self, message: Message):
        # Messages sent from the console are traced: their detail shows where they went.
        async with Producer("rocketdesk-console", self.model.namesrv_addr, trace=True) as producer:
            return await producer.send(message)

    def send_message(self) -> None:
        topic = self.send_topic.text().strip()
        if not topic:
            self.model.message.emit("give the message a topic")
            return
        props = {}
        for item in self.send_props.text().split(";"):
            if item.strip():
                name, sep, value = item.partition("=")
                if not sep or not name.strip():
                    self.model.message.emit(f"{item.strip()!r} is not name=value")
                    return
                props[name.strip()] = value.strip()
        message = Message(topic, self.send_body.text().encode(), tags=self.send_tags.text() or None,
                          keys=self.send_keys.text() or None, properties=props,
                          delay_time_level=self.send_delay.value())
        spawn(self._send(message), on_done=lambda r: self.model.message.emit(
            f"{r.status.name}: msgId {r.msg_id} on {r.message_queue} at offset {r.queue_offset}"),
            on_error=self.model.message.emit)

    def find(self) -> None:
        topic, key = self.query_topic.text().strip(), self.query_key.text().strip()
        if not topic or not key:
            self.model.message.emit("give a topic and a key to search for")
            return
        spawn(self.model.admin.query_by_key(topic, key, 64), on_done=self._show_results,
              on_error=self.model.message.emit)

    def _show_results(self, records, announce: bool = True) -> None:
        self.records = list(records)
        self.results.setRowCount(len(self.records))
        for r, record in enumerate(self.records):
            body = body_preview(record.body)
            values = [record.topic, str(record.queue_id), str(record.queue_offset),
                      record.keys or "", record.tags or "", record.uniq_key or "",
                      format_timestamp(record.store_timestamp), body]
            for c, value in enumerate(values):
                self.results.setItem(r, c, QTableWidgetItem(value))
        if not announce:
            return
        capped = " (capped at 64)" if len(self.records) >= 64 else ""
        self.model.message.emit(f"found {len(self.records)} message(s){capped}")
        if self.records:
            self.results.selectRow(0)

    def selected_record(self):
        rows = self.results.selectionModel().selectedRows()
        return self.records[rows[0].row()] if rows else None

    def show_detail(self) -> None:
        record = self.selected_record()
        if record is None:
            return
        body = self.render_body(record.body)
        born_ip, born_port = record.born_host
        store_ip, store_port = record.store_host
        self.detail.setPlainText(
            f"topic {record.topic}  queue {record.queue_id}  offset {record.queue_offset}\n"
            f"msgId {record.uniq_key}\noffsetMsgId {record.msg_id}\n"
            f"born {format_timestamp(record.born_timestamp)} at {born_ip}:{born_port}\n"
            f"stored {format_timestamp(record.store_timestamp)} at {store_ip}:{store_port}\n"
            f"reconsumed {record.reconsume_times} times\nproperties\n"
            f"{properties_text(record.properties)}\n\n{body}")

    BODY_SHOWN = 64 * 1024  # larger bodies are shown truncated; "save full body" has them all

    def render_body(self, raw: bytes) -> str:
        shown, more = raw[: self.BODY_SHOWN], len(raw) - self.BODY_SHOWN
        mode = self.body_mode.currentText()
        if mode == "hex":
            text = "\n".join(f"{i:08x}  {shown[i:i + 16].hex(' ')}" for i in range(0, len(shown), 16))
        elif mode == "pretty JSON":
            try:
                text = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)[: self.BODY_SHOWN]
            except ValueError:
                text = "(the body is not JSON)\n" + shown.decode("utf-8", "replace")
        elif is_text(shown):
            text = shown.decode("utf-8")
        else:
            text = ("(a binary body: shown in hex)\n"
                    + "\n".join(f"{i:08x}  {shown[i:i + 16].hex(' ')}"
                                for i in range(0, len(shown), 16)))
        return text + (f"\n… {more:,} more bytes (save the full body to see them)" if more > 0 else "")

    def save_body(self, path: str | None = None) -> None:
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message first")
            return
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Save the message body", f"{record.uniq_key}.bin")
        if path:
            with open(path, "wb") as handle:
                handle.write(record.body)
            self.model.message.emit(f"{len(record.body):,} bytes saved to {path}")

    def export_results(self, path: str | None) -> None:
        """The result set as JSON lines (.json) or CSV (.csv), as `store dump` writes records."""
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Export the results", "messages.json",
                                                  "JSON lines (*.json);;CSV (*.csv)")
        if not path:
            return
        rows = [record_to_json(r) for r in self.records]
        if path.endswith(".csv"):
            import csv

            with open(path, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["topic"])
                writer.writeheader()
                for row in rows:
                    writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()})
        else:
            with open(path, "w", encoding="utf-8") as handle:
                for row in rows:
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.model.message.emit(f"{len(rows)} message(s) exported to {path}")

    def resend_to_group(self) -> None:
        """CONSUME_MESSAGE_DIRECTLY: one online consumer of the group consumes it again."""
        record, group = self.selected_record(), self.resend_group.text().strip()
        if record is None or not group:
            self.model.message.emit("select a message and name the consumer group")
            return

        async def run():
            connections = await self.model.admin.consumer_connections(group)
            clients = [c["clientId"] for c in connections.get("connectionSet", [])]
            if not clients:
                raise ConsoleError(f"no consumer of {group} is online")
            return await self.model.admin.consume_message_directly(group, clients[0], record.msg_id)

        spawn(run(), on_done=lambda r: self.model.message.emit(
            f"receipt from {group}: {r.get('consumeResult')} in {r.get('spentTimeMills', '?')} ms"),
            on_error=self.model.message.emit)

    def browse(self) -> None:
        topic, broker = self.query_topic.text().strip(), self.browse_broker.text().strip()
        if not topic or not broker:
            self.model.message.emit("give the topic (above) and a broker name to browse")
            return
        self.cancel_browse()
        self._browse_task = spawn(self._browse(topic, broker, self.browse_queue.value(),
                                               self.browse_offset.value(), self.browse_minutes.value()),
                                  on_done=self._show_results, on_error=self.model.message.emit)

    def cancel_browse(self) -> None:
        if self._browse_task is not None and not self._browse_task.done():
            self._browse_task.cancel()
            self.model.message.emit("scan cancelled")

    async def _browse(self, topic: str, broker: str, queue_id: int, offset: int, minutes: int,
                      limit: int = 64):
        """Pull from ``offset`` (or from the first message stored ``minutes`` ago, in every
        queue) as a tool does: the TOOLS_CONSUMER group, nothing committed."""
        from cluster.client.pull import TOOLS_GROUP, PullStatus, pull_message
        from cluster.client.route import MessageQueue

        admin = self.model.admin
        instance = admin.instance
        queues = await admin.readable_queues(topic, broker)  # (routes fresh for the pulls too)
        if minutes:
            import time as _time

            since = int((_time.time() - minutes * 60) * 1000)
            starts = {mq: await admin.offset_at_time(mq, since) for mq in queues}
        else:
            if MessageQueue(topic, broker, queue_id) not in queues:
                raise ConsoleError(f"{topic} has no queue {queue_id} on {broker}")
            starts = {MessageQueue(topic, broker, queue_id): offset}
        found, scanned = [], 0
        for mq, start in starts.items():
            position = start
            while len(found) < limit:
                result = await pull_message(instance, TOOLS_GROUP, mq, "*", position, 32)
                if result.status is not PullStatus.FOUND or not result.messages:
                    break
                scanned += len(result.messages)
                found.extend(m.record for m in result.messages)
                position = result.next_begin_offset
                self.model.message.emit(f"scanned {scanned:,}, found {len(found):,}")
        return found[:limit]

    def track(self) -> None:
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message first")
            return

        def show(track):
            lines = [f"  {t['group']}: {t['state']} (its offset in this queue: {t['consumerOffset']})"
                     for t in track] or ["  no consumer group reads this topic"]
            self.detail.appendPlainText("\nconsumer groups:\n" + "\n".join(lines))
            self.last_track = track

        spawn(self.model.admin.message_track(record), on_done=show, on_error=self.model.message.emit)

    def trace(self) -> None:
        """The message's trace as a timeline (producers and consumers that had tracing on)."""
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message first")
            return

        def show(events):
            lines = []
            for e in events:
                when = format_timestamp(e.timestamp) if e.timestamp else "(time not recorded)"
                outcome = "" if e.success is None else (" ok" if e.success else " FAILED")
                cost = "" if e.cost_ms is None else f" in {e.cost_ms} ms"
                lines.append(f"  {when}  {e.kind:<9} {e.group}{outcome}{cost} {e.detail}".rstrip())
            self.detail.appendPlainText("\ntrace:\n" + ("\n".join(lines) or
                                                         "  no trace (tracing was off for it)"))
            self.last_trace = events

        spawn(self.model.admin.message_trace(record.uniq_key or ""), on_done=show,
              on_error=self.model.message.emit)

    def resend(self) -> None:
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message to resend")
            return
        props = {k: v for k, v in record.properties.items()
                 if k not in ("UNIQ_KEY", "WAIT", "TAGS", "KEYS", "CLUSTER")}
        message = Message(record.topic, record.body, tags=record.tags, keys=record.keys, properties=props)
        spawn(self._send(message), on_done=lambda r: self.model.message.emit(
            f"resent to {record.topic}: {r.status.name}, new msgId {r.msg_id}"),
            on_error=self.model.message.emit)
