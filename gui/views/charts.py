"""Live charts from one-second broker samples: put and get TPS, CommitLog positions (max,
flushed, dispatched) and replication lag. A broker that stops answering leaves a gap."""

from __future__ import annotations

import time

import pyqtgraph as pg
from PySide6.QtWidgets import QComboBox, QGridLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from gui.models.display import latency_bucket_label, thin_labels
from gui.views.plot_style import apply_theme, say_when_empty, time_plot

MIB, KIB = 2**20, 2**10
WINDOWS = {"last 5 min": 300, "last 15 min": 900, "last 60 min": 3600}


class ChartsView(QWidget):
    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.window = QComboBox()
        self.window.addItems(list(WINDOWS))
        self.fresh = QLabel("no samples yet")
        top.addWidget(QLabel("Show"))
        top.addWidget(self.window)
        top.addStretch(1)
        top.addWidget(self.fresh)
        layout.addLayout(top)
        self.tps = time_plot("Put TPS per broker (messages/s, 10 s average)", "msg/s")
        self.get_tps = time_plot("Get TPS per broker (messages/s, 10 s average)", "msg/s")
        # Byte positions in MiB and lag in KiB: axes of "2e+07" bytes read as nothing.
        self.positions = time_plot("CommitLog positions: max (solid), flushed (dashed), dispatched (dotted)",
                                    "MiB")
        # Its lines climb to the top right: the legend sits top left, over nothing.
        self.positions.getPlotItem().legend.setOffset((10, 10))
        self.lag = time_plot("HA: how far the slowest slave is behind its master", "KiB")
        self.latency = pg.PlotWidget(title="Put latency, last second, all brokers (puts per bucket)")
        self.latency.setBackground("w")
        self.latency_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush="#1f77b4")
        self.latency.addItem(self.latency_bars)
        self.latency.setLabel("bottom", "how long a put took: ms, or s where marked")
        self.topic_tps = time_plot("Put TPS per topic, the five busiest (messages/s, every 5 s)", "msg/s")
        self.group_lag = time_plot("Consumer lag per group (messages not yet consumed, every 5 s)",
                                    "msgs")
        explain = {
            self.tps: "Messages stored per second by each broker, averaged over its last 10 s "
                      "(the broker's putTps). Slaves store nothing themselves.",
            self.topic_tps: "Messages added per second to each topic (its queues' max offsets, "
                            "sampled every 5 s), for the five busiest topics.",
            self.get_tps: "Messages handed to consumers per second by each broker (getTransferedTps).",
            self.group_lag: "Messages stored but not yet committed as consumed, per consumer group.",
            self.positions: "CommitLog positions in MiB: max = written (solid), flushed = on disk "
                            "(dashed), dispatched = in ConsumeQueues and the index (dotted), "
                            "slave ack = acknowledged by a slave (dash-dot).",
            self.lag: "Bytes written on the master that its slowest slave has not acknowledged.",
            self.latency: "Puts in the last second by how long the store took to append them "
                          "(the store's putMessageDistributeTime buckets).",
        }
        for plot, text in explain.items():
            plot.setToolTip(text)
        grid = QGridLayout()
        for index, plot in enumerate((self.tps, self.topic_tps, self.get_tps, self.group_lag,
                                      self.positions, self.lag, self.latency)):
            grid.addWidget(plot, index // 2, index % 2)
        layout.addLayout(grid, 1)
        self.curves: dict[tuple, pg.PlotDataItem] = {}
        model.sampled.connect(self.redraw)
        self.window.currentTextChanged.connect(lambda _: self.redraw({}))

    def _curve(self, plot, key: tuple, name: str, color: str, style=None) -> pg.PlotDataItem:
        curve = self.curves.get(key)
        if curve is None:
            pen = pg.mkPen(color, width=2, style=style) if style else pg.mkPen(color, width=2)
            curve = self.curves[key] = plot.plot([], [], name=name, pen=pen, connect="finite")
            if style is not None:
                # A broker once in the legend, by its colour (its solid line); the line styles
                # are in the title. The name stays for the read-out under the mouse.
                plot.getPlotItem().legend.removeItem(curve)
        return curve

    def points(self, broker: str, field: str, per: float = 1) -> tuple[list[float], list[float]]:
        """(seconds ago, value / ``per``) with NaN where a sample is missing, so lines show
        gaps (``per``: 2**20 for MiB)."""
        window = WINDOWS[self.window.currentText()]
        now = time.time()
        xs, ys, last = [], [], None
        for sample in self.model.samples.get(broker, ()):
            age = sample["time"] - now
            if -age > window:
                continue
            if last is not None and sample["time"] - last > 3:
                xs.append(age - 0.5)
                ys.append(float("nan"))
            value = sample.get(field)
            xs.append(age)
            ys.append(float("nan") if value is None else value / per)
            last = sample["time"]
        return xs, ys

    def redraw(self, latest: dict) -> None:
        from PySide6.QtCore import Qt

        brokers = sorted(self.model.samples)
        colors = self.model.colors
        with_slave = self._masters_with_slaves()
        for broker in brokers:
            color = colors.color(broker)
            self._curve(self.tps, ("tps", broker), broker, color).setData(*self.points(broker, "putTps"))
            self._curve(self.get_tps, ("get", broker), broker, color).setData(*self.points(broker, "getTps"))
            for field, style in (("max", None), ("flushed", Qt.PenStyle.DashLine),
                                 ("dispatched", Qt.PenStyle.DotLine)):
                name = broker if field == "max" else f"{broker} {field}"
                self._curve(self.positions, ("pos", broker, field), name, color, style).setData(
                    *self.points(broker, field, MIB))
            if broker in with_slave:  # a master without a slave has no replication to chart
                self._curve(self.lag, ("lag", broker), broker, color).setData(
                    *self.points(broker, "haLag", KIB))
            if any(s.get("role") in ("SYNC_MASTER", "ASYNC_MASTER") for s in self.model.samples[broker]):
                self._curve(self.positions, ("pos", broker, "ack"), f"{broker} slave ack", color,
                            Qt.PenStyle.DashDotLine).setData(*self.points(broker, "haAck", MIB))
        self._draw_latency()
        window = WINDOWS[self.window.currentText()]
        now = time.time()
        rates = self.model.topic_tps()
        busiest = sorted(rates, key=lambda t: -(rates[t][-1][1] if rates[t] else 0))[:5]
        for key, curve in list(self.curves.items()):
            if key[0] == "topic" and key[1] not in busiest:
                curve.setData([], [])
        for topic in busiest:
            recent = [(t - now, v) for t, v in rates[topic] if now - t <= window]
            self._curve(self.topic_tps, ("topic", topic), topic, colors.color(topic)).setData(
                [x for x, _ in recent], [y for _, y in recent])
        for group, points in sorted(self.model.lag.items()):
            recent = [(t - now, v) for t, v in points if now - t <= window]
            self._curve(self.group_lag, ("group", group), group, colors.color(group)).setData(
                [x for x, _ in recent], [y for _, y in recent])
        say_when_empty(self.group_lag, None if self.model.lag else
                       "no consumer group yet: each group's lag shows here once it consumes", window)
        say_when_empty(self.lag, None if with_slave else
                       "no slave in this cluster: nothing is replicated", window)
        say_when_empty(self.topic_tps, None if busiest else "no topic has messages yet", window)
        if latest:
            self.fresh.setText("updated " + time.strftime("%H:%M:%S %Z"))

    def plots(self) -> list:
        return [self.tps, self.get_tps, self.positions, self.lag, self.latency, self.topic_tps,
                self.group_lag]

    def apply_theme(self, dark: bool) -> None:
        """Chart backgrounds and legends that match the window's theme."""
        apply_theme(self.plots(), dark)

    def _masters_with_slaves(self) -> set[str]:
        """Master node names (``broker-a-0``) whose group has a slave node."""
        groups = {row.get("group") for row in self.model.nodes
                  if str(row.get("role", "")).startswith("SLAVE") and row.get("group")}
        named = {f"{row['name'].rsplit('-', 1)[0]}" for row in self.model.nodes
                 if str(row.get("role", "")).startswith("SLAVE")}
        return {row["name"] for row in self.model.nodes if row.get("kind") == "broker"
                and not str(row.get("role", "")).startswith("SLAVE")
                and (row.get("group") in groups or row["name"].rsplit("-", 1)[0] in named)}

    def latency_last_second(self) -> list[tuple[str, int]]:
        """Puts per latency bucket in the last second, summed over brokers."""
        totals: dict[str, int] = {}
        labels: list[str] = []
        for samples in self.model.samples.values():
            if len(samples) < 2:
                continue
            before, after = dict(samples[-2].get("latency") or []), samples[-1].get("latency") or []
            for label, count in after:
                if label not in totals:
                    labels.append(label)
                totals[label] = totals.get(label, 0) + max(0, count - before.get(label, 0))
        return [(label, totals[label]) for label in labels]

    def _draw_latency(self) -> None:
        buckets = self.latency_last_second()
        self.latency_bars.setOpts(x=list(range(len(buckets))), height=[n for _, n in buckets])
        short = [latency_bucket_label(label) for label, _ in buckets]
        self.latency.getAxis("bottom").setTicks([list(enumerate(thin_labels(short, most=13)))])

    def sample_count(self) -> int:
        return sum(len(v) for v in self.model.samples.values())
