"""Topics and messages: list, create and delete topics; send a test message; find messages by
key; resend one to its topic."""

from __future__ import annotations

import json

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cluster.broker.topic_config import is_system_topic
from cluster.client.message import Message
from cluster.client.producer import Producer
from gui.tasks import spawn
from storage.inspector import format_timestamp

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
        self.topics = QListWidget()
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        create_box = QGroupBox("Create or update a topic")
        form = QFormLayout(create_box)
        self.new_topic = QLineEdit()
        self.queues = QSpinBox()
        self.queues.setRange(1, 1024)
        self.queues.setValue(8)
        create = QPushButton("Create")
        create.clicked.connect(self.create_topic)
        delete = QPushButton("Delete selected topic")
        delete.clicked.connect(self.delete_topic)
        form.addRow("name", self.new_topic)
        form.addRow("queues", self.queues)
        form.addRow(create)
        left.addWidget(self.show_system)
        left.addWidget(self.topics, 1)
        left.addWidget(refresh)
        left.addWidget(delete)
        left.addWidget(create_box)
        layout.addLayout(left, 1)

        right = QVBoxLayout()
        send_box = QGroupBox("Send a test message")
        send_form = QFormLayout(send_box)
        self.send_topic = QLineEdit()
        self.send_keys = QLineEdit()
        self.send_tags = QLineEdit()
        self.send_body = QLineEdit()
        send = QPushButton("Send")
        send.clicked.connect(self.send_message)
        for label, widget in (("topic", self.send_topic), ("keys", self.send_keys),
                              ("tags", self.send_tags), ("body", self.send_body)):
            send_form.addRow(label, widget)
        send_form.addRow(send)
        right.addWidget(send_box)

        query_box = QGroupBox("Find messages by key")
        query_layout = QHBoxLayout(query_box)
        self.query_topic = QLineEdit()
        self.query_topic.setPlaceholderText("topic")
        self.query_key = QLineEdit()
        self.query_key.setPlaceholderText("key or msgId")
        find = QPushButton("Find")
        find.clicked.connect(self.find)
        query_layout.addWidget(self.query_topic)
        query_layout.addWidget(self.query_key)
        query_layout.addWidget(find)
        right.addWidget(query_box)
        self.results = QTableWidget(0, len(RESULT_COLUMNS))
        self.results.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.results.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.itemSelectionChanged.connect(self.show_detail)
        right.addWidget(self.results, 1)
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        right.addWidget(self.detail, 1)
        resend = QPushButton("Resend the selected message to its topic")
        resend.clicked.connect(self.resend)
        right.addWidget(resend)
        layout.addLayout(right, 2)

    # -- topics ----------------------------------------------------------------------------------
    def refresh(self) -> None:
        if self.model.admin is None:
            return
        spawn(self.model.admin.topic_list(), on_done=self._show_topics, on_error=self.model.message.emit)

    def _show_topics(self, topics: list[str]) -> None:
        shown = sorted(t for t in topics if self.show_system.isChecked() or (not is_system_topic(t)
                       and t != self.model.supervisor.state.cluster))
        self.topics.clear()
        self.topics.addItems(shown)

    def create_topic(self) -> None:
        name = self.new_topic.text().strip()
        if not name:
            self.model.message.emit("give the topic a name")
            return
        queues = self.queues.value()
        spawn(self.model.admin.create_topic(name, queues, queues),
              on_done=lambda _: (self.model.message.emit(f"topic {name} created with {queues} queues"),
                                 self.refresh()),
              on_error=self.model.message.emit)

    def delete_topic(self) -> None:
        item = self.topics.currentItem()
        if item is None:
            self.model.message.emit("select a topic to delete")
            return
        name = item.text()
        spawn(self.model.admin.delete_topic(name),
              on_done=lambda _: (self.model.message.emit(f"topic {name} deleted"), self.refresh()),
              on_error=self.model.message.emit)

    # -- messages --------------------------------------------------------------------------------
    async def _send(self, message: Message):
        async with Producer("rocketdesk-console", self.model.namesrv_addr) as producer:
            return await producer.send(message)

    def send_message(self) -> None:
        topic = self.send_topic.text().strip()
        if not topic:
            self.model.message.emit("give the message a topic")
            return
        message = Message(topic, self.send_body.text().encode(), tags=self.send_tags.text() or None,
                          keys=self.send_keys.text() or None)
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

    def _show_results(self, records) -> None:
        self.records = list(records)
        self.results.setRowCount(len(self.records))
        for r, record in enumerate(self.records):
            body = record.body.decode("utf-8", "replace")[:80]
            values = [record.topic, str(record.queue_id), str(record.queue_offset),
                      record.keys or "", record.tags or "", record.uniq_key or "",
                      format_timestamp(record.store_timestamp), body]
            for c, value in enumerate(values):
                self.results.setItem(r, c, QTableWidgetItem(value))
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
        try:
            body = json.dumps(json.loads(record.body), indent=2)
        except ValueError:
            body = record.body.decode("utf-8", "replace")
        born_ip, born_port = record.born_host
        store_ip, store_port = record.store_host
        self.detail.setPlainText(
            f"topic {record.topic}  queue {record.queue_id}  offset {record.queue_offset}\n"
            f"msgId {record.uniq_key}\noffsetMsgId {record.msg_id}\n"
            f"born {format_timestamp(record.born_timestamp)} at {born_ip}:{born_port}\n"
            f"stored {format_timestamp(record.store_timestamp)} at {store_ip}:{store_port}\n"
            f"reconsumed {record.reconsume_times} times\nproperties {record.properties}\n\n{body}")

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
