"""The cluster tab: every node with role, ports, pid, state, health and resources, and one-click
actions on the selected node."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cluster.supervisor.figures import human_bytes
from gui.models.display import health_color, state_color, state_words
from gui.models.topology import build_topology
from gui.tasks import spawn
from gui.views.table_items import row_table, selected_name
from gui.views.topology_picture import TopologyView

COLUMNS = ["node", "role", "address", "HA port", "pid", "state", "health", "CPU %", "RSS", "files", "disk",
           "timers pending", "POP in flight"]
ACTIONS = ["start", "stop", "restart", "kill", "pause", "resume"]




def _count(value) -> str:
    return "-" if value is None else f"{int(value):,}"


class NodesView(QWidget):
    """The topology picture above the node table; a node picked in either is picked in both,
    and the buttons (or the picture's menu) act on it."""

    logs_requested = Signal(str)  # a node's name: show its log

    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.address = QLabel("no cluster open")
        self.address.setObjectName("namesrvAddress")
        copy = QPushButton("Copy name-server address")
        copy.clicked.connect(self.copy_address)
        top.addWidget(self.address, 1)
        top.addWidget(copy)
        layout.addLayout(top)
        self.picture = TopologyView()
        self.picture.setToolTip("Click a node to pick it; right-click (or the menu key) for "
                                "its actions; arrow keys move between nodes")
        self.picture.node_clicked.connect(self.select)
        self.picture.action_requested.connect(self._picture_action)
        self.table = row_table(COLUMNS)  # columns as wide as whole addresses
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(
            lambda: self.picture.select(self.selected_node()))
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.picture)
        split.addWidget(self.table)
        split.setSizes([320, 240])
        layout.addWidget(split, 1)
        self.picture.show_picture(build_topology([]))  # says why it is empty
        buttons = QHBoxLayout()
        self.buttons = {}
        for action in ACTIONS:
            button = QPushButton(action.capitalize())
            button.clicked.connect(lambda _=False, a=action: self.run_action(a))
            buttons.addWidget(button)
            self.buttons[action] = button
        buttons.addStretch(1)
        layout.addLayout(buttons)
        self.log_hint = QLabel("")
        self.log_hint.setWordWrap(True)
        layout.addWidget(self.log_hint)
        model.nodes_changed.connect(self.show_nodes)
        model.cluster_changed.connect(lambda name: self.address.setText(self._where(name)))

    def copy_address(self) -> None:
        address = self.model.namesrv_addr
        QGuiApplication.clipboard().setText(address)
        self.model.message.emit(f"copied {address} (the name-server address) to the clipboard"
                                if address else "no cluster open: nothing to copy")

    def _where(self, name: str) -> str:
        if not name:
            return "no cluster open"
        text = f"cluster {name} — name server {self.model.namesrv_addr} (4.x clients)"
        proxy = self.model.proxy_addr
        return text + (f" · proxy {proxy} (5.x clients)" if proxy else "")

    def selected_node(self) -> str | None:
        return selected_name(self.table)

    def select(self, name: str) -> None:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == name:
                self.table.selectRow(row)
                return

    def _picture_action(self, action: str, node: str) -> None:
        self.select(node)
        if action == "logs":
            self.logs_requested.emit(node)
        else:
            self.run_action(action)

    # Actions that take a node down ask first, saying what happens.
    CONFIRM = {"kill": "Kill {node} with SIGKILL, as a crash would? Its clients see it vanish.",
               "stop": "Stop {node}? Its clients lose it until it is started again."}

    def confirm(self, question: str) -> bool:
        answer = QMessageBox.question(self, "RocketDesk", question)
        return answer == QMessageBox.StandardButton.Yes

    def run_action(self, action: str) -> None:
        node = self.selected_node()
        if node is None:
            self.model.message.emit("select a node first")
            return
        question = self.CONFIRM.get(action)
        if question is not None and not self.confirm(question.format(node=node)):
            return
        spawn(self.model.node_action(action, node), on_error=self.model.message.emit)

    def show_nodes(self, rows: list[dict]) -> None:
        selected = self.selected_node()
        self.table.setRowCount(len(rows))
        died = []
        for r, row in enumerate(rows):
            cpu = "-" if row["cpuPercent"] is None else f"{row['cpuPercent']:.0f}"
            files = row["openFiles"]
            values = [row["name"], row["role"], row["address"], str(row["haPort"] or "-"),
                      str(row["pid"] or "-"), row["state"], row["health"], cpu,
                      human_bytes(row["rssBytes"]), str(files if files is not None else "-"),
                      human_bytes(row["diskBytes"]), _count(row.get("timersPending")),
                      _count(row.get("popInFlight"))]
            for c, value in enumerate(values):
                item = QTableWidgetItem(value)
                item.setToolTip(value)  # the full text, whatever the column's width
                self.table.setItem(r, c, item)
            state_item, health_item = self.table.item(r, 5), self.table.item(r, 6)
            state_item.setToolTip(state_words(row["state"]))
            for item, color in ((state_item, state_color(row["state"])),
                                (health_item, health_color(row["health"]))):
                if color:
                    item.setForeground(QColor(color))
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
            if row["state"] == "died":
                died.append(f"{row['name']} died; its last log lines:\n{row.get('lastLog', '')}")
        self.log_hint.setText("\n\n".join(died))
        latest = {name: points[-1] for name, points in self.model.samples.items() if points}
        self.picture.show_picture(build_topology(rows, latest))
        if selected:
            self.select(selected)
