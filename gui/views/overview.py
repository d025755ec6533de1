"""The Overview tab (the first one): the cluster's health at a glance, a sparkline of its put
rate, and the alerts that need someone; double-click an alert for the tab that explains it.
The figures and alerts come from gui/models/overview.py (no Qt there)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from cluster.supervisor.figures import human_bytes
from gui.models.display import count, plural
from gui.models.overview import build_overview

CARDS = ["nodes", "brokers", "topics", "disk", "clients", "traffic", "lag", "replication", "5.x",
         "transactions"]
COLUMNS = 5
COLORS = {"error": "#c62828", "warning": "#ef6c00"}


class OverviewView(QWidget):
    open_view = Signal(str, str)  # tab ("cluster", "charts", "groups", "topics"), subject

    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QVBoxLayout(self)
        self.headline = QLabel("no cluster open")
        self.headline.setObjectName("overviewHeadline")
        font = self.headline.font()
        font.setPointSize(font.pointSize() + 4)
        font.setBold(True)
        self.headline.setFont(font)
        layout.addWidget(self.headline)
        grid = QGridLayout()
        self.cards: dict[str, QLabel] = {}
        for index, name in enumerate(CARDS):
            card = QLabel("-")
            card.setFrameShape(QFrame.Shape.StyledPanel)
            card.setTextFormat(Qt.TextFormat.RichText)
            card.setMinimumHeight(64)
            card.setMargin(8)
            self.cards[name] = card
            grid.addWidget(card, index // COLUMNS, index % COLUMNS)
        layout.addLayout(grid)
        self.spark = pg.PlotWidget(title="Put rate, all masters, last 5 minutes (msg/s)")
        self.spark.setMaximumHeight(170)
        self.spark.setBackground("w")  # the dark theme turns it black with the other charts
        self.spark.hideAxis("bottom")
        self.spark.getAxis("left").enableAutoSIPrefix(False)
        self.spark_curve = self.spark.plot([], [], pen=pg.mkPen("#1565c0", width=2))
        layout.addWidget(self.spark)
        layout.addWidget(QLabel("Alerts (double-click one to see what it is about)"))
        self.alerts = QListWidget()
        self.alerts.itemActivated.connect(self._open)
        layout.addWidget(self.alerts, 1)
        model.sampled.connect(lambda _: self.refresh())
        model.nodes_changed.connect(lambda _: self.refresh())
        model.cluster_changed.connect(lambda _: self.refresh())

    def refresh(self) -> None:
        model = self.model
        if model.admin is None and not model.nodes:
            self.headline.setText("no cluster open: create one from a profile, or connect")
            return
        view = build_overview(model.nodes, model.samples, model.lag, model.topic_totals)
        state = "healthy" if view.healthy else "needs attention"
        self.headline.setText(f"{model.title}: {state}, "
                              f"{plural(len(view.alerts), 'alert')}")
        self._card("nodes", "Nodes up", f"{view.nodes_up} / {view.nodes_total}",
                   "error" if view.nodes_up < view.nodes_total else None)
        self._card("brokers", "Brokers",
                   f"{plural(view.masters, 'master')}, {plural(view.slaves, 'slave')}", None,
                   f"{plural(view.proxies, 'proxy', 'proxies')} for 5.x clients")
        self._card("topics", "Topics", str(view.topics), None,
                   f"{view.messages_stored:,} messages stored")
        ratio = "" if view.disk_ratio is None else f", fullest disk {view.disk_ratio:.0%}"
        self._card("disk", "Disk used", human_bytes(view.disk_bytes),
                   "warning" if (view.disk_ratio or 0) > 0.75 else None, ratio.lstrip(", "))
        self._card("traffic", "Put / get", f"{count(view.put_tps)} / {count(view.get_tps)}", None,
                   "messages a second")
        lag = view.worst_lag
        self._card("lag", "Worst consumer lag", f"{lag[1]:,}" if lag else "-", None,
                   f"group {lag[0]}" if lag else "no consumer group yet")
        ha = view.worst_ha_lag
        self._card("replication", "Slowest slave", human_bytes(ha[1]) if ha else "-", None,
                   f"behind {ha[0]}" if ha else "no slave behind")
        self._card("clients", "Clients", f"{plural(view.producers, 'producer')}, "
                   f"{plural(view.consumers, 'consumer')}", None, "heartbeating to the brokers")
        self._card("transactions", "Transactions", f"{view.transactions_open:,} open",
                   "warning" if view.transactions_checking else None,
                   f"{view.transactions_checking:,} past their timeout, being checked")
        self._card("5.x", "5.x clients", f"{view.pop_in_flight:,} in flight", None,
                   f"{view.timers_pending:,} timer messages pending")
        self.spark_curve.setData(list(range(len(view.put_history))), view.put_history)
        self.alerts.clear()
        if not view.alerts:
            item = QListWidgetItem("nothing needs attention")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.alerts.addItem(item)
        for alert in view.alerts:
            item = QListWidgetItem(f"{alert.severity.upper()}: {alert.text}")
            item.setForeground(QColor(COLORS[alert.severity]))
            item.setData(Qt.ItemDataRole.UserRole, (alert.view, alert.subject))
            item.setToolTip(f"opens the {alert.view} tab")
            self.alerts.addItem(item)

    def _card(self, name: str, title: str, value: str, severity: str | None,
              detail: str = "") -> None:
        color = COLORS.get(severity or "", "")
        style = f" style='color:{color}'" if color else ""
        self.cards[name].setText(f"<small>{title}</small><br><b><big{style}>{value}</big></b>"
                                 + (f"<br><small>{detail}</small>" if detail else ""))

    def _open(self, item: QListWidgetItem) -> None:
        target = item.data(Qt.ItemDataRole.UserRole)
        if target:
            self.open_view.emit(*target)
