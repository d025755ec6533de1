"""The load generator: producers and consumers as subprocesses (``python -m rocketdesk.loadgen``),
their TPS and response times charted live, and the producer's latency-fault table."""

from __future__ import annotations

import json
import sys
import time

import pyqtgraph as pg
from PySide6.QtCore import QProcess
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from common.platform import processes
from gui.models.display import thin_labels
from gui.views.plot_style import apply_theme, say_when_empty, time_plot

WINDOW = 600  # seconds of each load process charted


class LoadProcess:
    """One running load process and what it reported."""

    def __init__(self, name: str, process: QProcess) -> None:
        self.name = name
        self.process = process
        self.seconds: list[dict] = []
        self.buffer = b""


class LoadView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.loads: dict[str, LoadProcess] = {}
        layout = QHBoxLayout(self)
        controls = QVBoxLayout()
        producer_box = QGroupBox("Producer")
        form = QFormLayout(producer_box)
        self.topic = QLineEdit("LoadTopic")
        self.rate = QSpinBox()
        self.rate.setRange(0, 1_000_000)
        self.rate.setValue(500)
        self.rate.setSpecialValueText("as fast as possible")
        self.threads = QSpinBox()
        self.threads.setRange(1, 256)
        self.threads.setValue(4)
        self.size = QSpinBox()
        self.size.setRange(1, 4 * 1024 * 1024)
        self.size.setValue(1024)
        self.batch = QSpinBox()
        self.batch.setRange(0, 1024)
        self.mode = QComboBox()
        self.mode.addItems(["sync", "async", "oneway"])
        self.keys = QCheckBox("a key per message")
        self.orderly = QCheckBox("orderly (one queue per sender)")
        self.tags = QLineEdit()
        for label, widget in (("topic", self.topic), ("rate (msg/s)", self.rate), ("senders", self.threads),
                              ("body size", self.size), ("batch", self.batch), ("mode", self.mode),
                              ("tags", self.tags), ("", self.keys), ("", self.orderly)):
            form.addRow(label, widget)
        start_producer = QPushButton("Start producer")
        start_producer.clicked.connect(self.start_producer)
        form.addRow(start_producer)
        controls.addWidget(producer_box)
        consumer_box = QGroupBox("Consumer")
        cform = QFormLayout(consumer_box)
        self.group = QLineEdit("load-consumers")
        self.slow = QSpinBox()
        self.slow.setRange(0, 10_000)
        self.slow.setSuffix(" ms per message")
        self.fail_every = QSpinBox()
        self.fail_every.setRange(0, 1000)
        self.fail_every.setSpecialValueText("never fail")
        for label, widget in (("group", self.group), ("slowness", self.slow),
                              ("fail every Nth", self.fail_every)):
            cform.addRow(label, widget)
        start_consumer = QPushButton("Start consumer")
        start_consumer.clicked.connect(self.start_consumer)
        cform.addRow(start_consumer)
        controls.addWidget(consumer_box)
        stop = QPushButton("Stop all load")
        stop.clicked.connect(self.stop_all)
        controls.addWidget(stop)
        self.running = QLabel("no load running")
        self.running.setWordWrap(True)  # (a failing load says why, at length)
        controls.addWidget(self.running)
        controls.addStretch(1)
        layout.addLayout(controls, 1)
        charts = QVBoxLayout()
        self.tps = time_plot("TPS of each load process (messages/s)", "msg/s")
        self.rt = pg.PlotWidget(title="Producer response times, last second (sends per bucket, ms)")
        self.rt_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush="#1f77b4")
        self.rt.addItem(self.rt_bars)
        self.rt.setLabel("left", units="sends")
        for side in ("left", "bottom"):
            self.rt.getAxis(side).enableAutoSIPrefix(False)
        self.apply_theme(False)
        self._say_what_is_empty()
        charts.addWidget(self.tps, 2)
        charts.addWidget(self.rt, 1)
        charts.addWidget(QLabel("Producer latency-fault table: brokers the producers avoid for a while "
                                "after a slow or failed send (empty while every broker is fine)"))
        self.faults = QTableWidget(0, 4)
        self.faults.setHorizontalHeaderLabels(["broker", "current latency (ms)", "not available until",
                                               "available"])
        # Headers and values whole, however narrow the default columns were.
        self.faults.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.faults.horizontalHeader().setStretchLastSection(True)
        self.faults.verticalHeader().setVisible(False)
        charts.addWidget(self.faults, 1)
        layout.addLayout(charts, 2)
        self.curves: dict[str, pg.PlotDataItem] = {}

    def apply_theme(self, dark: bool) -> None:
        """Chart backgrounds that match the window's theme (as the Charts tab's)."""
        apply_theme([self.tps, self.rt], dark)

    def _say_what_is_empty(self) -> None:
        producers = any(name.startswith("producer") for name in self.loads)
        say_when_empty(self.tps, None if self.loads else
                       "no load yet: start a producer or a consumer on the left", WINDOW)
        say_when_empty(self.rt, None if producers else
                       "no producer yet: its sends' response times show here", None)

    def _start(self, name: str, args: list[str]) -> None:
        if not self.model.namesrv_addr:
            self.model.message.emit("open a cluster first")
            return
        process = QProcess(self)
        process.setProgram(sys.executable)
        process.setArguments(["-m", "rocketdesk.loadgen", *args, "-n", self.model.namesrv_addr])
        load = LoadProcess(name, process)
        process.readyReadStandardOutput.connect(lambda: self._read(load))
        process.finished.connect(lambda *_: self._finished(load))
        self.loads[name] = load
        process.start()
        self._update_running()

    def start_producer(self) -> None:
        if not self.topic.text().strip():
            self.model.message.emit("give the topic to send to")
            return
        args = ["producer", "-t", self.topic.text().strip(), "--rate", str(self.rate.value()), "-w",
                str(self.threads.value()), "-s", str(self.size.value()), "--batch", str(self.batch.value()),
                "--mode", self.mode.currentText()]
        if self.keys.isChecked():
            args.append("-k")
        if self.orderly.isChecked():
            args.append("--orderly")
        if self.tags.text().strip():
            args += ["--tags", self.tags.text().strip()]
        self._start(f"producer {len([n for n in self.loads if n.startswith('producer')]) + 1}", args)

    def start_consumer(self) -> None:
        if not self.topic.text().strip() or not self.group.text().strip():
            self.model.message.emit("give the topic to consume and the consumer group")
            return
        args = ["consumer", "-t", self.topic.text().strip(), "-g", self.group.text().strip(), "--slow-ms",
                str(self.slow.value()), "--fail-every", str(self.fail_every.value())]
        self._start(f"consumer {len([n for n in self.loads if n.startswith('consumer')]) + 1}", args)

    def stop_all(self) -> None:
        for load in self.loads.values():
            if load.process.state() != QProcess.ProcessState.NotRunning:
                # SIGTERM, or a request file on Windows, where QProcess.terminate posts a
                # WM_CLOSE that a console program never sees.
                if load.process.processId() > 0:
                    processes.terminate(load.process.processId())
                else:
                    load.process.kill()  # still starting: nothing of it to stop in order

    def _finished(self, load: LoadProcess) -> None:
        process = load.process
        if process.exitStatus() == QProcess.ExitStatus.NormalExit and process.exitCode() != 0:
            # (a stop asked for ends it with 0): say why, in the process's own last line
            said = bytes(process.readAllStandardError()).decode("utf-8", "replace").strip()
            why = said.splitlines()[-1] if said else f"exit code {process.exitCode()}"
            self.model.message.emit(f"{load.name} ended: {why}")
        self._update_running()

    def _update_running(self) -> None:
        live = []
        for name, lp in self.loads.items():
            if lp.process.state() == QProcess.ProcessState.NotRunning:
                continue
            latest = lp.seconds[-1] if lp.seconds else {}
            failed = latest.get("failures") or 0
            if failed:  # a load whose every send fails must not look like a quiet one
                error = latest.get("error")
                live.append(f"{name} ({failed:,} failed in the last second"
                            f"{': ' + error if error else ''})")
            else:
                live.append(name)
        self.running.setText("running: " + ", ".join(live) if live else "no load running")

    def _read(self, load: LoadProcess) -> None:
        load.buffer += bytes(load.process.readAllStandardOutput())
        *lines, load.buffer = load.buffer.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "second":
                load.seconds.append(event)
                self._redraw(load, event)
                self._update_running()

    def _redraw(self, load: LoadProcess, latest: dict) -> None:
        now = time.time()
        for name, lp in sorted(self.loads.items()):
            curve = self.curves.get(name)
            if curve is None:
                pen = pg.mkPen(self.model.colors.color(name), width=2)
                curve = self.curves[name] = self.tps.plot([], [], name=name, pen=pen, connect="finite")
            recent = [s for s in lp.seconds[-WINDOW:] if now - s["time"] <= WINDOW]
            curve.setData([s["time"] - now for s in recent], [s["tps"] for s in recent])
        self._say_what_is_empty()
        if load.name.startswith("producer"):
            self.rt_bars.setOpts(x=list(range(len(latest["histogram"]))), height=latest["histogram"])
            labels = [f"≤{b}" for b in latest["buckets"]] + [f">{latest['buckets'][-1]}"]
            self.rt.getAxis("bottom").setTicks([list(enumerate(thin_labels(labels)))])
            faults = latest.get("faults") or []
            self.faults.setRowCount(len(faults))
            for r, item in enumerate(faults):
                until = time.strftime("%H:%M:%S", time.localtime(item["notAvailableUntil"] / 1000))
                for c, value in enumerate([item["brokerName"], f"{item['currentLatency']:.0f}", until,
                                           "yes" if item["available"] else "NO"]):
                    self.faults.setItem(r, c, QTableWidgetItem(value))

    def total_seconds(self) -> int:
        return sum(len(lp.seconds) for lp in self.loads.values())
