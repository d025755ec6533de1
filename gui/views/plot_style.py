"""How every chart of the console looks and reads, the same on the Charts and Load tabs:
counts without SI prefixes, a see-through legend, a read-out under the mouse, a sentence in
an empty chart instead of meaningless axes, and colours that follow the window's theme."""

from __future__ import annotations

import pyqtgraph as pg

from gui.models.display import readout

LIGHT_TEXT, DARK_TEXT = "#333", "#ddd"


def time_plot(title: str, unit: str) -> pg.PlotWidget:
    """A chart of values over the last minutes: ``unit`` on the left, seconds ago below."""
    plot = pg.PlotWidget(title=title)
    plot.setLabel("left", units=unit)
    plot.setLabel("bottom", "seconds ago")
    # Counts read as counts: "1,500 msg/s", never "1.5 kmsg/s" or "x0.001".
    for side in ("left", "bottom"):
        plot.getAxis(side).enableAutoSIPrefix(False)
    plot.setBackground("w")
    # Top right, see-through, so that the lines show under it.
    plot.addLegend(offset=(-10, 10), labelTextColor=LIGHT_TEXT, brush=pg.mkBrush(255, 255, 255, 170))
    plot.showGrid(x=True, y=True, alpha=0.3)
    add_hover(plot, unit)
    return plot


def add_hover(plot: pg.PlotWidget, unit: str) -> None:
    """A vertical line under the mouse and each line's value there, in words."""
    dotted = pg.mkPen("#888", style=pg.QtCore.Qt.PenStyle.DotLine)
    line = pg.InfiniteLine(angle=90, movable=False, pen=dotted)
    label = pg.TextItem("", color=LIGHT_TEXT, fill=pg.mkBrush(255, 255, 255, 200), anchor=(0, 0))
    line.setVisible(False)
    label.setVisible(False)
    plot.addItem(line, ignoreBounds=True)
    plot.addItem(label, ignoreBounds=True)
    plot.hover_readout = label  # (tests read it)

    def moved(position) -> None:
        box = plot.getPlotItem().vb
        if not box.sceneBoundingRect().contains(position):
            line.setVisible(False)
            label.setVisible(False)
            return
        x = box.mapSceneToView(position).x()
        series = []
        for item in plot.getPlotItem().listDataItems():
            name = item.name()
            xs, ys = item.getData()
            if name and xs is not None and len(xs):
                series.append((name, list(xs), list(ys)))
        text = readout(x, series, unit)
        line.setPos(x)
        line.setVisible(bool(text))
        label.setText(text)
        (left, _right), (_bottom, top) = box.viewRange()
        label.setPos(left, top)
        label.setVisible(bool(text))

    plot.scene().sigMouseMoved.connect(moved)
    plot.hover_moved = moved  # (tests drive it without a mouse)


def say_when_empty(plot: pg.PlotWidget, sentence: str | None, seconds: float | None = 300) -> None:
    """A sentence in the middle of an empty chart saying why it is empty, over plain axes (an
    empty chart's automatic range, 0.1 to 0.9 of nothing, reads as data): no numbers on the
    left, and below the time window of ``seconds`` or, for a chart not over time (None), none.
    ``sentence`` None when the chart has data: the sentence goes, the axes follow the data."""
    note = getattr(plot, "empty_note", None)
    axes = [plot.getAxis("left")] + ([plot.getAxis("bottom")] if seconds is None else [])
    if sentence is None:
        if note is not None and note.isVisible():
            note.setVisible(False)
            for axis in (plot.getAxis("left"), plot.getAxis("bottom")):
                axis.setStyle(showValues=True)
            plot.enableAutoRange()
        return
    width = seconds or 1
    if note is None:
        note = plot.empty_note = pg.TextItem(anchor=(0.5, 0.5), color="#757575")
        plot.addItem(note, ignoreBounds=True)
    elif note.isVisible() and note.textItem.toPlainText() == sentence and note.pos().x() == -width / 2:
        return  # said already (charts redraw every second)
    for axis in axes:
        axis.setStyle(showValues=False)
    plot.setXRange(-width, 0, padding=0)
    plot.setYRange(0, 1, padding=0)
    note.setText(sentence)
    note.setPos(-width / 2, 0.5)
    note.setVisible(True)


def apply_theme(plots: list[pg.PlotWidget], dark: bool) -> None:
    """Backgrounds, legends and read-outs that match the window's theme."""
    text = DARK_TEXT if dark else LIGHT_TEXT
    for plot in plots:
        plot.setBackground("k" if dark else "w")
        legend = plot.getPlotItem().legend
        if legend is not None:
            legend.setLabelTextColor(text)
            legend.setBrush(pg.mkBrush(0, 0, 0, 170) if dark else pg.mkBrush(255, 255, 255, 170))
            # A label keeps the colour it was drawn with until its text is set again.
            for _sample, label in legend.items:
                label.setText(label.text, color=text)
        hover = getattr(plot, "hover_readout", None)
        if hover is not None:
            hover.setColor(text)
            hover.fill = pg.mkBrush(0, 0, 0, 200) if dark else pg.mkBrush(255, 255, 255, 200)
