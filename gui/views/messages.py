"""The message finder of the Topics tab: find by key, browse a queue or the last minutes of a
topic (a page at a time), tail a topic live (with a pause), narrow any of these results with a
filter (SQL92 over properties, body text, a JSON path, a store-time range; gui/models/
message_filter.py), and a message's detail, trace and the actions on it."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cluster.client.message import Message
from cluster.client.producer import Producer
from gui.models.display import (
    body_preview,
    is_text,
    local_zone,
    properties_text,
    table_time,
    trace_timeline,
)
from gui.models.message_filter import ResultFilter
from gui.tasks import ConsoleError, spawn, user_action
from gui.views.filter_bar import FilterBar
from gui.views.table_items import row_table
from storage.inspector import format_timestamp, record_to_json
from storage.message import COMPRESSED_FLAG, inflated

RESULT_COLUMNS = ["topic", "queue", "offset", "keys", "tags", "msgId", "stored", "body"]
STORED = RESULT_COLUMNS.index("stored")
PAGE = 64  # messages a find or a browse shows at a time ("More" goes on from there)
TAIL_KEEP = 500  # the newest messages a live tail lists


async def send_traced(model, message: Message):
    """Send from the console, traced: the message's detail then shows where it went."""
    async with Producer("rocketdesk-console", model.namesrv_addr, trace=True) as producer:
        return await producer.send(message)


# The most a compressed body may expand to in the console: a few bytes of zlib can claim
# gigabytes, and a message is anyone's to send.
MAX_EXPANDED_BODY = 64 * 1024 * 1024


def readable(record):
    """The record with its body as the producer sent it (bodies over 4 KiB are stored zlib-
    compressed): what the filter searches, the detail shows and a resend sends. A body that
    is not zlib, or would expand past MAX_EXPANDED_BODY, stays as stored."""
    if not record.sys_flag & COMPRESSED_FLAG:
        return record
    body = inflated(record.body, MAX_EXPANDED_BODY)
    if body is None:
        return record  # said compressed, is not, or larger than the console will hold: as stored
    return dataclasses.replace(record, body=body, sys_flag=record.sys_flag & ~COMPRESSED_FLAG)


class MessageFinder(QWidget):
    export_requested = Signal(str, str)  # topic, keys

    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.records: list = []  # what the last find, browse or tail returned
        self.shown: list = []  # those of them the filter lets through, as the table lists them
        self._filter = ResultFilter()
        self._browse_task = None
        self._tail_task = None
        self._next_page = None  # where "More" goes on: {queue: next offset}, or None
        self._tail_paused = False
        self._held = 0  # messages the paused tail has taken and not shown yet
        self._frozen: list | None = None  # what a paused tail's table shows
        self._keep = TAIL_KEEP  # how many messages a running tail keeps listed
        self._find_task = None
        self._detail_of = None  # the record the detail pane is about
        right = QVBoxLayout(self)
        right.setContentsMargins(0, 0, 0, 0)

        query_box = QGroupBox("Find messages by key (the topic here is also the one Browse and "
                              "Live tail read)")
        query_layout = QHBoxLayout(query_box)
        self.query_topic = QLineEdit()
        self.query_topic.setPlaceholderText("topic (select one on the left)")
        self.query_key = QLineEdit()
        self.query_key.setPlaceholderText("key or msgId")
        self.query_key.returnPressed.connect(self.find)
        find = QPushButton("&Find")
        find.setToolTip("messages of the topic with this key or msgId (Alt+F, or Enter in the key)")
        find.clicked.connect(self.find)
        query_layout.addWidget(self.query_topic)
        query_layout.addWidget(self.query_key)
        query_layout.addWidget(find)
        export_query = QPushButton("Export…")
        export_query.clicked.connect(self.export_query)
        query_layout.addWidget(export_query)
        right.addWidget(query_box)
        browse_box = QGroupBox("Browse a queue, or a time range of the topic; or tail it live")
        browse_layout = QVBoxLayout(browse_box)
        self.browse_broker = QLineEdit()
        self.browse_broker.setPlaceholderText("broker (e.g. broker-a)")
        self.browse_broker.setMinimumWidth(140)  # a broker's whole name
        self.browse_queue = QSpinBox()
        self.browse_queue.setRange(0, 1023)
        self.browse_offset = QSpinBox()
        self.browse_offset.setRange(0, 2**31 - 1)
        self.browse_minutes = QSpinBox()
        self.browse_minutes.setRange(0, 7 * 24 * 60)
        self.browse_minutes.setSpecialValueText("from the offset")
        self.browse_minutes.setSuffix(" min ago")
        browse = QPushButton("&Browse")
        browse.setToolTip(f"the first {PAGE} messages from there (Alt+B)")
        browse.clicked.connect(self.browse)
        self.more_button = QPushButton("&More")
        self.more_button.setToolTip(f"the next {PAGE} messages of the same browse (Alt+M)")
        self.more_button.setEnabled(False)
        self.more_button.clicked.connect(self.browse_more)
        self.cancel_scan = QPushButton("Cancel")
        self.cancel_scan.clicked.connect(self.cancel_browse)
        self.tail_button = QPushButton("Live &tail")
        self.tail_button.setToolTip("new messages of the topic above as they arrive (Alt+T)")
        self.tail_button.setCheckable(True)
        self.tail_button.toggled.connect(self.toggle_tail)
        self.pause_button = QPushButton("&Pause")
        self.pause_button.setToolTip("hold the table still; the tail keeps reading (Alt+P)")
        self.pause_button.setCheckable(True)
        self.pause_button.setEnabled(False)
        self.pause_button.toggled.connect(self.pause_tail)
        # Two rows, where from and what to do: one row's width squeezed the topic table.
        where, scan = QHBoxLayout(), QHBoxLayout()
        for widget in (self.browse_broker, QLabel("queue"), self.browse_queue, QLabel("offset"),
                       self.browse_offset, QLabel("or since"), self.browse_minutes):
            where.addWidget(widget)
        for widget in (browse, self.more_button, self.cancel_scan, self.tail_button, self.pause_button):
            scan.addWidget(widget)
        scan.addStretch(1)
        browse_layout.addLayout(where)
        browse_layout.addLayout(scan)
        right.addWidget(browse_box)

        self.filter_bar = FilterBar()
        self.filter_bar.changed.connect(self._filter_changed)
        self.filter_bar.problem.connect(self.model.message.emit)
        right.addWidget(self.filter_bar)
        self.result_count = QLabel("")
        right.addWidget(self.result_count)

        self.results = row_table(RESULT_COLUMNS)
        self.results.horizontalHeaderItem(STORED).setToolTip(f"store time, {local_zone()}")
        # One line a message; the body takes what the other columns leave (whole in its tooltip
        # and the detail below), so that no column goes behind a scroll bar.
        self.results.setWordWrap(False)
        self.results.horizontalHeader().setSectionResizeMode(
            len(RESULT_COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
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
        save_body.clicked.connect(lambda: self.save_body(None))  # (not clicked's checked)
        export = QPushButton("Export results…")
        export.clicked.connect(lambda: self.export_results(None))
        track = QPushButton("Which groups consumed it?")
        track.clicked.connect(self.track)
        trace = QPushButton("T&race")
        trace.setToolTip("the message's trace as a timeline (Alt+R)")
        trace.clicked.connect(self.trace)
        for widget in (resend, self.resend_group, resend_group):
            actions.addWidget(widget)
        more_actions = QHBoxLayout()
        for widget in (save_body, export, track, trace):
            more_actions.addWidget(widget)
        right.addLayout(actions)
        right.addLayout(more_actions)

    # -- the filter --------------------------------------------------------------------------------
    def _filter_changed(self, result_filter: ResultFilter) -> None:
        self._filter = result_filter
        self._render()

    # -- results ---------------------------------------------------------------------------------
    def _show_results(self, records, announce: bool = True) -> None:
        """New results (a find, a browse, a tail's window): shown through the filter."""
        self.records = [readable(r) for r in records]
        self._render(announce)

    def _render(self, announce: bool = False) -> None:
        """The table from the records through the filter; the selected message stays selected
        (and its detail with it) when it is still listed."""
        selected = self.selected_record()
        source = self._frozen if self._frozen is not None else self.records
        self.shown = self._filter.apply(source)
        self.results.blockSignals(True)
        self.results.setRowCount(len(self.shown))
        for r, record in enumerate(self.shown):
            values = [record.topic, str(record.queue_id), str(record.queue_offset),
                      record.keys or "", record.tags or "", record.uniq_key or "",
                      table_time(record.store_timestamp), body_preview(record.body)]
            for c, value in enumerate(values):
                item = QTableWidgetItem(value)
                item.setToolTip(format_timestamp(record.store_timestamp) if c == STORED else value)
                self.results.setItem(r, c, item)
        self.results.clearSelection()
        row = next((i for i, r in enumerate(self.shown) if r is selected), None)
        if row is None and announce and self.shown:
            row = 0
        if row is not None:
            self.results.selectRow(row)
        self.results.blockSignals(False)
        if row is None:
            self._detail_of = None
            self.detail.clear()  # never the detail of a message the table no longer lists
        elif self.shown[row] is not self._detail_of:
            self.show_detail()  # (the same message's detail stays, with its trace or track)
        filtered = (f", {len(self.shown):,} of them through the filter"
                    if self._filter.active else "")
        more = " · More shows the next page" if self._next_page else ""
        held = f" · paused: {self._held:,} new held back" if self._tail_paused else ""
        self.result_count.setText(f"{len(self.records):,} message(s){filtered}{more}{held}")
        if announce:
            self.model.message.emit(f"found {len(self.records):,} message(s)"
                                    + (" (a page: More for the next)" if self._next_page else ""))

    def selected_record(self):
        rows = self.results.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.shown):
            return None
        return self.shown[rows[0].row()]

    def show_pending(self, records) -> None:
        """Half messages waiting for END_TRANSACTION or a check-back."""
        self._next_page = None
        self._show_results(records, announce=False)
        for row, record in enumerate(self.shown):
            # Where it goes when committed, and how often the broker has asked its producer.
            props = record.properties
            # (a producer may have set anything there: "²" is a digit to isdigit, not to int)
            text = props.get("TRANSACTION_CHECK_TIMES", "").strip()
            checks = int(text) if text.isascii() and text.isdigit() else 0
            self.results.setItem(row, 0, QTableWidgetItem(
                f"{props.get('REAL_TOPIC', record.topic)} (half, checks: {checks})"))
        self.model.message.emit(f"{len(records)} transaction(s) pending: half messages waiting for "
                                "their producer's commit or rollback, or for the broker's check-back")

    # -- find, browse, tail ------------------------------------------------------------------------
    @user_action
    def find(self) -> None:
        topic, key = self.query_topic.text().strip(), self.query_key.text().strip()
        if not topic or not key:
            self.model.message.emit("give a topic and a key to search for")
            return
        self._stop_scans()
        self._find_task = spawn(self.model.require_admin().query_by_key(topic, key, PAGE),
                                on_done=self._show_results, on_error=self.model.message.emit)

    def browse(self) -> None:
        topic, broker = self.query_topic.text().strip(), self.browse_broker.text().strip()
        if not topic or not broker:
            self.model.message.emit("give the topic (above) and a broker name to browse")
            return
        self._stop_scans()
        self._browse_task = spawn(
            self._browse(topic, broker, self.browse_queue.value(), self.browse_offset.value(),
                         self.browse_minutes.value()),
            on_done=self._show_page, on_error=self.model.message.emit)

    def browse_more(self) -> None:
        """The next page of the same browse, after the messages already listed."""
        if not self._next_page:
            self.model.message.emit("nothing more: browse first")
            return
        self.cancel_browse(quiet=True)
        self._browse_task = spawn(self._pull_page(dict(self._next_page)),
                                  on_done=lambda page: self._show_page(page, append=True),
                                  on_error=self.model.message.emit)

    def _show_page(self, page, append: bool = False) -> None:
        found, self._next_page = page
        self.more_button.setEnabled(bool(self._next_page))
        self._show_results((self.records if append else []) + found, announce=True)

    def _stop_scans(self) -> None:
        """A new find, browse or tail replaces whatever filled the table before."""
        for task in (self._find_task, self._browse_task):
            if task is not None and not task.done():
                task.cancel()
        if self.tail_button.isChecked():
            self.tail_button.setChecked(False)  # stops the tail
        self._next_page = None
        self.more_button.setEnabled(False)

    async def _browse(self, topic: str, broker: str, queue_id: int, offset: int, minutes: int):
        """Pull from ``offset`` (or from the first message stored ``minutes`` ago, in every
        queue of the broker) as a tool does: the TOOLS_CONSUMER group, nothing committed.
        Returns a page and where the next one starts."""
        from cluster.client.route import MessageQueue

        admin = self.model.require_admin()
        queues = await admin.readable_queues(topic, broker)  # (routes fresh for the pulls too)
        if minutes:
            import time as _time

            since = int((_time.time() - minutes * 60) * 1000)
            starts = {mq: await admin.offset_at_time(mq, since) for mq in queues}
        else:
            if MessageQueue(topic, broker, queue_id) not in queues:
                raise ConsoleError(f"{topic} has no queue {queue_id} on {broker}")
            starts = {MessageQueue(topic, broker, queue_id): offset}
        return await self._pull_page(starts)

    async def _pull_page(self, starts: dict):
        """Up to PAGE messages from ``starts`` (queue -> offset), queue by queue; returns them
        and the positions after them (queues not yet read to their end), or None when all
        were."""
        from cluster.client.pull import TOOLS_GROUP, PullStatus, pull_message

        instance = self.model.require_admin().instance
        found = []
        positions = dict(starts)
        for mq in list(positions):
            while len(found) < PAGE:
                result = await pull_message(instance, TOOLS_GROUP, mq, "*", positions[mq],
                                            min(32, PAGE - len(found)))
                if result.status is not PullStatus.FOUND or not result.messages:
                    del positions[mq]  # read to its end
                    break
                found.extend(m.record for m in result.messages)
                positions[mq] = result.next_begin_offset
                self.model.message.emit(f"read {len(found):,} message(s)")
            if len(found) >= PAGE:
                break
        return found, (positions or None)

    def toggle_tail(self, on: bool) -> None:
        self.pause_button.setEnabled(on)
        if not on:
            self.pause_button.setChecked(False)
            if self._tail_task is not None:
                self._tail_task.cancel()
            return
        topic = self.query_topic.text().strip()
        if not topic:
            self.model.message.emit("give a topic (in the query row) to tail")
            self.tail_button.setChecked(False)
            return
        for task in (self._find_task, self._browse_task):
            if task is not None and not task.done():
                task.cancel()
        self._next_page = None
        self.more_button.setEnabled(False)
        self._keep = TAIL_KEEP
        self._show_results([])
        self._tail_task = spawn(self._tail(topic), on_error=self._tail_failed)

    def _tail_failed(self, text: str) -> None:
        self.model.message.emit(f"the live tail stopped: {text}")
        self.tail_button.setChecked(False)

    def pause_tail(self, paused: bool) -> None:
        """Hold the table still to read it (filters apply to what it holds); the tail keeps
        reading and shows all on resume."""
        self._tail_paused = paused
        self._frozen = list(self.records) if paused else None
        if not paused:  # what was held stays listed; newer messages push the oldest out
            self._keep = max(TAIL_KEEP, len(self.records))
        self._held = 0
        self.pause_button.setText("Resume" if paused else "&Pause")
        self._render()

    def take_tailed(self, fresh: list, paused_limit: int = 20000) -> None:
        """Messages the tail read: kept (the newest 500, or as many as a pause held; up to
        ``paused_limit`` while paused, so that a pause loses nothing short of that), shown
        unless paused."""
        fresh = sorted((readable(r) for r in fresh), key=lambda r: r.store_timestamp)
        keep = paused_limit if self._tail_paused else self._keep
        self.records = (self.records + fresh)[-keep:]
        if self._tail_paused:
            self._held += len(fresh)
            self.result_count.setText(f"{len(self.shown):,} message(s) shown · paused: "
                                      f"{self._held:,} new held back")
            return
        self._render()

    async def _tail(self, topic: str) -> None:
        """New messages of every queue of ``topic`` as they arrive (pulled each second from
        where the queues ended when the tail began; nothing committed)."""

        from cluster.client.pull import TOOLS_GROUP, PullStatus, pull_message

        admin = self.model.require_admin()
        instance = admin.instance
        queues = await admin.readable_queues(topic)
        positions = {mq: await admin.max_offset(mq) for mq in queues}
        self.model.message.emit(f"tailing {topic} ({len(queues)} queues)")
        failing: set = set()
        while True:
            fresh = []
            for mq in queues:
                try:
                    result = await pull_message(instance, TOOLS_GROUP, mq, "*", positions[mq], 32)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # its broker is down (a drill): the others go on
                    if mq.broker_name not in failing:
                        failing.add(mq.broker_name)
                        self.model.message.emit(f"live tail: {mq.broker_name} does not answer "
                                                f"({exc}); its queues are skipped until it does")
                    continue
                failing.discard(mq.broker_name)
                if result.status is PullStatus.FOUND:
                    fresh.extend(m.record for m in result.messages)
                    positions[mq] = result.next_begin_offset
            if fresh:
                self.take_tailed(fresh)
            await asyncio.sleep(1.0)

    # -- a message ---------------------------------------------------------------------------------
    def export_query(self) -> None:
        """The current key query as an export: same topic, same key."""
        topic, key = self.query_topic.text().strip(), self.query_key.text().strip()
        if not topic:
            self.model.message.emit("give the query a topic first")
            return
        self.export_requested.emit(topic, key)

    def show_detail(self) -> None:
        record = self.selected_record()
        self._detail_of = record
        if record is None:
            self.detail.clear()
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
            except (ValueError, RecursionError):  # (nested deeper than Python's stack)
                text = "(the body is not JSON)\n" + shown.decode("utf-8", "replace")
        elif is_text(shown):
            text = shown.decode("utf-8")
        else:
            text = ("(a binary body: shown in hex)\n"
                    + "\n".join(f"{i:08x}  {shown[i:i + 16].hex(' ')}"
                                for i in range(0, len(shown), 16)))
        return text + (f"\n… {more:,} more bytes (save the full body to see them)" if more > 0 else "")

    @user_action
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

    @user_action
    def export_results(self, path: str | None) -> None:
        """The result set as JSON lines (.json) or CSV (.csv), as `store dump` writes records."""
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Export the results", "messages.json",
                                                  "JSON lines (*.json);;CSV (*.csv)")
        if not path:
            return
        rows = [record_to_json(r) for r in self.shown]  # what the table lists
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

    @user_action
    def resend_to_group(self) -> None:
        """CONSUME_MESSAGE_DIRECTLY: one online consumer of the group consumes it again."""
        record, group = self.selected_record(), self.resend_group.text().strip()
        if record is None or not group:
            self.model.message.emit("select a message and name the consumer group")
            return

        async def run():
            connections = await self.model.require_admin().consumer_connections(group)
            clients = [c["clientId"] for c in connections.get("connectionSet", [])]
            if not clients:
                raise ConsoleError(f"no consumer of {group} is online")
            return await self.model.require_admin().consume_message_directly(group, clients[0], record.msg_id)

        spawn(run(), on_done=lambda r: self.model.message.emit(
            f"receipt from {group}: {r.get('consumeResult')} in {r.get('spentTimeMills', '?')} ms"),
            on_error=self.model.message.emit)

    def cancel_browse(self, quiet: bool = False) -> None:
        if self._browse_task is not None and not self._browse_task.done():
            self._browse_task.cancel()
            if not quiet:
                self.model.message.emit("scan cancelled")

    @user_action
    def track(self) -> None:
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message first")
            return

        def show(track):
            if self._detail_of is not record:
                return  # the user moved on: not under another message's detail
            lines = [f"  {t['group']}: {t['state']} (its offset in this queue: {t['consumerOffset']})"
                     for t in track] or ["  no consumer group reads this topic"]
            self.detail.appendPlainText("\nconsumer groups:\n" + "\n".join(lines))
            self.last_track = track

        spawn(self.model.require_admin().message_track(record), on_done=show,
              on_error=self.model.message.emit)

    @user_action
    def trace(self) -> None:
        """The message's trace as a timeline (producers and consumers that had tracing on)."""
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message first")
            return

        def show(events):
            if self._detail_of is not record:
                return  # the user moved on: not under another message's detail
            self.detail.appendPlainText("\ntrace:\n" + "\n".join(trace_timeline(events)))
            self.last_trace = events

        spawn(self.model.require_admin().message_trace(record.uniq_key or ""), on_done=show,
              on_error=self.model.message.emit)

    def resend(self) -> None:
        record = self.selected_record()
        if record is None:
            self.model.message.emit("select a message to resend")
            return
        props = {k: v for k, v in record.properties.items()
                 if k not in ("UNIQ_KEY", "WAIT", "TAGS", "KEYS", "CLUSTER")}
        message = Message(record.topic, record.body, tags=record.tags, keys=record.keys, properties=props)
        spawn(send_traced(self.model, message), on_done=lambda r: self.model.message.emit(
            f"resent to {record.topic}: {r.status.name}, new msgId {r.msg_id}"),
            on_error=self.model.message.emit)
