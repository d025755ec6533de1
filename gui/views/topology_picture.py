"""The topology picture: the boxes and arrows gui/models/topology.py lays out, painted; a click
selects a node, a right click (or the menu key) offers its actions."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QPainterPath, QPen, QPolygonF
from PySide6.QtWidgets import QGraphicsScene, QGraphicsView, QMenu

from gui.models.topology import TopologyPicture

# What the menu offers on a node, as (action, label); "logs" opens its log.
NODE_ACTIONS = [("start", "Start"), ("stop", "Stop…"), ("restart", "Restart"),
                ("kill", "Kill (SIGKILL)…"), ("pause", "Pause (SIGSTOP)"),
                ("resume", "Resume (SIGCONT)"), ("logs", "Show its log")]
SELECTED_EDGE = "#1565c0"


class TopologyView(QGraphicsView):
    """Paints a ``TopologyPicture``; ``node_clicked(name)`` on a click, ``action_requested(action,
    name)`` from a node's menu."""

    node_clicked = Signal(str)
    action_requested = Signal(str, str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.setMinimumHeight(160)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.picture = TopologyPicture()
        self.selected: str | None = None
        self.text_color = QColor("#202020")

    # -- painting ------------------------------------------------------------------------------
    def show_picture(self, picture: TopologyPicture) -> None:
        self.picture = picture
        self._paint()

    def select(self, name: str | None) -> None:
        if name != self.selected:
            self.selected = name
            self._paint()

    def set_dark(self, dark: bool) -> None:
        self.text_color = QColor("#e0e0e0" if dark else "#202020")
        self._paint()

    def _paint(self) -> None:
        scene = self.scene()
        scene.clear()
        picture = self.picture
        if not picture.boxes:
            text = scene.addText(picture.empty_reason or "No nodes.")
            text.setDefaultTextColor(self.text_color)
            text.setTextWidth(max(self.viewport().width() - 40, 300))
            scene.setSceneRect(scene.itemsBoundingRect())
            return
        for link in picture.links:
            self._paint_link(link)
        bold = QFont(self.font())
        bold.setBold(True)
        for box in picture.boxes:
            selected = box.name == self.selected
            pen = QPen(QColor(SELECTED_EDGE if selected else box.edge), 4 if selected else 2)
            rect = scene.addRect(QRectF(box.x, box.y, box.width, box.height), pen,
                                 QBrush(QColor(box.fill)))
            rect.setToolTip(box.tooltip)
            rect.setData(0, box.name)
            for index, line in enumerate(box.lines):
                text = scene.addText(line, bold if index == 0 else self.font())
                last = index == len(box.lines) - 1  # the state, in the state's colour
                text.setDefaultTextColor(QColor(box.edge if last else "#202020"))
                text.setPos(box.x + 6, box.y + 2 + index * 20)
                text.setToolTip(box.tooltip)
                # Long addresses stay inside their box.
                text.setTextWidth(box.width - 8)
        scene.setSceneRect(QRectF(0, 0, picture.width, picture.height))

    def _paint_link(self, link) -> None:
        source, target = self.picture.box(link.source), self.picture.box(link.target)
        if source is None or target is None:
            return
        scene = self.scene()
        pen = QPen(QColor(link.color), 2)
        if link.dashed:
            pen.setStyle(Qt.PenStyle.DashLine)
        # Down the column's left side, into the slave's left edge: never through another slave.
        rail = source.x - 12
        start = QPointF(source.x, source.y + source.height / 2)
        end = QPointF(target.x, target.y + target.height / 2)
        path = QPainterPath(start)
        path.lineTo(rail, start.y())
        path.lineTo(rail, end.y())
        path.lineTo(end)
        scene.addPath(path, pen)
        head = QPolygonF([end, QPointF(end.x() - 9, end.y() - 5), QPointF(end.x() - 9, end.y() + 5)])
        scene.addPolygon(head, QPen(QColor(link.color)), QBrush(QColor(link.color)))
        label = scene.addText(link.label)
        label.setDefaultTextColor(QColor(link.color))
        label.setPos(target.x + 4, target.y - 26)
        label.setToolTip(f"replication {link.source} → {link.target}: {link.label}")

    # -- input ---------------------------------------------------------------------------------
    def _name_at(self, position) -> str | None:
        point = self.mapToScene(position)
        box = self.picture.box_at(point.x(), point.y())
        return box.name if box else None

    def mousePressEvent(self, event) -> None:
        name = self._name_at(event.position().toPoint())
        if name is not None and event.button() == Qt.MouseButton.LeftButton:
            self.node_clicked.emit(name)
        super().mousePressEvent(event)

    def contextMenuEvent(self, event) -> None:
        name = self._name_at(event.pos()) or self.selected
        if name is None:
            return
        self.node_clicked.emit(name)
        menu = self.node_menu(name)
        menu.exec(event.globalPos())

    def node_menu(self, name: str) -> QMenu:
        menu = QMenu(self)
        menu.setTitle(name)
        for action, label in NODE_ACTIONS:
            item = menu.addAction(label)
            item.triggered.connect(lambda _=False, a=action: self.action_requested.emit(a, name))
        return menu

    def keyPressEvent(self, event) -> None:
        # Tab-free keyboard use: arrows move the selection along the picture's boxes.
        names = [b.name for b in self.picture.boxes]
        key = event.key()
        if names and key in (Qt.Key.Key_Right, Qt.Key.Key_Down, Qt.Key.Key_Left, Qt.Key.Key_Up):
            step = 1 if key in (Qt.Key.Key_Right, Qt.Key.Key_Down) else -1
            index = names.index(self.selected) if self.selected in names else -step
            name = names[(index + step) % len(names)]
            self.node_clicked.emit(name)
            box = self.picture.box(name)
            if box is not None:
                self.ensureVisible(box.x, box.y, box.width, box.height)
            return
        super().keyPressEvent(event)
