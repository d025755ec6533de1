"""The message finder's filter bar: RocketMQ SQL92 over the properties, text in the body, a JSON
path and a store-time range (gui/models/message_filter.py does the filtering). It says a new
filter with ``changed`` and a filter that cannot be used with ``problem`` (a sentence); the
last good filter stays in force meanwhile."""

from __future__ import annotations

from PySide6.QtCore import QDateTime, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDateTimeEdit,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from gui.models.message_filter import FilterProblem, ResultFilter


class FilterBar(QGroupBox):
    changed = Signal(object)  # the ResultFilter now in force
    problem = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__("Filter the results", parent)
        self.current = ResultFilter()
        self._setting_range = False
        filter_layout = QHBoxLayout(self)
        self.sql = QLineEdit()
        self.sql.setPlaceholderText("SQL92, e.g. TAGS = 'paid' AND amount > 100")
        self.sql.setToolTip("RocketMQ's SQL92 over the properties, plus topic, queueId, "
                                   "queueOffset, storeTimestamp, bornTimestamp, reconsumeTimes, "
                                   "bodyLength")
        self.body_text = QLineEdit()
        self.body_text.setPlaceholderText("text in the body")
        self.json_path = QLineEdit()
        self.json_path.setPlaceholderText("JSON path, e.g. $.order.total > 100")
        self.since = QDateTimeEdit(QDateTime.currentDateTime().addSecs(-3600))
        self.until = QDateTimeEdit(QDateTime.currentDateTime().addSecs(3600))
        self.in_range = QCheckBox("stored between")
        self._range_edited = False  # until the user sets it, the range is the last/next hour
        for edit in (self.since, self.until):
            edit.setDisplayFormat("yyyy-MM-dd HH:mm t")
            edit.setCalendarPopup(True)
            edit.dateTimeChanged.connect(self._range_changed)
        self.in_range.toggled.connect(self._range_toggled)
        for edit in (self.sql, self.body_text, self.json_path):
            edit.returnPressed.connect(self.apply)
        apply = QPushButton("Apply")
        apply.setToolTip("narrow the results (Enter in any field)")
        apply.clicked.connect(self.apply)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.clear)
        # Two rows, so that an expression has room to be read whole.
        filter_rows = QVBoxLayout()
        first, second = QHBoxLayout(), QHBoxLayout()
        # Expressions above, text and time below: no field squeezed to a few letters.
        for widget, stretch in ((self.sql, 3), (self.json_path, 2), (apply, 0), (clear, 0)):
            first.addWidget(widget, stretch)
        self.body_text.setMinimumWidth(120)
        for widget, stretch in ((self.body_text, 1), (self.in_range, 0), (self.since, 0),
                                (QLabel("and"), 0), (self.until, 0)):
            second.addWidget(widget, stretch)
        filter_rows.addLayout(first)
        filter_rows.addLayout(second)
        filter_layout.addLayout(filter_rows)

    def apply(self) -> None:
        since = until = None
        if self.in_range.isChecked():
            since = self.since.dateTime().toMSecsSinceEpoch()
            until = self.until.dateTime().toMSecsSinceEpoch()
        try:
            self.current = ResultFilter.parse(self.sql.text(), self.body_text.text(),
                                             self.json_path.text(), since, until)
        except FilterProblem as exc:
            self.problem.emit(str(exc))
            return
        self.changed.emit(self.current)

    def _range_changed(self, _when) -> None:
        if not self._setting_range:
            self._range_edited = True
        if self.in_range.isChecked():
            self.apply()

    def _range_toggled(self, on: bool) -> None:
        if on and not self._range_edited:  # around now, not around when the tab was built
            now = QDateTime.currentDateTime()
            self._setting_range = True
            self.since.setDateTime(now.addSecs(-3600))
            self.until.setDateTime(now.addSecs(3600))
            self._setting_range = False
        self.apply()

    def clear(self) -> None:
        for edit in (self.sql, self.body_text, self.json_path):
            edit.clear()
        self.in_range.blockSignals(True)
        self.in_range.setChecked(False)
        self.in_range.blockSignals(False)
        self.current = ResultFilter()
        self.changed.emit(self.current)
