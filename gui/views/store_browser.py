"""The offline store browser: any RocketMQ store directory, its broker running or not, read
only (storage.inspector takes no lock and writes nothing)."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.models.display import body_preview, local_zone, table_time
from gui.views.table_items import row_table
from storage.errors import StoreError
from storage.inspector import format_timestamp, inspect_store, iter_store_records
from storage.record import MessageRecord

COLUMNS = ["topic", "queue", "offset", "commitLog offset", "keys", "tags", "stored", "body"]
STORED = COLUMNS.index("stored")


class StoreBrowserView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.records: list[MessageRecord] = []
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.path = QLineEdit()
        self.path.setPlaceholderText("a store directory (storePathRootDir), e.g. ~/store")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self.choose)
        open_button = QPushButton("Open")
        open_button.clicked.connect(self.open_store)
        # The open cluster's brokers' stores, one pick away (the path stays editable).
        self.cluster_stores = QComboBox()
        self.cluster_stores.setToolTip("the stores of the cluster the console has open")
        self.cluster_stores.activated.connect(self._pick_cluster_store)
        for widget in (self.cluster_stores, self.path, browse, open_button):
            top.addWidget(widget)
        layout.addLayout(top)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        search = QHBoxLayout()
        self.topic = QLineEdit()
        self.topic.setPlaceholderText("topic (all)")
        self.text = QLineEdit()
        self.text.setPlaceholderText("key, tag or text in the body")
        self.limit = QSpinBox()
        self.limit.setRange(1, 100000)
        self.limit.setValue(500)
        scan = QPushButton("Scan")
        scan.clicked.connect(self.scan)
        for widget in (self.topic, self.text, QLabel("at most"), self.limit, scan):
            search.addWidget(widget)
        layout.addLayout(search)
        self.table = row_table(COLUMNS)  # whole headers ("commitLog offset", not ":ommitLog offse")
        self.table.horizontalHeaderItem(STORED).setToolTip(f"store time, {local_zone()}")
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self.show_detail)
        layout.addWidget(self.table, 2)
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        layout.addWidget(self.detail, 1)
        model.cluster_changed.connect(self.show_cluster_stores)
        self.show_cluster_stores()

    def show_cluster_stores(self, _name: str = "") -> None:
        """List the open cluster's broker stores and put the first in the path, unless the
        user has typed a path of their own."""
        stores = self.model.store_dirs()
        previous = [self.cluster_stores.itemData(i) for i in range(self.cluster_stores.count())]
        self.cluster_stores.clear()
        if not stores:
            self.cluster_stores.addItem("no cluster run here", None)
            self.cluster_stores.setEnabled(False)
            return
        self.cluster_stores.setEnabled(True)
        for node, path in stores:
            self.cluster_stores.addItem(f"{node}'s store", path)
        if not self.path.text().strip() or self.path.text() in previous:
            self.path.setText(stores[0][1])

    def _pick_cluster_store(self, index: int) -> None:
        path = self.cluster_stores.itemData(index)
        if path:
            self.path.setText(path)
            self.open_store()

    def choose(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A RocketMQ store directory")
        if folder:
            self.path.setText(folder)
            self.open_store()

    def open_store(self) -> None:
        try:
            result = inspect_store(self.path.text().strip(), check_crc=False)
        except (StoreError, OSError) as exc:
            self.summary.setText(f"cannot read that store: {exc}")
            return
        topics = sorted({t for t, _ in result.queues})
        problems = "; ".join(result.problems) if result.problems else "no problems found"
        self.summary.setText(
            f"{result.records:,} records in {len(result.commit_log_files)} CommitLog file(s), offsets "
            f"{result.min_offset:,}..{result.max_offset:,}; stored "
            f"{format_timestamp(result.first_store_timestamp)} .. "
            f"{format_timestamp(result.last_store_timestamp)}; "
            f"topics: {', '.join(topics) or '-'}; {problems}")
        if not (self.topic.text().strip() or self.text.text().strip()):
            self.scan()  # its first records at once (a filtered scan waits for Scan: it may
            #              walk the whole CommitLog)

    def scan(self) -> None:
        root = self.path.text().strip()
        topic, needle, limit = self.topic.text().strip(), self.text.text().strip(), self.limit.value()
        found: list[MessageRecord] = []
        scanned = 0
        problems: list[str] = []
        try:
            for record in iter_store_records(root, check_crc=False, problems=problems):
                if not isinstance(record, MessageRecord):
                    continue
                scanned += 1
                if topic and record.topic != topic:
                    continue
                if needle and needle not in (record.keys or "").split(" ") and needle != record.tags and (
                        needle.encode() not in record.body):
                    continue
                found.append(record)
                if len(found) >= limit:
                    break
        except (StoreError, OSError) as exc:
            self.summary.setText(f"cannot read that store: {exc}")
            return
        self.records = found
        self.table.setRowCount(len(found))
        for r, record in enumerate(found):
            values = [record.topic, str(record.queue_id), str(record.queue_offset),
                      str(record.commit_log_offset),
                      record.keys or "", record.tags or "", table_time(record.store_timestamp),
                      body_preview(record.body)]  # a body that is not text as hex, never "��"
            for c, value in enumerate(values):
                item = QTableWidgetItem(value)
                item.setToolTip(format_timestamp(record.store_timestamp) if c == STORED else value)
                self.table.setItem(r, c, item)
        capped = f" (stopped at {limit}: raise the limit to see more)" if len(found) >= limit else ""
        self.model.message.emit(f"scanned {scanned:,} records, found {len(found):,}{capped}")

    def show_detail(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        record = self.records[rows[0].row()]
        self.detail.setPlainText(
            f"topic {record.topic} queue {record.queue_id} offset {record.queue_offset}\n"
            f"msgId {record.uniq_key}  offsetMsgId {record.msg_id}\nproperties {record.properties}\n\n"
            + record.body.decode("utf-8", "replace"))
