"""The export tab: a topic to Parquet, JSON or CSV through `rocketdesk export`, run as a
process of its own (gui/export_launch.py) whose JSON events drive the progress bar; Cancel asks
it to stop (SIGTERM; a request file on Windows). Closing the console while an export runs asks
whether it goes on without the console or is cancelled: either way the launcher ends on its own
terms and cleans up.

Local exports run on the warm export service (``rocketdesk export --warm``), which the tab
starts when it is first shown, so that a click exports at once rather than after Spark's
10-20 s start; the service ends with the consoles that used it, once no export runs on it.
``ROCKETDESK_EXPORT_WARM=0`` turns that off (each export then starts its own Spark, as with a
spark:// master)."""

from __future__ import annotations

import json
import os
import sys
import time

from PySide6.QtCore import QProcess, QProcessEnvironment, QStringListModel, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QCompleter,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from export.job_record import effective_state, jobs_dir, read_records
from gui.export_launch import ExportLaunch
from gui.models.exports import COLUMNS as EXPORT_COLUMNS
from gui.models.exports import export_rows
from gui.views.table_items import row_table

EXPORTS_FOLDER = os.path.join(os.path.expanduser("~"), "rocketdesk-exports")
WARM_ENV = "ROCKETDESK_EXPORT_WARM"


def warm_enabled() -> bool:
    return os.environ.get(WARM_ENV, "1") != "0"


PARENT_ENV = "ROCKETDESK_EXPORT_SERVICE_PARENT"


def export_environment() -> QProcessEnvironment:
    """The export commands' environment: a warm service they start ends with this console."""
    env = QProcessEnvironment.systemEnvironment()
    env.insert(PARENT_ENV, str(os.getpid()))
    return env


def ask_on_close(parent, running: str, continuous: bool) -> str:
    """What becomes of a running export when the console closes: "keep", "cancel" or "stay"."""
    box = QMessageBox(QMessageBox.Icon.Question, "An export is running",
                      f"{running}\n\nIt can go on without the console: the Export tab lists it "
                      "the next time you open the console, and can stop it there.", parent=parent)
    keep = box.addButton("Keep it running", QMessageBox.ButtonRole.AcceptRole)
    cancel = box.addButton("Stop it" if continuous else "Cancel it",
                           QMessageBox.ButtonRole.DestructiveRole)
    stay = box.addButton("Don't close", QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(keep)
    box.setEscapeButton(stay)
    box.exec()
    choice = {keep: "keep", cancel: "cancel"}.get(box.clickedButton(), "stay")
    box.deleteLater()
    return choice


class ExportView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.launch: ExportLaunch | None = None
        self.events_path: str | None = None
        self._read = 0
        self.state = "idle"
        self._started = 0.0
        self._planned = False
        self._on_warm = False
        self._topic = ""
        self._continuous = False
        self._exported = 0
        self._total: int | None = None
        self.output: str | None = None
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.topic = QLineEdit()
        self.format = QComboBox()
        self.format.addItems(["parquet", "json", "csv"])
        self.tags = QLineEdit("*")
        self.keys = QLineEdit()
        self.keys.setPlaceholderText("only these keys, comma-separated (optional)")
        self.since = QLineEdit()
        self.since.setPlaceholderText("from: earliest, an ISO time or ms (optional)")
        self.until = QLineEdit()
        self.until.setPlaceholderText("to: latest, an ISO time or ms (optional)")
        # The topic: typed, or picked from the cluster's topics as one types (or Down opens all).
        self.topic.setPlaceholderText("a topic of the open cluster")
        self.topic_names = QStringListModel(self)
        completer = QCompleter(self.topic_names, self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.topic.setCompleter(completer)
        # The output folder follows the topic (~/rocketdesk-exports/<topic>) until the user
        # picks or types a folder of their own.
        self.out = QLineEdit(os.path.join(EXPORTS_FOLDER, "export"))
        self._auto_out = self.out.text()
        self.topic.textChanged.connect(self._follow_topic)
        choose = QPushButton("Choose…")
        choose.setToolTip("pick the folder the files are written to")
        choose.clicked.connect(self.choose_folder)
        out_row = QHBoxLayout()
        out_row.addWidget(self.out, 1)
        out_row.addWidget(choose)
        self.master = QLineEdit("local[*]")
        self.continuous = QCheckBox("keep the folder up to date with the topic until stopped "
                                    "(a continuous export; the same export resumes where it stopped)")
        self.continuous.toggled.connect(
            lambda on: self.cancel_button.setText("Stop" if on else "Cancel"))
        for label, widget in (("topic", self.topic), ("format", self.format), ("tags", self.tags),
                              ("keys", self.keys), ("from", self.since), ("to", self.until),
                              ("output folder", out_row), ("Spark master", self.master),
                              ("", self.continuous)):
            form.addRow(label, widget)
        layout.addLayout(form)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Export")
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        self.progress = QProgressBar()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setOpenExternalLinks(True)  # the finished export links to its folder
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        self.spark_state = QLabel("")
        self.spark_state.setWordWrap(True)
        layout.addWidget(self.spark_state)
        self.warmer: QProcess | None = None
        self.warm_failed = False  # then each export starts its own Spark, as the tab says
        self.timer = QTimer(self)
        self.timer.setInterval(300)
        self.timer.timeout.connect(self.poll_events)
        # Every export, running or ended, started here or from the command line.
        layout.addWidget(QLabel("Exports (newest first; double-click one to open its folder)"))
        self.jobs = row_table(EXPORT_COLUMNS)
        self.jobs.horizontalHeader().setStretchLastSection(True)
        self.jobs.itemDoubleClicked.connect(lambda _item: self.open_selected())
        layout.addWidget(self.jobs, 1)
        job_buttons = QHBoxLayout()
        self.stop_job_button = QPushButton("Stop or cancel the selected export")
        self.stop_job_button.clicked.connect(self.stop_selected)
        job_buttons.addWidget(self.stop_job_button)
        job_buttons.addStretch(1)
        layout.addLayout(job_buttons)
        self.job_rows: list = []
        self.jobs_timer = QTimer(self)
        self.jobs_timer.setInterval(2000)
        self.jobs_timer.timeout.connect(self.refresh_jobs)

    def showEvent(self, event) -> None:
        self.offer_topics()
        self.warm_up()
        self.refresh_jobs()
        self.jobs_timer.start()
        super().showEvent(event)

    def hideEvent(self, event) -> None:
        self.jobs_timer.stop()
        super().hideEvent(event)

    def refresh_jobs(self) -> None:
        selected = self.selected_job()
        # The newest 100: read on the GUI thread every 2 s while the tab shows, and after each
        # of the events of an export started here (at most every 300 ms).
        self.job_rows = export_rows(read_records(str(jobs_dir()), limit=100), effective_state)
        self.jobs.setRowCount(len(self.job_rows))
        for r, row in enumerate(self.job_rows):
            for c, text in enumerate(row.cells()):
                item = QTableWidgetItem(text)
                item.setToolTip(row.tooltip() if c == 1 else text)
                self.jobs.setItem(r, c, item)
            if selected is not None and row.id == selected.id:
                self.jobs.selectRow(r)

    def selected_job(self):
        rows = self.jobs.selectionModel().selectedRows()
        return self.job_rows[rows[0].row()] if rows and rows[0].row() < len(self.job_rows) else None

    def stop_selected(self) -> None:
        """``rocketdesk export cancel``: a continuous export stops, another is cancelled."""
        row = self.selected_job()
        if row is None or not row.running:
            self.model.message.emit("select a running export to stop or cancel")
            return
        QProcess.startDetached(sys.executable, ["-m", "rocketdesk.cli", "export", "cancel", row.id])
        self.model.message.emit(f"asked export {row.id} to {'stop' if row.continuous else 'cancel'}")

    def open_selected(self) -> None:
        row = self.selected_job()
        if row is not None and row.out and os.path.isdir(row.out):
            QDesktopServices.openUrl(QUrl.fromLocalFile(row.out))

    def warm_up(self) -> None:
        """Start the warm export service once, in the background, the first time the tab shows."""
        if self.warmer is not None or not warm_enabled():
            return
        self.warmer = QProcess(self)
        self.warmer.setProcessEnvironment(export_environment())
        self.warmer.setProgram(sys.executable)
        self.warmer.setArguments(["-m", "rocketdesk.cli", "export", "service", "start",
                                  "--idle-minutes", "120"])
        self.warmer.finished.connect(self._warmed)
        self.warmer.start()
        self.spark_state.setText("Spark is warming up in the background, so that exports start "
                                 "at once (an export started now waits for it)")

    def _warmed(self, code: int, _status) -> None:
        if code == 0:
            self.spark_state.setText("Spark is warm: local exports start at once")
            return
        self.warm_failed = True
        reason = bytes(self.warmer.readAllStandardError()).decode(errors="replace").strip()
        self.spark_state.setText("Spark could not be kept warm, so each export starts its own: "
                                 + (reason.splitlines()[0] if reason else f"exit {code}"))

    def offer_topics(self) -> None:
        """The open cluster's topics for the topic field's picker: those the Topics tab lists
        (no system or retry topics; dead-letter topics stay, they are worth exporting)."""
        names = sorted(t for t in self.model.topic_totals
                       if not (self.model.is_internal_topic(t) or t.startswith("%RETRY%")))
        self.topic_names.setStringList(names)

    def _follow_topic(self, topic: str) -> None:
        if self.out.text() == self._auto_out and topic.strip():
            self._auto_out = os.path.join(EXPORTS_FOLDER, topic.strip())
            self.out.setText(self._auto_out)

    def choose_folder(self) -> None:
        start = self.out.text().strip() or EXPORTS_FOLDER
        folder = QFileDialog.getExistingDirectory(self, "Export into this folder",
                                                  os.path.dirname(start.rstrip(os.sep)))
        if folder:
            self.out.setText(folder)

    def prefill(self, topic: str, keys: str = "") -> None:
        """Opened from a topic or a query: the form starts from it."""
        self.topic.setText(topic)
        self.keys.setText(keys)

    def start(self) -> None:
        topic = self.topic.text().strip()
        if not topic or not self.model.namesrv_addr:
            self.model.message.emit("open a cluster and give a topic to export")
            return
        if self.running():
            self.model.message.emit("an export is running: cancel it, or wait for it to end")
            return
        self._drop_events()
        self._read = 0
        self.output = None
        args = ["-m", "rocketdesk.cli", "export", "-n", self.model.namesrv_addr, "-t", topic,
                "--format", self.format.currentText(), "--out", self.out.text(), "--master",
                self.master.text() or "local[*]"]
        if warm_enabled() and not self.warm_failed and (self.master.text() or "local[*]").startswith("local"):
            args.append("--warm")
        if self.tags.text().strip() not in ("", "*"):
            args += ["--tags", self.tags.text().strip()]
        if self.keys.text().strip():
            args += ["--keys", self.keys.text().strip()]
        if self.since.text().strip():
            args += ["--from", self.since.text().strip()]
        if self.until.text().strip():
            args += ["--to", self.until.text().strip()]
        if self.continuous.isChecked():
            args.append("--continuous")
        self._topic, self._continuous = topic, self.continuous.isChecked()
        self._exported, self._total = 0, None
        self.launch = ExportLaunch(args, {**os.environ, PARENT_ENV: str(os.getpid())})
        self.events_path = self.launch.events_path
        try:
            self.launch.start()
        except OSError as exc:
            self._drop_events()
            self.status.setText(f"the export could not start: {exc}")
            return
        self.state = "running"
        self.progress.setRange(0, 0)
        self._started = time.monotonic()
        self._planned = False
        self._on_warm = False  # until its "started" event says it runs on the warm service
        self.status.setText("starting Spark…")
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.timer.start()

    def running(self) -> bool:
        return self.launch is not None and self.launch.running()

    def cancel(self) -> None:
        if self.running():
            self.state = "cancelling"
            self.status.setText("cancelling…")
            # SIGTERM (a request file on Windows): the job cancels Spark's work and cleans up.
            self.launch.terminate()

    def may_close(self) -> bool:
        """Asked when the console closes. A running export goes on without the console or is
        cancelled (its launcher cleans up either way: nothing kills it), or the console stays."""
        if self.launch is None:
            return True
        # The question runs an event loop of its own: no tick may end the export under it.
        self.timer.stop()
        self.poll_events()  # (one that ended since the last tick is read to its end now)
        launch = self.launch
        if launch is None:
            return True
        if self.state == "cancelling":  # asked already: it ends on its own
            choice = "keep"
        else:
            choice = ask_on_close(self, self._running_text(), self._continuous)
        if choice == "stay":
            self.timer.start()
            return False
        if choice == "cancel":
            launch.terminate()
        launch.let_go()  # (it writes on into the files it holds; nobody reads them)
        self.launch = self.events_path = None
        return True

    def _running_text(self) -> str:
        if self._continuous:
            return f"The export of {self._topic} keeps its folder up to date with the topic."
        done = (f" ({self._exported:,} of {self._total:,} messages so far)"
                if self._total is not None else "")
        return f"The export of {self._topic} is running{done}."

    def poll_events(self) -> None:
        """The timer's tick: the events written since the last, then whether the launcher ended."""
        self._read_events()
        code = self.launch.poll() if self.launch is not None else None
        if code is not None:
            self.finished(code)

    def _read_events(self) -> None:
        if not self.events_path:
            return
        if self.state == "running" and not self._planned:
            # Spark's start takes from seconds to a minute: the time so far, not a guess.
            waited = time.monotonic() - self._started
            self.status.setText(f"planning the export on the warm Spark… {waited:.0f} s" if self._on_warm
                                else f"starting Spark… {waited:.0f} s (a first export in a while "
                                     "starts slowest)")
        try:
            with open(self.events_path, encoding="utf-8") as handle:
                handle.seek(self._read)
                lines = handle.readlines()
                self._read = handle.tell()
        except FileNotFoundError:
            return
        handled = False
        for line in lines:
            if not line.endswith("\n"):
                self._read -= len(line.encode())
                break
            self.on_event(json.loads(line))
            handled = True
        if handled and self.isVisible():
            # The export's process writes its job record with each event it writes here: the
            # table follows now, not up to 2 s later at "0 of N" under a line that says more.
            self.refresh_jobs()

    def on_event(self, event: dict) -> None:
        kind = event["event"]
        if kind == "started":
            self._on_warm = bool(event.get("warm"))
        elif kind == "planned":
            self._planned = True
            self._total = event["total"]
            self.progress.setRange(0, max(event["total"], 1))
            self.status.setText(f"{event['total']:,} messages to export")
        elif kind == "progress" and event.get("lag") is not None:  # a continuous export
            self.progress.setRange(0, 0)
            self.status.setText(f"kept up to date: {event['exported']:,} messages exported so far, "
                                f"{event['lag']:,} behind the topic")
        elif kind == "progress" and event.get("total"):
            self._exported = event["exported"]
            self.progress.setValue(event["exported"])
            eta = event.get("etaSeconds")
            self.status.setText(f"exported {event['exported']:,} of {event['total']:,}, "
                                f"{event.get('rate', 0):,} msg/s" + (f", ETA {eta:.0f} s" if eta else ""))
        elif kind == "verifying":
            self.status.setText("written; checking the output against the plan…")
        elif kind == "finished":
            self.progress.setRange(0, 1)
            self.progress.setValue(1)
            out = event.get("out") or ""
            self.output = out
            link = f'<a href="{QUrl.fromLocalFile(out).toString()}">{out}</a>'
            if event.get("continuous"):
                self.status.setText(f"stopped keeping {link} up to date: {event.get('exported', 0):,} "
                                    f"messages exported while it ran, {event.get('totalInOutput', 0):,} "
                                    "there in all; exporting into it again resumes where it stopped")
            else:
                self.status.setText(f"exported {event.get('exported', 0):,} messages to {link}")
        elif kind in ("failed", "cancelled"):
            self.status.setText(kind if kind == "cancelled" else f"failed: {event.get('error')}")

    def _drop_events(self) -> None:
        # The events file is this view's channel from one export's process, read to its end
        # when that process ends: nothing reads it afterwards, so it must not pile up in /tmp.
        if self.launch is not None:
            self.launch.remove()
            self.launch = None
        self.events_path = None

    def finished(self, code: int) -> None:
        self.timer.stop()
        self._read_events()  # the last ones, written just before it ended
        error = self.launch.last_error() if self.launch is not None else ""
        self._drop_events()
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        if code == 0:
            # (also when it finished before a cancel reached it: the output is complete)
            self.state = "finished"
            if self.output is None:  # its last events were not copied here (a full disk)
                self.status.setText("the export finished: the Exports table below has its summary")
        elif self.state == "cancelling" or code == 130:
            self.state = "cancelled"
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.status.setText("cancelled")
        else:
            self.state = "failed"
            if "failed" not in self.status.text():
                self.status.setText(f"the export failed: {error}" if error else "the export failed")
        self.model.message.emit(f"export {self.state}")
