"""The topology picture's content and layout, without Qt: a box per node, coloured by what it is
doing, and an arrow from each master to its slaves labelled with how far they are behind.

Laid out as a RocketMQ user draws a cluster: the name servers (and the 5.x proxies) in a row on
top, one column per broker group below them, its master first and its slaves under it. The view
(gui/views/topology_picture.py) only paints what this returns, so the layout and the colours are
tested here; the picture changes with every status refresh, so a fault drill (a killed master,
a paused slave) shows in it as it happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.supervisor.figures import human_bytes
from gui.models.display import state_words
from gui.models.overview import HA_LAG_WARNING_BYTES

BOX_WIDTH = 200
BOX_HEIGHT = 88
GAP_X = 40
GAP_Y = 50
MARGIN = 20

# Fill and edge a box gets from its node's state and health: green serving, red died or not
# answering, orange paused, grey stopped.
_LOOKS = {
    "ok": ("#e8f5e9", "#2e7d32"),
    "not answering": ("#ffebee", "#c62828"),
    "died": ("#ffebee", "#c62828"),
    "paused": ("#fff3e0", "#ef6c00"),
    "stopped": ("#eeeeee", "#757575"),
    "starting": ("#e3f2fd", "#1565c0"),
}


@dataclass(slots=True)
class NodeBox:
    name: str
    kind: str  # namesrv, proxy, broker
    x: int
    y: int
    lines: list[str]  # name, what the node is, its address, its state
    fill: str
    edge: str
    tooltip: str
    width: int = BOX_WIDTH
    height: int = BOX_HEIGHT

    def contains(self, x: float, y: float) -> bool:
        return self.x <= x <= self.x + self.width and self.y <= y <= self.y + self.height


@dataclass(slots=True)
class Link:
    """Replication from a master to one of its slaves."""

    source: str
    target: str
    label: str
    color: str
    dashed: bool  # the slave is not replicating (down, paused, or its master is)


@dataclass(slots=True)
class TopologyPicture:
    boxes: list[NodeBox] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    width: int = 0
    height: int = 0
    empty_reason: str = ""

    def box(self, name: str) -> NodeBox | None:
        return next((b for b in self.boxes if b.name == name), None)

    def box_at(self, x: float, y: float) -> NodeBox | None:
        return next((b for b in self.boxes if b.contains(x, y)), None)


def condition(row: dict) -> str:
    """One word for how a node is: its state unless it runs, then its health."""
    state = row.get("state", "")
    if state in ("running", "external"):
        health = row.get("health", "")
        return "not answering" if health == "not answering" else ("ok" if health == "ok"
                                                                  else "starting")
    return state if state in _LOOKS else "stopped"


def _group_of(row: dict) -> str:
    # The supervisor names a broker's group; a cluster run elsewhere has names like broker-a-1.
    return row.get("group") or row.get("name", "?").rsplit("-", 1)[0]


def _is_master(row: dict) -> bool:
    broker_id = row.get("brokerId")
    if broker_id is not None:
        return int(broker_id) == 0
    return not str(row.get("role", "")).startswith("SLAVE")


def _box(row: dict, x: int, y: int) -> NodeBox:
    state = condition(row)
    fill, edge = _LOOKS[state]
    what = {"namesrv": "name server", "proxy": "proxy (5.x clients)"}.get(
        row.get("kind", ""), str(row.get("role", "")).replace("_", " ").lower())
    status = {"ok": "serving", "starting": "starting"}.get(state, state)
    lines = [row.get("name", "?"), what, row.get("address") or "-", status]
    tooltip = (f"{row.get('name')}: {what} at {row.get('address') or '-'}; "
               f"{state_words(row.get('state', ''))}; health {row.get('health', '-')}")
    return NodeBox(row.get("name", "?"), row.get("kind", ""), x, y, lines, fill, edge, tooltip)


def _link(master: dict, slave: dict, sample: dict | None, slaves: int) -> Link:
    serving = condition(master) == "ok" and condition(slave) == "ok"
    lag = (sample or {}).get("haLag")
    if not serving:
        label, color = "not replicating", "#c62828"
    elif lag is None:
        label, color = "HA lag unknown", "#757575"
    else:
        # The master reports its slowest slave's lag (haSlaveFallBehindBytes): with several
        # slaves the figure is an upper bound for each, and says so.
        bound = f"≤ {human_bytes(int(lag))} (slowest of {slaves})" if slaves > 1 \
            else human_bytes(int(lag))
        label = f"HA lag {bound}"
        color = "#ef6c00" if lag > HA_LAG_WARNING_BYTES else "#2e7d32"
    return Link(master["name"], slave["name"], label, color, dashed=not serving)


def build_topology(rows: list[dict], samples: dict | None = None) -> TopologyPicture:
    """The picture of ``rows`` (the model's node rows); ``samples``: broker node name -> its
    latest sample (for the masters' HA lag)."""
    picture = TopologyPicture()
    if not rows:
        picture.empty_reason = ("No cluster open: create one from a profile or a new topology, "
                                "pick one, or connect to a name server.")
        return picture
    samples = samples or {}
    top = [r for r in rows if r.get("kind") in ("namesrv", "proxy")]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("kind") == "broker":
            groups.setdefault(_group_of(row), []).append(row)
    x = MARGIN
    for row in top:
        picture.boxes.append(_box(row, x, MARGIN))
        x += BOX_WIDTH + GAP_X
    width = x
    brokers_y = MARGIN + (BOX_HEIGHT + GAP_Y if top else 0)
    x = MARGIN
    bottom = brokers_y
    for name in sorted(groups):
        members = sorted(groups[name], key=lambda r: (not _is_master(r), r.get("name", "")))
        master = members[0] if _is_master(members[0]) else None
        y = brokers_y
        for row in members:
            picture.boxes.append(_box(row, x, y))
            if master is not None and row is not master:
                picture.links.append(_link(master, row, samples.get(master["name"]),
                                           len(members) - 1))
            y += BOX_HEIGHT + GAP_Y
        bottom = max(bottom, y - GAP_Y)
        x += BOX_WIDTH + GAP_X
    picture.width = max(width, x) - GAP_X + MARGIN
    picture.height = (bottom if groups else MARGIN + BOX_HEIGHT) + MARGIN
    return picture
