"""A node's log: follow it as it grows, search it, filter it by level or by a text."""

from __future__ import annotations

import os

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gui.models.logs import LEVELS, LogFilter

TAIL_BYTES = 256 * 1024
MAX_LINES = 20000


class LogsView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self._path: str | None = None
        self._position = 0
        self.lines: list[str] = []  # the log as read, whatever the filter shows
        self._filter = LogFilter()
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
        self.level = QComboBox()
        self.level.addItems(LEVELS)
        self.level.setToolTip("the lowest level shown (a traceback stays with its line)")
        self.level.currentTextChanged.connect(lambda _: self.render())
        self.only_matching = QCheckBox("only matching lines")
        self.only_matching.toggled.connect(lambda _: self.render())
        self.search.textChanged.connect(
            lambda _: self.render() if self.only_matching.isChecked() else None)
        for widget in (self.node, self.follow, QLabel("level"), self.level, self.search, find,
                       self.only_matching):
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
        self.lines = []
        size = os.path.getsize(self._path) if os.path.exists(self._path) else 0
        self._position = max(0, size - TAIL_BYTES)
        self.poll()

    def poll(self) -> None:
        if not self._path or not self.follow.isChecked() or not os.path.exists(self._path):
            return
        with open(self._path, "rb") as handle:
            handle.seek(self._position)
            data = handle.read()
        if not data:
            return
        cut = data.rfind(b"\n") + 1  # whole lines only; the rest is read again next time
        if cut == 0:
            return
        self._position += cut
        new = data[:cut].decode("utf-8", "replace").splitlines()
        self.lines = (self.lines + new)[-MAX_LINES:]
        shown = [line for line in new if self._filter.keep(line)]
        if shown:
            self.text.moveCursor(QTextCursor.MoveOperation.End)
            self.text.insertPlainText("\n".join(shown) + "\n")
            self.text.moveCursor(QTextCursor.MoveOperation.End)

    def render(self) -> None:
        """Show the lines read so far through the current filter."""
        self._filter = LogFilter(self.level.currentText(), self.search.text(),
                                 self.only_matching.isChecked())
        shown = self._filter.apply(self.lines)
        self.text.setPlainText("\n".join(shown) + ("\n" if shown else ""))
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
