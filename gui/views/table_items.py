"""What the console's tables share: a read-only table of rows, and cells that sort by value."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem


def row_table(columns: list[str], sorted_by_name: bool = False,
              tips: list[str] | None = None) -> QTableWidget:
    """A read-only table whose rows are selected one at a time, without row numbers, its
    columns as wide as their contents (``tips``: what each header means, in its tooltip);
    sortable (by the first column first) if asked."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    for index, tip in enumerate(tips or ()):
        table.horizontalHeaderItem(index).setToolTip(tip)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    if sorted_by_name:
        header.setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        table.setSortingEnabled(True)
    return table


def selected_name(table: QTableWidget) -> str | None:
    """The first cell's text of the selected row (a topic's, a group's, a node's name)."""
    rows = table.selectionModel().selectedRows()
    if not rows:
        return None
    item = table.item(rows[0].row(), 0)
    return item.text() if item else None


class SortableItem(QTableWidgetItem):
    """A cell that sorts by its value (numbers as numbers), not by its text."""

    def __init__(self, text: str, key) -> None:
        super().__init__(text)
        self.key = key

    def __lt__(self, other) -> bool:
        if isinstance(other, SortableItem):
            try:
                return self.key < other.key
            except TypeError:
                pass
        return super().__lt__(other)
