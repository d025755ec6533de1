"""Supervisor: brings a cluster's node processes up and down, and everything in between.

Nodes run detached (their own session), so a cluster outlives the command that started it; the
state file lets any later process find, inspect and stop them. Start order is RocketMQ's: name
servers, then masters, then slaves, each stage waiting for readiness over the protocol.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil

from cluster.properties import format_properties
from cluster.supervisor.errors import (
    ClusterExistsError,
    NodeFailedError,
    NodeNotFoundError,
    SpecError,
    SupervisorError,
)
from cluster.supervisor.ports import free_port, port_is_free
from cluster.supervisor.probe import Prober
from cluster.supervisor.spec import ClusterSpec, GroupSpec, spec_from_dict
from cluster.supervisor.state import ClusterState, NodeState, clusters_dir, is_cluster_name
from common.platform import processes

log = logging.getLogger(__name__)

READY_TIMEOUT = 30.0
STOP_GRACE = 15.0
POLL = 0.05
DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORT = 10911
DEFAULT_PROXY_PORT = 8081  # RocketMQ proxy's gRPC port
DEFAULT_PORTS_ENV = "ROCKETDESK_DEFAULT_PORTS"


def defaults_wanted() -> bool:
    """Whether new clusters may take RocketMQ's default ports when free (the `single`
    profile's name server and broker, any cluster's first proxy). ``ROCKETDESK_DEFAULT_PORTS=0``
    keeps them for something else: a real RocketMQ started later, or clusters started side by
    side, which could each find a default port free at once and both plan on it."""
    return os.environ.get(DEFAULT_PORTS_ENV, "1") != "0"


class Supervisor:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._children: dict[str, subprocess.Popen] = {}
        self._disk_cache: dict[str, tuple[float, int]] = {}
        self._groups: dict[str, GroupSpec] = {g.name: g for g in self._spec().groups}

    def _spec(self) -> ClusterSpec:
        if not self.state.spec_toml:
            return ClusterSpec(self.state.name)
        return spec_from_dict(tomllib.loads(self.state.spec_toml), self.state.name)

    # -- finding clusters ---------------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str) -> Supervisor:
        return cls(ClusterState.load(name))

    @classmethod
    def create(cls, spec: ClusterSpec, name: str | None = None, root: Path | None = None) -> Supervisor:
        """Lay out a new cluster from ``spec``: ports, folders, .conf files. Nothing runs yet.
        ``root`` replaces the user's clusters folder (benchmarks use a scratch one)."""
        name = name or spec.name
        if not is_cluster_name(name):
            raise SpecError(f"cluster name {name!r} may use letters, digits, '-' and '_' only "
                            "(up to 64)")
        folder = (root or clusters_dir()) / name
        if (folder / "cluster.json").exists():
            raise ClusterExistsError(f"a cluster named {name!r} exists already; "
                                     f"`rocketdesk up --name {name}` starts it, `rocketdesk rm {name}` "
                                     "deletes it")
        folder.mkdir(parents=True, exist_ok=True)
        state = ClusterState(name=name, dir=str(folder), cluster=spec.cluster, spec_toml=spec.to_toml())
        supervisor = cls(state)
        taken: set[int] = set()
        defaults = spec.prefer_default_ports and defaults_wanted()
        for index in range(spec.namesrv):
            prefer = DEFAULT_NAMESRV_PORT if defaults and index == 0 else None
            supervisor._add_node(NodeState(name=f"namesrv-{index}", kind="namesrv",
                                           port=free_port(prefer, taken), dir=""))
        for number, group in enumerate(spec.groups):
            prefer = DEFAULT_BROKER_PORT if defaults and number == 0 else None
            supervisor._plan_group(group, taken, prefer)
        supervisor._add_proxy_node(taken)
        supervisor.write_confs()
        state.save()
        return supervisor

    def _add_node(self, node: NodeState) -> NodeState:
        node.dir = str(Path(self.state.dir) / "nodes" / node.name)
        os.makedirs(node.dir, exist_ok=True)
        self.state.nodes.append(node)
        return node

    def _add_proxy_node(self, taken: set[int]) -> NodeState:
        """The 5.x clients' gRPC endpoint: on 8081 when free, as RocketMQ's proxy."""
        number = sum(1 for n in self.state.nodes if n.kind == "proxy")
        prefer = DEFAULT_PROXY_PORT if number == 0 and defaults_wanted() else None
        return self._add_node(NodeState(name=f"proxy-{number}", kind="proxy",
                                        port=free_port(prefer, taken), dir="", role="PROXY"))

    def _plan_group(self, group: GroupSpec, taken: set[int], prefer: int | None = None) -> None:
        self._groups[group.name] = group
        port = free_port(prefer, taken)
        ha_port = free_port(port + 1 if prefer else None, taken)
        self._add_node(NodeState(name=f"{group.name}-0", kind="broker", port=port, dir="",
                                 group=group.name, broker_id=0, role=group.master_role,
                                 flush=group.flush, ha_port=ha_port))
        for broker_id in range(1, group.slaves + 1):
            self._add_slave_node(group, broker_id, taken)

    def _add_slave_node(self, group: GroupSpec, broker_id: int, taken: set[int]) -> NodeState:
        return self._add_node(NodeState(
            name=f"{group.name}-{broker_id}", kind="broker", port=free_port(None, taken), dir="",
            group=group.name, broker_id=broker_id, role="SLAVE", flush=group.flush,
            ha_port=free_port(None, taken)))

    def write_confs(self) -> None:
        namesrv = self.state.namesrv_addr
        for node in self.state.nodes:
            if node.kind == "namesrv":
                lines = {"listenPort": node.port}
            elif node.kind == "proxy":
                lines = {"namesrvAddr": namesrv, "grpcServerPort": node.port,
                         "bindAddress": "127.0.0.1"}
            else:
                group = self._groups.get(node.group) or GroupSpec(node.group)
                lines = {
                    "brokerClusterName": self.state.cluster, "brokerName": node.group,
                    "brokerId": node.broker_id, "brokerRole": node.role,
                    "flushDiskType": node.flush, "listenPort": node.port, "haListenPort": node.ha_port,
                    "namesrvAddr": namesrv, "storePathRootDir": node.store_dir,
                    "mapedFileSizeCommitLog": group.commitlog_file_size,
                }
                lines.update(group.conf)
            # Escaped: a Windows path's backslashes would otherwise be read as escapes.
            Path(node.conf_path).write_text(format_properties(lines), encoding="utf-8")

    # -- queries ------------------------------------------------------------------------------------
    def node(self, name: str) -> NodeState:
        node = self.state.node(name)
        if node is None:
            names = ", ".join(n.name for n in self.state.nodes)
            raise NodeNotFoundError(f"cluster {self.state.name!r} has no node {name!r} (it has {names})")
        return node

    def _reap(self) -> None:
        for child in self._children.values():
            child.poll()

    def is_alive(self, node: NodeState) -> bool:
        self._reap()
        return node.process() is not None

    def running_nodes(self) -> list[NodeState]:
        return [n for n in self.state.nodes if self.is_alive(n)]

    def dead_nodes(self) -> list[NodeState]:
        """Nodes that were started and have died since (not stopped by us)."""
        return [n for n in self.state.nodes if n.pid and not self.is_alive(n)]

    # -- starting -------------------------------------------------------------------------------------
    async def start(self, ready_timeout: float = READY_TIMEOUT) -> None:
        """Start every node that is not running: name servers, then masters, then slaves, then
        the proxy (added first to a cluster made before proxies existed)."""
        if not any(n.kind == "proxy" for n in self.state.nodes):
            self._add_proxy_node({p for n in self.state.nodes for p in (n.port, n.ha_port) if p})
            self.write_confs()
            self.state.save()
        stages = [[n for n in self.state.nodes if n.kind == "namesrv"],
                  [n for n in self.state.nodes if n.kind == "broker" and n.broker_id == 0],
                  [n for n in self.state.nodes if n.kind == "broker" and n.broker_id > 0],
                  [n for n in self.state.nodes if n.kind == "proxy"]]
        prober = Prober()
        try:
            for stage in stages:
                pending = [n for n in stage if not self.is_alive(n)]
                for node in pending:
                    self._spawn(node)
                await asyncio.gather(*(self._wait_ready(n, prober, ready_timeout) for n in pending))
        except BaseException:
            # Nothing half-started stays behind a failed start.
            await self.stop(grace=5)
            raise
        finally:
            await prober.close()

    def _spawn(self, node: NodeState) -> None:
        for port in (node.port, node.ha_port):
            if port and not port_is_free(port):
                raise NodeFailedError(f"cannot start {node.name}: port {port} on 127.0.0.1 is in use "
                                      "by another program")
        module = {"namesrv": "cluster.namesrv", "proxy": "cluster.proxy"}.get(node.kind,
                                                                            "cluster.broker")
        # UTF-8 logs everywhere (the console reads them as such; Windows would write cp1252).
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8:backslashreplace")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(node.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {node.name}\n".encode())
            log.flush()
            child = subprocess.Popen(
                [sys.executable, "-m", module, "-c", node.conf_path], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=node.dir, env=env,
                **processes.detached())
        self._children[node.name] = child
        node.pid = child.pid
        node.paused = False
        node.started_at = time.time()
        try:
            node.create_time = psutil.Process(child.pid).create_time()
        except psutil.NoSuchProcess:
            node.create_time = 0.0
        self.state.save()

    async def _wait_ready(self, node: NodeState, prober: Prober, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        namesrvs = [n.address for n in self.state.nodes if n.kind == "namesrv" and self.is_alive(n)]
        while True:
            if not self.is_alive(node):
                raise NodeFailedError(f"{node.name} exited while starting", node.log_tail())
            if await self._is_ready(node, prober, namesrvs):
                return
            if time.monotonic() > deadline:
                raise NodeFailedError(f"{node.name} was not ready after {timeout:.0f} s", node.log_tail())
            await asyncio.sleep(POLL)

    async def _is_ready(self, node: NodeState, prober: Prober, namesrvs: list[str]) -> bool:
        if node.kind == "namesrv":
            return await prober.namesrv_ready(node.address)
        if node.kind == "proxy":
            return await prober.proxy_ready(node.address)
        if await prober.broker_runtime(node.address) is None:
            return False
        if not await prober.broker_registered(node.address, namesrvs):
            return False
        if node.broker_id > 0:
            master = self.state.node(f"{node.group}-0")
            if master is not None and self.is_alive(master):
                return await prober.slave_replicating(node.address)
        return True

    # -- stopping -------------------------------------------------------------------------------------
    async def stop(self, grace: float = STOP_GRACE, nodes: list[NodeState] | None = None) -> None:
        """SIGTERM (proxies, then brokers, then name servers; slaves before masters), SIGKILL
        after ``grace``."""
        targets = nodes if nodes is not None else list(self.state.nodes)
        order = sorted(targets, key=lambda n: (n.kind == "namesrv", n.broker_id == 0))
        for tier in ([n for n in order if n.kind == "proxy"], [n for n in order if n.kind == "broker"],
                     [n for n in order if n.kind == "namesrv"]):
            live = [n for n in tier if self.is_alive(n)]
            for node in live:
                self._act(node, processes.stop)  # (a paused node is resumed first)
            await self._wait_gone(live, grace)
        for node in targets:
            node.pid = 0
            node.paused = False
        self.state.save()

    async def _wait_gone(self, nodes: list[NodeState], grace: float) -> None:
        deadline = time.monotonic() + grace
        while any(self.is_alive(n) for n in nodes):
            if time.monotonic() > deadline:
                for node in nodes:
                    if self.is_alive(node):
                        self._act(node, processes.kill)
                deadline = time.monotonic() + 5
                grace = 0
                while any(self.is_alive(n) for n in nodes) and time.monotonic() < deadline:
                    await asyncio.sleep(POLL)
                return
            await asyncio.sleep(POLL)

    def _act(self, node: NodeState, action) -> None:
        process = node.process()
        if process is None:
            return
        try:
            action(process)
        except psutil.NoSuchProcess:
            pass
        except (psutil.Error, OSError) as exc:  # one node's refusal must not stop the others
            log.warning("%s: %s failed: %s", node.name, getattr(action, "__name__", action), exc)

    async def kill(self, name: str) -> None:
        """SIGKILL one node, as a crash would."""
        node = self.node(name)
        if not self.is_alive(node):
            raise SupervisorError(f"{name} is not running")
        self._act(node, processes.kill)
        await self._wait_gone([node], 5)
        node.pid = 0
        node.paused = False
        self.state.save()

    def pause(self, name: str) -> None:
        node = self.node(name)
        if not self.is_alive(node):
            raise SupervisorError(f"{name} is not running")
        self._act(node, processes.pause)
        node.paused = True
        self.state.save()

    def resume(self, name: str) -> None:
        node = self.node(name)
        if not self.is_alive(node):
            raise SupervisorError(f"{name} is not running")
        self._act(node, processes.resume)
        node.paused = False
        self.state.save()

    async def restart(self, name: str, ready_timeout: float = READY_TIMEOUT) -> None:
        node = self.node(name)
        if self.is_alive(node):
            await self.stop(nodes=[node])
        prober = Prober()
        try:
            self._spawn(node)
            await self._wait_ready(node, prober, ready_timeout)
        finally:
            await prober.close()

    # -- growing --------------------------------------------------------------------------------------
    async def add_group(self, group: GroupSpec, ready_timeout: float = READY_TIMEOUT) -> list[NodeState]:
        if any(n.group == group.name for n in self.state.nodes):
            raise SupervisorError(f"cluster {self.state.name!r} already has a broker group {group.name!r}")
        taken = {p for n in self.state.nodes for p in (n.port, n.ha_port) if p}
        before = len(self.state.nodes)
        self._plan_group(group, taken)
        self._remember_group(group)
        added = self.state.nodes[before:]
        self.write_confs()
        self.state.save()
        await self._start_nodes(added, ready_timeout)
        return added

    async def add_slave(self, group_name: str, ready_timeout: float = READY_TIMEOUT) -> NodeState:
        members = [n for n in self.state.nodes if n.group == group_name]
        if not members:
            raise SupervisorError(f"cluster {self.state.name!r} has no broker group {group_name!r}")
        group = self._groups.get(group_name) or GroupSpec(group_name)
        taken = {p for n in self.state.nodes for p in (n.port, n.ha_port) if p}
        node = self._add_slave_node(group, max(n.broker_id for n in members) + 1, taken)
        group.slaves += 1
        self._remember_group(group)
        self.write_confs()
        self.state.save()
        await self._start_nodes([node], ready_timeout)
        return node

    async def add_proxy(self, ready_timeout: float = READY_TIMEOUT) -> NodeState:
        """One more 5.x endpoint (proxies share nothing: any of them serves any client)."""
        taken = {p for n in self.state.nodes for p in (n.port, n.ha_port) if p}
        node = self._add_proxy_node(taken)
        self.write_confs()
        self.state.save()
        await self._start_nodes([node], ready_timeout)
        return node

    @property
    def proxy_addr(self) -> str | None:
        """The first proxy's gRPC endpoint (host:port), if the cluster has one."""
        return self.state.proxy_addr

    def _remember_group(self, group: GroupSpec) -> None:
        spec = self._spec()
        spec.groups = [g for g in spec.groups if g.name != group.name] + [group]
        self.state.spec_toml = spec.to_toml()
        self._groups = {g.name: g for g in spec.groups}

    async def _start_nodes(self, nodes: list[NodeState], ready_timeout: float) -> None:
        prober = Prober()
        try:
            for stage in ([n for n in nodes if n.broker_id == 0], [n for n in nodes if n.broker_id > 0]):
                for node in stage:
                    self._spawn(node)
                await asyncio.gather(*(self._wait_ready(n, prober, ready_timeout) for n in stage))
        except BaseException:
            await self.stop(grace=5, nodes=nodes)
            raise
        finally:
            await prober.close()

    # -- removing -------------------------------------------------------------------------------------
    def remove(self) -> None:
        """Delete the cluster's folder: stores, logs, everything. Only when nothing runs."""
        running = self.running_nodes()
        if running:
            raise SupervisorError(f"cluster {self.state.name!r} is running ({len(running)} nodes); "
                                  f"`rocketdesk down --name {self.state.name}` first")
        shutil.rmtree(self.state.dir)

    # -- resources ------------------------------------------------------------------------------------
    async def status(self, probe: bool = True) -> list[dict]:
        """Per node: role, ports, pid, health and resources (CPU %, RSS, open files, disk)."""
        processes = {n.name: n.process() for n in self.state.nodes}
        for process in processes.values():
            if process is not None:
                _cpu(process)
        await asyncio.sleep(0.2)
        prober = Prober(timeout=1.0) if probe else None
        rows = []
        try:
            for node in self.state.nodes:
                process = processes[node.name]
                row = {"name": node.name, "kind": node.kind, "group": node.group,
                       "brokerId": node.broker_id, "role": node.role or "NAMESRV",
                       "address": node.address, "haPort": node.ha_port or None,
                       "pid": node.pid if process else None,
                       "state": _state(node, process), "health": "-",
                       "cpuPercent": None, "rssBytes": None, "openFiles": None,
                       "diskBytes": self._disk_usage(node)}
                if process is not None:
                    with _quiet():
                        row["cpuPercent"] = _cpu(process)
                        row["rssBytes"] = process.memory_info().rss
                        # Windows: handles (its open_files() is slow, and a node's are files,
                        # sockets and mappings alike)
                        row["openFiles"] = (process.num_fds() if hasattr(process, "num_fds")
                                            else process.num_handles())
                    if prober is not None and not node.paused:
                        row["health"] = "ok" if await self._is_serving(node, prober) else "not answering"
                elif node.pid:
                    row["lastLog"] = node.log_tail(5)
                rows.append(row)
        finally:
            if prober is not None:
                await prober.close()
        return rows

    def _disk_usage(self, node: NodeState, max_age: float = 10.0) -> int:
        """Disk use, walked at most every ``max_age`` seconds (status is polled each second)."""
        cache = self._disk_cache
        cached = cache.get(node.name)
        if cached is None or time.monotonic() - cached[0] > max_age:
            cached = cache[node.name] = (time.monotonic(), disk_usage(node.dir))
        return cached[1]

    async def _is_serving(self, node: NodeState, prober: Prober) -> bool:
        if node.kind == "namesrv":
            return await prober.namesrv_ready(node.address)
        if node.kind == "proxy":
            return await prober.proxy_ready(node.address)
        return await prober.broker_runtime(node.address) is not None


_CPU_SEEN: dict[int, psutil.Process] = {}


def _cpu(process: psutil.Process) -> float:
    """CPU % since the previous call for the same process (psutil keeps the last sample)."""
    known = _CPU_SEEN.setdefault(process.pid, process)
    try:
        return known.cpu_percent(None)
    except psutil.Error:
        return 0.0


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, psutil.Error)


def _state(node: NodeState, process) -> str:
    if process is None:
        return "died" if node.pid else "stopped"
    return "paused" if node.paused else "running"


def disk_usage(path: str) -> int:
    """Bytes really used on disk (allocated blocks: sparse CommitLog files count what they hold)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                stat = os.stat(os.path.join(root, name))
            except OSError:
                continue
            total += getattr(stat, "st_blocks", 0) * 512 or stat.st_size
    return total
