"""A node's log: follow it as it grows, search it."""

from __future__ import annotations

import os

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

TAIL_BYTES = 256 * 1024


class LogsView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self._path: str | None = None
        self._position = 0
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.node = QComboBox()
        self.node.currentTextChanged.connect(self.open_node)
        self.follow = QCheckBox("follow")
        self.follow.setChecked(True)
        self.search = QLineEdit()
        self.search.setPlaceholderText("search")
        self.search.returnPressed.connect(self.find_next)
        find = QPushButton("Find next")
        find.clicked.connect(self.find_next)
        for widget in (self.node, self.follow, self.search, find):
            top.addWidget(widget)
        layout.addLayout(top)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))  # columns line up
        self.text.setMaximumBlockCount(20000)
        layout.addWidget(self.text, 1)
        self.timer = QTimer(self)
        self.timer.setInterval(500)
        self.timer.timeout.connect(self.poll)
        self.timer.start()
        model.nodes_changed.connect(self._nodes)

    def _nodes(self, rows: list[dict]) -> None:
        names = [r["name"] for r in rows]
        if names != [self.node.itemText(i) for i in range(self.node.count())]:
            current = self.node.currentText()
            self.node.blockSignals(True)
            self.node.clear()
            self.node.addItems(names)
            self.node.blockSignals(False)
            self.node.setCurrentText(current if current in names else names[0] if names else "")
            if self.node.currentText() != current:
                self.open_node(self.node.currentText())

    def open_node(self, name: str) -> None:
        if not name or self.model.supervisor is None:
            return  # external clusters: their logs are not ours to read
        self._path = self.model.supervisor.node(name).log_path
        self.text.clear()
        size = os.path.getsize(self._path) if os.path.exists(self._path) else 0
        self._position = max(0, size - TAIL_BYTES)
        self.poll()

    def poll(self) -> None:
        if not self._path or not self.follow.isChecked() or not os.path.exists(self._path):
            return
        with open(self._path, "rb") as handle:
            handle.seek(self._position)
            data = handle.read()
        if data:
            self._position += len(data)
            self.text.moveCursor(QTextCursor.MoveOperation.End)
            self.text.insertPlainText(data.decode("utf-8", "replace"))
            self.text.moveCursor(QTextCursor.MoveOperation.End)

    def find_next(self) -> bool:
        term = self.search.text()
        if not term:
            return False
        if self.text.find(term):
            return True
        self.text.moveCursor(QTextCursor.MoveOperation.Start)  # wrap around
        found = self.text.find(term, QTextDocument.FindFlag(0))
        if not found:
            self.model.message.emit(f"{term!r} is not in this log")
        return found
