"""Consumer groups: lag per queue, online clients, offset reset by time with a preview, delete."""

from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import QDateTime, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDateTimeEdit,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cluster.topic_validator import validate_group_name
from gui.models.groups import COLUMN_TIPS as GROUP_TIPS
from gui.models.groups import COLUMNS as GROUP_COLUMNS
from gui.models.groups import group_row
from gui.tasks import spawn, user_action
from gui.views.table_items import SortableItem, row_table, selected_name

DLQ_COLUMNS = ["original topic", "keys", "tags", "reconsumed", "msgId", "body", "receipt"]
PROGRESS_COLUMNS = ["topic", "broker", "queue", "broker offset", "consumer offset", "lag",
                    "in flight (5.x)", "last consumed"]


def _client_text(connection: dict) -> str:
    """A client as people tell them apart: its id, language and protocol (a 5.x client through
    the proxy consumes by POP)."""
    kind = "5.x, POP" if connection.get("consumeType") == "CONSUME_POP" else "4.x"
    language = connection.get("language") or "?"
    return f"{connection.get('clientId', '?')} ({language}, {kind})"


class GroupsView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QHBoxLayout(self)
        left = QVBoxLayout()
        self.group_filter = QLineEdit()
        self.group_filter.setPlaceholderText("filter groups")
        self.group_filter.textChanged.connect(lambda _: self._fill_groups())
        self.groups = row_table(GROUP_COLUMNS, sorted_by_name=True, tips=GROUP_TIPS)
        self.groups.itemSelectionChanged.connect(self.show_group)
        self.group_rows: list = []
        self.empty = QLabel("")
        self.empty.setWordWrap(True)
        self.group_timer = QTimer(self)
        self.group_timer.setInterval(5000)  # live figures while the tab is shown
        self.group_timer.timeout.connect(lambda: self.refresh() if self.isVisible() else None)
        self.group_timer.start()
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        delete = QPushButton("Delete selected group")
        delete.clicked.connect(self.delete_group)
        create_row = QHBoxLayout()
        self.new_group = QLineEdit()
        self.new_group.setPlaceholderText("new group name")
        self.new_group.returnPressed.connect(self.create_group)
        create = QPushButton("Create group")
        create.setToolTip("create the subscription group on every master (Enter in the name)")
        create.clicked.connect(self.create_group)
        create_row.addWidget(self.new_group, 1)
        create_row.addWidget(create)
        left.addWidget(QLabel("Consumer groups"))
        left.addWidget(self.group_filter)
        left.addWidget(self.groups, 1)
        left.addWidget(self.empty)
        left.addLayout(create_row)
        left.addWidget(refresh)
        left.addWidget(delete)
        right = QVBoxLayout()
        self.summary = QLabel("")
        right.addWidget(self.summary)
        self.progress = QTableWidget(0, len(PROGRESS_COLUMNS))
        self.progress.setHorizontalHeaderLabels(PROGRESS_COLUMNS)
        self.progress.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.progress.setSortingEnabled(True)
        self.progress.verticalHeader().setVisible(False)
        # Whole values (a last-consumed time, a %RETRY% topic), the last column taking the rest.
        self.progress.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.progress.horizontalHeader().setStretchLastSection(True)
        right.addWidget(self.progress, 2)
        self.clients = QLabel("")
        self.clients.setWordWrap(True)
        right.addWidget(self.clients)
        reset_row = QHBoxLayout()
        self.reset_topic = QLineEdit()
        self.reset_topic.setPlaceholderText("topic")
        self.reset_time = QDateTimeEdit(QDateTime.currentDateTime())
        # The zone is on screen: a reset an hour off moves a group past an hour of messages.
        self.reset_time.setDisplayFormat("yyyy-MM-dd HH:mm:ss t")
        self.reset_time.setToolTip("local time of this computer "
                                   f"({QDateTime.currentDateTime().timeZoneAbbreviation()}); "
                                   "the broker compares it with each message's store time")
        preview = QPushButton("Preview reset")
        preview.clicked.connect(self.preview_reset)
        apply = QPushButton("Reset offsets")
        apply.clicked.connect(self.apply_reset)
        for widget in (QLabel("Reset to the time"), self.reset_topic, self.reset_time, preview, apply):
            reset_row.addWidget(widget)
        right.addLayout(reset_row)
        self.preview = QLabel("")
        self.preview.setWordWrap(True)
        right.addWidget(self.preview)
        dlq_row = QHBoxLayout()
        show_dlq = QPushButton("Dead letters of this group")
        show_dlq.clicked.connect(self.show_dead_letters)
        redrive = QPushButton("Redrive selected")
        redrive.clicked.connect(lambda: self.redrive(selected_only=True))
        redrive_all = QPushButton("Redrive all")
        redrive_all.clicked.connect(lambda: self.redrive(selected_only=False))
        for widget in (show_dlq, redrive, redrive_all):
            dlq_row.addWidget(widget)
        right.addLayout(dlq_row)
        self.dead = QTableWidget(0, len(DLQ_COLUMNS))
        self.dead.setHorizontalHeaderLabels(DLQ_COLUMNS)
        self.dead.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.dead.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.dead.verticalHeader().setVisible(False)
        self.dead.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.dead.horizontalHeader().setStretchLastSection(True)
        right.addWidget(self.dead, 1)
        self.dead_records = []
        # A splitter, as on the Topics tab: the groups' figures get room from the start.
        split = QSplitter(Qt.Orientation.Horizontal)
        for pane_layout in (left, right):
            pane = QWidget()
            pane.setLayout(pane_layout)
            pane_layout.setContentsMargins(0, 0, 0, 0)
            split.addWidget(pane)
        split.setSizes([600, 800])
        layout.addWidget(split)

    def showEvent(self, event) -> None:
        # Current figures the moment the tab is shown, not up to 5 s later.
        self.refresh()
        super().showEvent(event)

    def refresh(self) -> None:
        if self.model.admin is None:
            return
        spawn(self._load_groups(), on_done=self._show_groups, on_error=self.model.message.emit)

    async def _load_groups(self) -> list:
        admin = self.model.admin
        configs = await admin.group_list()
        rows = []
        for group in sorted(g for g in configs if g not in self.model.SYSTEM_GROUPS):
            try:
                stats = self.model.group_stats.get(group) or await admin.consume_stats(group)
            except Exception:  # its broker is down: the name and config alone
                stats = {}
            try:
                connections = await admin.consumer_connections(group)
            except Exception:  # nobody online (CONSUMER_NOT_ONLINE)
                connections = {}
            rows.append(group_row(group, configs[group], stats, connections,
                                  self.model.consumed.get(group)))
        return rows

    def _show_groups(self, rows: list) -> None:
        self.group_rows = rows
        self._fill_groups()
        # The selected group's lag per queue refreshes with the table, not only on a click.
        group = self.selected_group()
        if group and self.model.admin is not None:
            spawn(self._load(group), on_error=self.model.message.emit)

    def _fill_groups(self) -> None:
        current = self.selected_group()
        needle = self.group_filter.text().lower()
        rows = [r for r in self.group_rows if needle in r.name.lower()]
        self.groups.blockSignals(True)
        self.groups.setSortingEnabled(False)
        self.groups.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, (text, key) in enumerate(zip(row.cells(), row.sort_keys(), strict=True)):
                item = SortableItem(text, key)
                item.setToolTip(text)
                self.groups.setItem(r, c, item)
        self.groups.setSortingEnabled(True)
        self.groups.blockSignals(False)
        self.empty.setText("" if self.group_rows else
                           "No consumer group yet: a group appears when a consumer of it starts, "
                           "or create one below.")
        if current:
            self.select_group(current, load=False)

    def select_group(self, group: str, load: bool = True) -> None:
        """Select ``group`` in the table (loading the table first when it is not there yet)."""
        for row in range(self.groups.rowCount()):
            item = self.groups.item(row, 0)
            if item is not None and item.text() == group:
                self.groups.selectRow(row)
                return
        if load:
            self.refresh()

    def selected_group(self) -> str | None:
        return selected_name(self.groups)

    def show_group(self) -> None:
        group = self.selected_group()
        if group and self.model.admin is not None:
            spawn(self._load(group), on_error=self.model.message.emit)

    async def _load(self, group: str) -> None:
        stats = await self.model.require_admin().consume_stats(group)
        try:
            connections = await self.model.require_admin().consumer_connections(group)
        except Exception:
            connections = {}
        if self.selected_group() != group:
            return  # the user picked another group meanwhile: not its pane
        self.progress.setSortingEnabled(False)
        rows = sorted(stats.items(), key=lambda i: (i[0].topic, i[0].broker_name, i[0].queue_id))
        self.progress.setRowCount(len(rows))
        total = invisible = 0
        for r, (mq, v) in enumerate(rows):
            lag = v["brokerOffset"] - max(v["consumerOffset"], 0)
            total += lag
            invisible += v.get("inFlight", 0)
            last = v.get("lastTimestamp", 0)
            values = [mq.topic, mq.broker_name, str(mq.queue_id), str(v["brokerOffset"]),
                      str(v["consumerOffset"]), str(lag), str(v.get("inFlight", 0)),
                      datetime.fromtimestamp(last / 1000).astimezone().isoformat(timespec="seconds")
                      if last > 0 else "-"]
            for c, value in enumerate(values):
                self.progress.setItem(r, c, QTableWidgetItem(value))
        self.progress.setSortingEnabled(True)
        self.progress.verticalHeader().setVisible(False)
        # Whole values (a last-consumed time, a %RETRY% topic), the last column taking the rest.
        self.progress.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.progress.horizontalHeader().setStretchLastSection(True)
        self.summary.setText(
            f"group {group}: total lag {total:,} messages over {len(rows)} queues"
            + (f"; {invisible:,} handed to 5.x consumers and not acked yet (invisible)"
               if invisible else ""))
        clients = connections.get("connectionSet", [])
        subscriptions = connections.get("subscriptionTable", {})
        self.clients.setText(
            f"{len(clients)} client(s) online: " + ", ".join(_client_text(c) for c in clients)
            + ("\nsubscriptions: " + ", ".join(f"{t} ({s.get('subString', '*')})"
                                               for t, s in subscriptions.items()) if subscriptions else ""))
        topics = [mq.topic for mq, _ in rows if not mq.topic.startswith(("%RETRY%", "%DLQ%"))]
        if topics and not self.reset_topic.text():  # the group's own topic, not its retry one
            self.reset_topic.setText(topics[0])

    def _reset_ms(self) -> int:
        return int(self.reset_time.dateTime().toMSecsSinceEpoch())

    def preview_reset(self) -> None:
        group, topic = self.selected_group(), self.reset_topic.text().strip()
        if not group or not topic:
            self.model.message.emit("select a group and give the topic to reset")
            return
        spawn(self._preview(group, topic, self._reset_ms()), on_error=self.model.message.emit)

    async def _preview(self, group: str, topic: str, ms: int) -> None:
        """Where each queue would move, without moving it."""
        moves = await self.model.require_admin().preview_reset_by_time(group, topic, ms)
        lines = [f"{mq.broker_name} queue {mq.queue_id}: {now} -> {target}"
                 for mq, now, target in moves]
        self.preview.setText("preview (nothing changed yet):\n" + "\n".join(lines))

    @user_action
    def apply_reset(self) -> None:
        group, topic = self.selected_group(), self.reset_topic.text().strip()
        if not group or not topic:
            self.model.message.emit("select a group and give the topic to reset")
            return
        spawn(self.model.require_admin().reset_offset_by_time(group, topic, self._reset_ms()),
              on_done=lambda offsets: (self.model.message.emit(
                  f"offsets of {group} on {topic} reset ({len(offsets)} queues)"), self.show_group()),
              on_error=self.model.message.emit)

    # -- dead letters ----------------------------------------------------------------------------
    def show_dead_letters(self) -> None:
        group = self.selected_group()
        if not group or self.model.admin is None:
            self.model.message.emit("select a group first")
            return
        spawn(self._dead_letters(group), on_done=self._show_dead, on_error=self.model.message.emit)

    async def _dead_letters(self, group: str, limit: int = 1000):
        from cluster.client.pull import read_queue
        from cluster.client.route import MessageQueue

        instance = self.model.require_admin().instance
        topic = f"%DLQ%{group}"
        route = await instance.fetch_route(topic)
        found = []
        for data in (route.queue_datas if route else []):
            for queue_id in range(data["readQueueNums"]):
                found += await read_queue(instance, MessageQueue(topic, data["brokerName"], queue_id),
                                          limit=limit - len(found))
        return found

    def _show_dead(self, records) -> None:
        self.dead_records = list(records)
        self.dead.setRowCount(len(self.dead_records))
        for r, record in enumerate(self.dead_records):
            props = record.properties
            values = [props.get("RETRY_TOPIC", "?"), record.keys or "", record.tags or "",
                      str(record.reconsume_times), props.get("ORIGIN_MESSAGE_ID", record.uniq_key or ""),
                      record.body[:60].decode("utf-8", "replace"), ""]
            for c, value in enumerate(values):
                self.dead.setItem(r, c, QTableWidgetItem(value))
        self.model.message.emit(f"{len(self.dead_records)} dead letter(s)")

    def redrive(self, selected_only: bool) -> None:
        rows = ([i.row() for i in self.dead.selectionModel().selectedRows()] if selected_only
                else list(range(len(self.dead_records))))
        if not rows:
            self.model.message.emit("select dead letters to redrive, or redrive all")
            return
        spawn(self._redrive(rows), on_error=self.model.message.emit)

    async def _redrive(self, rows: list[int]) -> None:
        """Each message back to its original topic, as a new message; a receipt per row."""
        from cluster.client.message import Message
        from cluster.client.producer import Producer

        internal = {"UNIQ_KEY", "WAIT", "TAGS", "KEYS", "CLUSTER", "DELAY", "REAL_TOPIC", "REAL_QID",
                    "RETRY_TOPIC", "MAX_OFFSET", "MIN_OFFSET"}
        async with Producer("rocketdesk-redrive", self.model.namesrv_addr) as producer:
            for row in rows:
                record = self.dead_records[row]
                topic = record.properties.get("RETRY_TOPIC")
                if not topic:
                    self.dead.setItem(row, 6, QTableWidgetItem("no original topic"))
                    continue
                props = {k: v for k, v in record.properties.items() if k not in internal}
                try:
                    result = await producer.send(Message(topic, record.body, tags=record.tags,
                                                         keys=record.keys, properties=props))
                    receipt = f"{result.status.name} as {result.msg_id}"
                except Exception as exc:  # a receipt says what happened to each message
                    receipt = f"failed: {exc}"
                self.dead.setItem(row, 6, QTableWidgetItem(receipt))
        self.model.message.emit(f"redrove {len(rows)} message(s)")

    @user_action
    def create_group(self) -> None:
        group = self.new_group.text().strip()
        if self.model.admin is None:
            self.model.message.emit("open a cluster first: a group is created on its masters")
            return
        problem = validate_group_name(group)
        if problem:
            self.model.message.emit(problem)
            return

        def listed(rows) -> None:
            self._show_groups(rows)
            self.select_group(group, load=False)

        def created(_) -> None:
            self.model.message.emit(f"group {group} created on every master")
            self.new_group.clear()
            spawn(self._load_groups(), on_done=listed, on_error=self.model.message.emit)

        spawn(self.model.require_admin().create_group(group), on_done=created,
              on_error=self.model.message.emit)

    @user_action
    def delete_group(self) -> None:
        group = self.selected_group()
        if not group:
            self.model.message.emit("select a group to delete")
            return
        spawn(self.model.require_admin().delete_group(group),
              on_done=lambda _: (self.model.message.emit(f"group {group} deleted"), self.refresh()),
              on_error=self.model.message.emit)

