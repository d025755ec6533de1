"""Where clusters live on disk and what is remembered about their nodes.

``<data dir>/clusters/<name>/cluster.json`` lists every node (kind, ports, files, pid and the
process's start time, so a reused pid is never mistaken for our node); each node has a folder
with its .conf, its log and its store. Another process (a second CLI call, the console after a
restart) reads the same file and reattaches.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import platformdirs
import psutil

from cluster.supervisor.errors import ClusterNotFoundError
from common.platform.files import read_text, replace_file

HOME_ENV = "ROCKETDESK_HOME"


def data_root() -> Path:
    """``$ROCKETDESK_HOME`` or the platform's user data folder for RocketDesk."""
    override = os.environ.get(HOME_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir("rocketdesk", "RocketDesk"))


def clusters_dir() -> Path:
    return data_root() / "clusters"


@dataclass(slots=True)
class NodeState:
    name: str
    kind: str  # "namesrv", "broker" or "proxy"
    port: int
    dir: str
    group: str = ""
    broker_id: int = 0
    role: str = ""  # ASYNC_MASTER, SYNC_MASTER or SLAVE
    flush: str = ""
    ha_port: int = 0
    pid: int = 0
    create_time: float = 0.0
    started_at: float = 0.0
    paused: bool = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def conf_path(self) -> str:
        return os.path.join(self.dir, "node.conf")

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, "node.log")

    @property
    def store_dir(self) -> str:
        return os.path.join(self.dir, "store")

    def process(self) -> psutil.Process | None:
        """The node's live process, or None (never another process that reused the pid)."""
        if not self.pid:
            return None
        try:
            process = psutil.Process(self.pid)
            if abs(process.create_time() - self.create_time) > 1.0:
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return process
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - 16384))
                text = handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass(slots=True)
class ClusterState:
    name: str
    dir: str
    cluster: str = "DefaultCluster"
    spec_toml: str = ""
    created_at: float = field(default_factory=time.time)
    nodes: list[NodeState] = field(default_factory=list)

    @property
    def namesrv_addr(self) -> str:
        return ";".join(n.address for n in self.nodes if n.kind == "namesrv")

    @property
    def proxy_addr(self) -> str | None:
        """Where 5.x clients connect (the first proxy's gRPC endpoint)."""
        return next((n.address for n in self.nodes if n.kind == "proxy"), None)

    def node(self, name: str) -> NodeState | None:
        return next((n for n in self.nodes if n.name == name), None)

    def save(self) -> None:
        path = Path(self.dir) / "cluster.json"
        tmp = path.with_suffix(".json.tmp")
        data = asdict(self)
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        replace_file(str(tmp), str(path))  # (the console and other commands read it meanwhile)

    @classmethod
    def load(cls, name: str) -> ClusterState:
        if not _one_folder(name):  # ("..", a path: never a folder outside clusters/)
            raise ClusterNotFoundError(
                f"there is no cluster named {name!r}: cluster names are letters, digits, '-' "
                "and '_' (see `rocketdesk clusters`)")
        path = clusters_dir() / name / "cluster.json"
        try:
            data = json.loads(read_text(path))  # (the supervisor may be replacing it)
        except FileNotFoundError:
            raise ClusterNotFoundError(
                f"there is no cluster named {name!r} (see `rocketdesk clusters`)") from None
        # Fields this version does not know (a newer one wrote the file) are left out rather
        # than failing every command; a file that is not a cluster's at all is said as such.
        try:
            nodes = [NodeState(**_known(NodeState, n)) for n in data.pop("nodes", [])]
            return cls(nodes=nodes, **_known(cls, data))
        except (TypeError, AttributeError) as exc:
            raise ClusterNotFoundError(f"{path} is not a cluster's state file this version can "
                                       f"read ({exc})") from None


# What a cluster may be called (spec.py checks a spec's name the same way): a plain folder name
# on every system, never "..", a path or a drive.
CLUSTER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_cluster_name(name: str) -> bool:
    return bool(CLUSTER_NAME.fullmatch(name))


def _one_folder(name: str) -> bool:
    """A name that is one folder inside clusters/ (a cluster made before names were checked
    may hold a dot): not empty, ".", "..", a path or a drive."""
    return (name not in ("", ".", "..") and Path(name).name == name
            and not any(c in name for c in "/\\:"))


def _known(kind, data: dict) -> dict:
    names = {f.name for f in fields(kind)}
    return {key: value for key, value in data.items() if key in names}


def cluster_names() -> list[str]:
    folder = clusters_dir()
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / "cluster.json").is_file())
