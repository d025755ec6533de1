"""Topics and messages: list, create and delete topics, send a test message; the messages
themselves (find, browse, tail, filter, a message's detail) are gui/views/messages.py's."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from cluster.client.message import Message
from gui.models.display import broker_addrs_text
from gui.models.topics import COLUMN_TIPS as TOPIC_TIPS
from gui.models.topics import COLUMNS as TOPIC_COLUMNS
from gui.models.topics import matches, topic_row
from gui.tasks import spawn, user_action
from gui.views.messages import MessageFinder, send_traced
from gui.views.table_items import SortableItem, row_table, selected_name


class TopicsView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QHBoxLayout(self)

        left = QVBoxLayout()
        self.show_system = QCheckBox("show system topics")
        self.show_system.toggled.connect(lambda _: self.refresh())
        self.topic_filter = QLineEdit()
        self.topic_filter.setPlaceholderText("filter topics by name or group")
        self.topic_filter.textChanged.connect(lambda _: self._fill_topics())
        self.topics = row_table(TOPIC_COLUMNS, sorted_by_name=True, tips=TOPIC_TIPS)
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
        pending = QPushButton("Pending transactions")
        pending.clicked.connect(self.show_pending_transactions)
        left.addWidget(pending)
        left.addWidget(create_box)
        # A splitter: the user decides how much room the topic table's columns get.
        split = QSplitter(Qt.Orientation.Horizontal)
        left_pane = QWidget()
        left_pane.setLayout(left)
        left.setContentsMargins(0, 0, 0, 0)
        split.addWidget(left_pane)
        layout.addWidget(split)

        right = QVBoxLayout()
        # Folded away until wanted: the messages below get the room.
        self.send_toggle = QPushButton("▸ Send a test message")
        self.send_toggle.setCheckable(True)
        self.send_toggle.setFlat(True)
        self.send_toggle.setStyleSheet("text-align: left")
        send_box = QGroupBox()
        send_box.setVisible(False)
        self.send_toggle.toggled.connect(lambda shown: (
            send_box.setVisible(shown),
            self.send_toggle.setText(("▾" if shown else "▸") + " Send a test message")))
        right.addWidget(self.send_toggle)
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

        self.finder = MessageFinder(self.model)
        self.finder.export_requested.connect(self.export_requested)
        right.addWidget(self.finder, 1)
        right_pane = QWidget()
        right_pane.setLayout(right)
        right.setContentsMargins(0, 0, 0, 0)
        split.addWidget(right_pane)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 2)
        # Room for the topic table's figures (name to last stored) from the start: the panes'
        # size hints alone left it a third of that, the rest behind a scroll bar.
        split.setSizes([600, 800])

    # -- topics ----------------------------------------------------------------------------------
    def showEvent(self, event) -> None:
        # Current figures the moment the tab is shown, not up to 5 s later.
        self.refresh()
        super().showEvent(event)

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
        # The selected topic's queues and offsets refresh with the table (its forms do not:
        # what the user typed there stays).
        topic = self.selected_topic()
        if topic is None:
            self.topic_detail.clear()  # deleted or filtered out: no stale offsets
        elif self.model.admin is not None:
            self._show_topic_detail(topic)

    def _fill_topics(self) -> None:
        selected = self.selected_topic()
        rows = [r for r in self.topic_rows if matches(r, self.topic_filter.text())]
        # A refill is not the user picking a topic: the forms keep what they hold.
        self.topics.blockSignals(True)
        self.topics.selectionModel().blockSignals(True)
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
        self.topics.selectionModel().blockSignals(False)
        self.topics.blockSignals(False)

    def selected_topic(self) -> str | None:
        return selected_name(self.topics)

    def select_topic(self, topic: str) -> None:
        for row in range(self.topics.rowCount()):
            item = self.topics.item(row, 0)
            if item is not None and item.text() == topic:
                self.topics.selectRow(row)
                return

    @user_action
    def create_topic(self) -> None:
        name = self.new_topic.text().strip()
        if not name:
            self.model.message.emit("give the topic a name")
            return
        queues = self.queues.value()
        perm = int(self.perm.currentText().split("(")[1].rstrip(")"))
        spawn(self.model.require_admin().create_topic(name, queues, queues, perm),
              on_done=lambda _: (self.model.message.emit(f"topic {name} created with {queues} queues"),
                                 self.refresh()),
              on_error=self.model.message.emit)

    def show_topic(self, topic: str | None) -> None:
        if topic:
            # The selected topic is the one the forms work on: find, browse, live tail and send
            # all read the topic field, so it says which one that is.
            self.finder.query_topic.setText(topic)
            self.send_topic.setText(topic)
        if topic and self.model.admin is not None:
            self._show_topic_detail(topic)

    def _show_topic_detail(self, topic: str) -> None:
        def show(text: str) -> None:
            if self.selected_topic() == topic:  # not an answer about a topic left meanwhile
                self.topic_detail.setPlainText(text)

        spawn(self._topic_detail(topic), on_done=show, on_error=self.model.message.emit)

    async def _topic_detail(self, topic: str) -> str:
        route = await self.model.require_admin().topic_route(topic)
        stats = await self.model.require_admin().topic_stats(topic)
        groups = await self.model.require_admin().groups_of_topic(topic)
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
        topic = self.selected_topic() or self.finder.query_topic.text().strip()
        if not topic:
            self.model.message.emit("select a topic to export")
            return
        self.export_requested.emit(topic, "")

    @user_action
    def show_pending_transactions(self) -> None:
        """Half messages waiting for END_TRANSACTION or a check-back, in the results table."""
        spawn(self.model.require_admin().pending_half_messages(), on_done=self.finder.show_pending,
              on_error=self.model.message.emit)

    @user_action
    def delete_topic(self) -> None:
        name = self.selected_topic()
        if name is None:
            self.model.message.emit("select a topic to delete")
            return
        spawn(self.model.require_admin().delete_topic(name),
              on_done=lambda _: (self.model.message.emit(f"topic {name} deleted"), self.refresh()),
              on_error=self.model.message.emit)

    # -- messages --------------------------------------------------------------------------------
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
        spawn(send_traced(self.model, message), on_done=lambda r: self.model.message.emit(
            f"{r.status.name}: msgId {r.msg_id} on {r.message_queue} at offset {r.queue_offset}"),
            on_error=self.model.message.emit)

