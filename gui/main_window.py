"""The console's main window: a cluster picker and tabs for the cluster's nodes, its live
charts, topics and messages, and exports."""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QTabWidget,
    QToolBar,
)

from cluster.supervisor.spec import profile_names
from gui.cluster_model import ClusterModel
from gui.tasks import spawn, user_message
from gui.views.charts import ChartsView
from gui.views.export_view import ExportView
from gui.views.groups import GroupsView
from gui.views.load import LoadView
from gui.views.logs import LogsView
from gui.views.nodes import NodesView
from gui.views.overview import OverviewView
from gui.views.store_browser import StoreBrowserView
from gui.views.topics import TopicsView


class MainWindow(QMainWindow):
    def __init__(self, model: ClusterModel | None = None) -> None:
        super().__init__()
        self.setWindowTitle("RocketDesk")
        self.model = model or ClusterModel(self)
        self._shown_cluster = ""  # the cluster on screen, as the picker names it
        toolbar = QToolBar("cluster")
        toolbar.setObjectName("clusterToolbar")
        self.addToolBar(toolbar)
        toolbar.addWidget(QLabel(" Profile "))
        self.profile = QComboBox()
        self.profile.addItems(profile_names())
        self.profile.setCurrentText("single")
        toolbar.addWidget(self.profile)
        self.create_button = QPushButton("Create && start")
        self.create_button.clicked.connect(self.create_cluster)
        toolbar.addWidget(self.create_button)
        design = QPushButton("New topology…")
        design.clicked.connect(self.design_cluster)
        toolbar.addWidget(design)
        toolbar.addSeparator()
        toolbar.addWidget(QLabel(" Cluster "))
        self.clusters = QComboBox()
        self.clusters.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.clusters.setMinimumContentsLength(12)  # whole names, not "2m-2s-as"
        self.clusters.activated.connect(lambda _: self.open_cluster(self.clusters.currentText()))
        toolbar.addWidget(self.clusters)
        self.dark = QPushButton("Dark theme")
        self.dark.setCheckable(True)
        self.dark.toggled.connect(self.set_dark)
        self.external = QLineEdit()
        self.external.setPlaceholderText("or a name server host:port")
        self.external.setMaximumWidth(220)
        connect = QPushButton("Connect")
        connect.clicked.connect(self.connect_external)
        toolbar.addWidget(self.external)
        toolbar.addWidget(connect)
        stop = QPushButton("Stop cluster")
        stop.clicked.connect(self.stop_cluster)
        toolbar.addWidget(stop)
        toolbar.addSeparator()
        toolbar.addWidget(self.dark)

        self.tabs = QTabWidget()
        self.overview = OverviewView(self.model)
        self.overview.open_view.connect(self.show_subject)
        self.nodes = NodesView(self.model)
        self.charts = ChartsView(self.model)
        self.topics = TopicsView(self.model)
        self.export = ExportView(self.model)
        self.groups = GroupsView(self.model)
        self.logs = LogsView(self.model)
        self.store = StoreBrowserView(self.model)
        self.load = LoadView(self.model)
        for view, title in ((self.overview, "Overview"), (self.nodes, "Cluster"),
                            (self.charts, "Charts"),
                            (self.topics, "Topics && messages"), (self.groups, "Consumer groups"),
                            (self.load, "Load"),
                            (self.export, "Export"), (self.logs, "Logs"), (self.store, "Store browser")):
            self.tabs.addTab(view, title)
        self.setCentralWidget(self.tabs)
        self._build_menus(design, connect, stop)
        self.topics.export_requested.connect(self.open_export)
        self.nodes.logs_requested.connect(self.open_log)
        self.model.message.connect(self.show_message)
        # A sentence about one tab does not follow the user to the next one.
        self.tabs.currentChanged.connect(lambda _: self.statusBar().clearMessage())
        self.model.cluster_changed.connect(self._cluster_opened)
        self.reload_clusters()
        settings = QSettings("RocketDesk", "console")
        if settings.value("dark") in (True, "true"):
            self.dark.setChecked(True)
        if settings.value("geometry") is not None:
            self.restoreGeometry(settings.value("geometry"))
        else:
            self.resize(1200, 800)

    # -- menus: every action of the window from the keyboard, shortcuts shown --------------------
    def _action(self, menu, text: str, slot, shortcut: str | None = None, button=None):
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda _=False: slot())
        menu.addAction(action)
        if button is not None and shortcut:  # the toolbar's button says its key too
            button.setToolTip(f"{text.replace('&', '').rstrip('…')} "
                              f"({QKeySequence(shortcut).toString()})")
        return action

    def _build_menus(self, design, connect, stop) -> None:
        bar = self.menuBar()
        cluster = bar.addMenu("&Cluster")
        self._action(cluster, "&Create and start the profile", self.create_cluster,
                     "Ctrl+Shift+N", self.create_button)
        self._action(cluster, "&New topology…", self.design_cluster, "Ctrl+N", design)
        self._action(cluster, "Open a cluster run &here", self.clusters.showPopup, "Ctrl+O")
        self._action(cluster, "C&onnect to a name server", self._focus_external, "Ctrl+L",
                     connect)
        self._action(cluster, "&Stop the cluster…", self.stop_cluster, "Ctrl+Shift+S", stop)
        cluster.addSeparator()
        self._action(cluster, "&Quit", self.close, "Ctrl+Q")
        node = bar.addMenu("&Node")
        for action, label in (("start", "&Start"), ("stop", "S&top…"), ("restart", "&Restart"),
                              ("kill", "&Kill (SIGKILL)…"), ("pause", "&Pause (SIGSTOP)"),
                              ("resume", "Res&ume (SIGCONT)")):
            self._action(node, label, lambda a=action: self._node_action(a))
        self._action(node, "Show its &log", lambda: self._node_action("logs"))
        view = bar.addMenu("&View")
        for index in range(self.tabs.count()):
            title = self.tabs.tabText(index).replace("&&", "&")
            self._action(view, title.replace("&", "&&"),
                         lambda i=index: self.tabs.setCurrentIndex(i), f"Ctrl+{index + 1}")
        view.addSeparator()
        self._action(view, "&Refresh this tab", self.refresh_tab, "F5")
        self._action(view, "&Dark theme", self.dark.toggle, "Ctrl+Shift+D", self.dark)

    def stop_cluster(self) -> None:
        """Stop every node of the open cluster, once the user has said yes (as for one node)."""
        if self.model.supervisor is None:
            self.show_message("the cluster on screen is not run by RocketDesk here (connected "
                              "by its name servers), or none is open: nothing to stop")
            return
        name = self.clusters.currentText() or "the cluster"
        if not self.nodes.confirm(f"Stop every node of {name}? Its clients lose it until it is "
                                  "started again."):
            return
        spawn(self.model.stop_cluster(), on_error=self.show_message)

    def _focus_external(self) -> None:
        self.external.setFocus()
        self.external.selectAll()

    def _node_action(self, action: str) -> None:
        """A Node menu entry: on the node picked on the Cluster tab."""
        node = self.nodes.selected_node()
        if node is None:
            self.tabs.setCurrentWidget(self.nodes)
            self.show_message("pick a node on the Cluster tab first (click it, or arrow keys "
                              "in the picture)")
            return
        self.nodes._picture_action(action, node)

    def refresh_tab(self) -> None:
        current = self.tabs.currentWidget()
        refresh = getattr(current, "refresh", None)
        if callable(refresh):
            refresh()
        self.model.refresh()

    def set_dark(self, dark: bool) -> None:
        from PySide6.QtGui import QColor, QPalette
        from PySide6.QtWidgets import QApplication

        self.dark.setText("Light theme" if dark else "Dark theme")  # what a click does
        app = QApplication.instance()
        if dark:
            palette = QPalette()
            role = QPalette.ColorRole
            for which, color in ((role.Window, "#2b2b2b"), (role.WindowText, "#e0e0e0"),
                                 (role.Base, "#1e1e1e"), (role.Text, "#e0e0e0"),
                                 (role.Button, "#3c3c3c"), (role.ButtonText, "#e0e0e0"),
                                 (role.Highlight, "#2f65ca"),
                                 # Hints in empty fields readable on the dark base.
                                 (role.PlaceholderText, "#9a9a9a"),
                                 (role.ToolTipBase, "#3c3c3c"), (role.ToolTipText, "#e0e0e0")):
                palette.setColor(which, QColor(color))
            app.setPalette(palette)
        else:
            app.setPalette(app.style().standardPalette())
        self.charts.apply_theme(dark)
        self.load.apply_theme(dark)
        self.nodes.picture.set_dark(dark)
        self.overview.spark.setBackground("k" if dark else "w")
        QSettings("RocketDesk", "console").setValue("dark", dark)

    def open_log(self, node: str) -> None:
        if self.logs.node.findText(node) < 0:  # a node of a cluster run elsewhere has none here
            self.show_message(f"no log of {node} here: RocketDesk keeps logs of the nodes it runs")
            return
        self.logs.node.setCurrentText(node)
        self.tabs.setCurrentWidget(self.logs)

    def open_export(self, topic: str, keys: str = "") -> None:
        self.export.prefill(topic, keys)
        self.tabs.setCurrentWidget(self.export)

    def show_subject(self, view: str, subject: str) -> None:
        """An alert's tab, with what it is about selected."""
        if view == "cluster":
            self.tabs.setCurrentWidget(self.nodes)
            if subject:
                self.nodes.select(subject)
        elif view == "groups":
            self.tabs.setCurrentWidget(self.groups)
            if subject:
                self.groups.select_group(subject)
        elif view == "charts":
            self.tabs.setCurrentWidget(self.charts)
        elif view == "topics":
            self.tabs.setCurrentWidget(self.topics)
            if subject == "transactions":
                self.topics.show_pending_transactions()

    def show_message(self, text: str) -> None:
        self.statusBar().showMessage(text, 15000)

    def reload_clusters(self) -> None:
        current = self.clusters.currentText()
        self.clusters.clear()
        self.clusters.addItems(self.model.known_clusters())
        if current:
            self.clusters.setCurrentText(current)

    def open_cluster(self, name: str) -> None:
        if not name:
            return
        try:
            self.model.attach(name)
        except Exception as exc:  # removed meanwhile (`rocketdesk rm`), or its files unreadable
            self.show_message(user_message(exc))
            self.reload_clusters()  # what is there now, showing the cluster still on screen
            self.clusters.setCurrentText(self._shown_cluster)

    def _cluster_opened(self, name: str) -> None:
        self.reload_clusters()
        if not name.startswith("external "):
            self.clusters.setCurrentText(name)
        self._shown_cluster = name
        self.topics.refresh()
        self.groups.refresh()

    def connect_external(self) -> None:
        """Switch to a cluster run elsewhere, once one of its name servers answers (a wrong
        address leaves the current cluster on screen, with a sentence)."""
        address = self.external.text()

        async def connect() -> None:
            await self.model.check_name_servers(address)
            self.model.connect_external(address)

        spawn(connect(), on_error=self.model.message.emit)

    def design_cluster(self) -> None:
        from gui.views.topology import TopologyDialog

        dialog = TopologyDialog(self)
        if dialog.exec() == TopologyDialog.DialogCode.Accepted:
            self.start_spec(dialog.spec())

    def start_spec(self, spec) -> None:
        self.create_button.setEnabled(False)
        spawn(self.model.create_and_start(spec),
              on_done=lambda _: self.create_button.setEnabled(True),
              on_error=lambda text: (self.show_message(text), self.create_button.setEnabled(True)))

    def create_cluster(self) -> None:
        self.create_button.setEnabled(False)
        spawn(self.model.create_and_start(self.profile.currentText()),
              on_done=lambda _: self.create_button.setEnabled(True),
              on_error=lambda text: (self.show_message(text), self.create_button.setEnabled(True)))

    def closeEvent(self, event) -> None:
        if not self.export.may_close():  # an export is running, and the user chose to stay
            event.ignore()
            return
        QSettings("RocketDesk", "console").setValue("geometry", self.saveGeometry())
        self.model.timer.stop()
        super().closeEvent(event)
