"""The topology editor: name servers and broker groups (a master with its role and flush type,
its slaves, the CommitLog file size), turned into a cluster spec and started."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from cluster.supervisor.errors import SpecError
from cluster.supervisor.spec import ClusterSpec, spec_from_dict
from cluster.supervisor.state import cluster_names

GROUP_COLUMNS = ["broker name", "master role", "flush", "slaves", "CommitLog file (MiB)"]


class TopologyDialog(QDialog):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("New cluster")
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.name = QLineEdit("my-cluster")
        self.namesrv = QSpinBox()
        self.namesrv.setRange(1, 5)
        form.addRow("cluster name", self.name)
        form.addRow("name servers", self.namesrv)
        layout.addLayout(form)
        self.groups = QTableWidget(0, len(GROUP_COLUMNS))
        self.groups.setHorizontalHeaderLabels(GROUP_COLUMNS)
        # Every column as wide as its header and its widest choice ("ASYNC_MASTER"), no cuts.
        self.groups.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        self.groups.verticalHeader().setVisible(False)
        layout.addWidget(QLabel("Broker groups: a master and its slaves each"))
        layout.addWidget(self.groups)
        add = QPushButton("Add a broker group")
        add.clicked.connect(self._add_default_group)
        remove = QPushButton("Remove the selected group")
        remove.clicked.connect(lambda: self.groups.removeRow(self.groups.currentRow()))
        layout.addWidget(add)
        layout.addWidget(remove)
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        layout.addWidget(self.problem)
        choice = QDialogButtonBox.StandardButton
        buttons = QDialogButtonBox(choice.Ok | choice.Cancel)
        buttons.accepted.connect(self.accept_if_valid)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.add_group()
        self.resize(max(self.sizeHint().width(), 760), 460)

    def _add_default_group(self) -> None:
        self.add_group()

    def add_group(self, name: str | None = None, role: str = "ASYNC_MASTER",
                  flush: str = "ASYNC_FLUSH", slaves: int = 0, file_mib: int = 1024) -> None:
        row = self.groups.rowCount()
        self.groups.insertRow(row)
        self.groups.setItem(row, 0, QTableWidgetItem(name or f"broker-{chr(ord('a') + row)}"))
        role_box = QComboBox()
        role_box.addItems(["ASYNC_MASTER", "SYNC_MASTER"])
        role_box.setCurrentText(role)
        flush_box = QComboBox()
        flush_box.addItems(["ASYNC_FLUSH", "SYNC_FLUSH"])
        flush_box.setCurrentText(flush)
        slave_box = QSpinBox()
        slave_box.setRange(0, 4)
        slave_box.setValue(slaves)
        size_box = QSpinBox()
        size_box.setRange(1, 4096)
        size_box.setValue(file_mib)
        for column, widget in ((1, role_box), (2, flush_box), (3, slave_box), (4, size_box)):
            self.groups.setCellWidget(row, column, widget)

    def spec(self) -> ClusterSpec:
        """The spec the form describes; SpecError says what is wrong with it."""
        groups = []
        for row in range(self.groups.rowCount()):
            item = self.groups.item(row, 0)
            groups.append({"name": item.text().strip() if item else "",
                           "master_role": self.groups.cellWidget(row, 1).currentText(),
                           "flush": self.groups.cellWidget(row, 2).currentText(),
                           "slaves": self.groups.cellWidget(row, 3).value(),
                           "commitlog_file_size": self.groups.cellWidget(row, 4).value() * 1024 * 1024})
        return spec_from_dict({"name": self.name.text().strip(), "namesrv": self.namesrv.value(),
                               "groups": groups})

    def accept_if_valid(self) -> None:
        try:
            spec = self.spec()
        except SpecError as exc:
            self.problem.setText(str(exc))
            return
        if spec.name in cluster_names():  # (starting it would reopen that one, not this design)
            self.problem.setText(f"a cluster named {spec.name} exists already: give this one "
                                 "another name, or pick that one in the Cluster list")
            return
        self.accept()
