"""Table cells shared by the console's tables."""

from __future__ import annotations

from PySide6.QtWidgets import QTableWidgetItem


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
