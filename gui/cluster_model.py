"""ClusterModel: one cluster as the console sees it, refreshed once a second.

Views observe its signals; it owns the supervisor (processes) and an admin client (the
protocol). Samples keep the last hour of per-broker runtime figures for the charts.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque

from PySide6.QtCore import QObject, QTimer, Signal

from cluster.client.admin import AdminClient
from cluster.supervisor.probe import Prober
from cluster.supervisor.spec import ClusterSpec, load_profile
from cluster.supervisor.state import cluster_names
from cluster.supervisor.supervisor import Supervisor
from cluster.topic_validator import is_system_topic
from common.addresses import split_address
from gui.models.display import ColorRegistry
from gui.tasks import ConsoleError, spawn

SAMPLE_CONCURRENCY = 16  # a group's or topic's figures asked at once in the 5 s pass

HISTORY = 3600  # one-second samples kept: an hour


def _num(value, default=None):
    try:
        return float(str(value).split(" ")[0])
    except (TypeError, ValueError):
        return default


def _histogram(text: str) -> list[tuple[str, int]]:
    """``putMessageDistributeTime`` ("[<=0ms]:12 [0~10ms]:3 …", cumulative counts) as pairs."""
    pairs = []
    for item in text.split(" "):
        label, _, count = item.rpartition(":")
        if label and count.isascii() and count.isdigit():
            pairs.append((label, int(count)))
    return pairs


class ClusterModel(QObject):
    nodes_changed = Signal(list)       # the supervisor's status rows
    sampled = Signal(dict)             # broker name -> latest sample
    message = Signal(str)              # a sentence for the status bar
    cluster_changed = Signal(str)      # name of the attached cluster ("" when none)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.supervisor: Supervisor | None = None
        self.external: str | None = None  # a cluster RocketDesk does not run: its name servers
        self.title = "no cluster"  # the cluster on screen, in words
        self.admin: AdminClient | None = None
        self.nodes: list[dict] = []
        self.colors = ColorRegistry()  # one colour per broker, topic and group in every chart
        self.samples: dict[str, deque] = {}
        self.lag: dict[str, deque] = {}  # consumer group -> (time, total lag), every 5 s
        self.consumed: dict[str, deque] = {}  # consumer group -> (time, offsets summed), every 5 s
        # The latest stats those samples read, for the tables to show without asking again.
        self.group_stats: dict[str, dict] = {}
        self.topic_stats: dict[str, dict] = {}
        self.topic_totals: dict[str, deque] = {}  # topic -> (time, messages stored), every 5 s
        self._lag_due = 0.0
        self._probe = None
        self._refresh_task: asyncio.Task | None = None
        self._slow_task: asyncio.Task | None = None  # the 5 s pass over groups and topics
        self._refreshing = False
        self.timer = QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.refresh)

    # -- attaching and creating ------------------------------------------------------------------
    @staticmethod
    def known_clusters() -> list[str]:
        return cluster_names()

    def attach(self, name: str, supervisor: Supervisor | None = None) -> None:
        # Keep the supervisor that started the nodes: it is their parent and reaps them.
        self.supervisor = supervisor or Supervisor.attach(name)
        self.external = None
        self.title = f"cluster {name}"
        self._new_admin()
        self.samples.clear()
        for cache in (self.lag, self.consumed, self.topic_totals, self.group_stats,
                      self.topic_stats):
            cache.clear()  # another cluster's figures must not show as this one's
        self.cluster_changed.emit(name)
        self.timer.start()
        self.refresh()

    async def check_name_servers(self, namesrv: str) -> None:
        """Raise ConsoleError, with a sentence, unless a name server answers at ``namesrv``
        (checked before the console lets go of the cluster it shows)."""
        addresses = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not addresses:
            raise ConsoleError("give a name-server address (host:port;host:port)")
        for address in addresses:
            try:
                split_address(address)
            except ValueError as exc:
                raise ConsoleError(str(exc)) from None
        prober = Prober(timeout=2.0)
        try:
            for address in addresses:
                if await prober.namesrv_ready(address):
                    return
        finally:
            await prober.close()
        raise ConsoleError(f"no name server answers at {namesrv} (nothing listens there, or it "
                           "is not a RocketMQ name server); still showing the cluster before")

    def connect_external(self, namesrv: str) -> None:
        """Watch a cluster started elsewhere (a Java RocketMQ, another machine): everything
        over the protocol, no process control."""
        if not namesrv.strip():
            raise ConsoleError("give a name-server address (host:port;host:port)")
        self.supervisor = None
        self.external = namesrv.strip()
        self.title = f"the cluster at {self.external}"
        self._new_admin()
        self.samples.clear()
        for cache in (self.lag, self.consumed, self.topic_totals, self.group_stats,
                      self.topic_stats):
            cache.clear()  # another cluster's figures must not show as this one's
        self.cluster_changed.emit(f"external {self.external}")
        self.timer.start()
        self.refresh()

    def require_admin(self) -> AdminClient:
        """The admin client of the cluster on screen; ConsoleError, with a sentence, while none
        is open (the first cluster still starting, or one that failed to)."""
        if self.admin is None:
            raise ConsoleError("no cluster is open yet: start one, pick one, or connect to a "
                               "name server first")
        return self.admin

    def _new_admin(self) -> None:
        old = self.admin
        self.admin = AdminClient(self.namesrv_addr) if self.namesrv_addr else None
        if old is not None:
            spawn(old.close())

    @property
    def namesrv_addr(self) -> str:
        if self.supervisor is not None:
            return self.supervisor.state.namesrv_addr
        return self.external or ""

    @property
    def proxy_addr(self) -> str | None:
        """Where 5.x clients connect, for a cluster RocketDesk runs."""
        return self.supervisor.state.proxy_addr if self.supervisor is not None else None

    def store_dirs(self) -> list[tuple[str, str]]:
        """(broker node, its store directory) for a cluster RocketDesk runs; none otherwise."""
        if self.supervisor is None:
            return []
        return [(n.name, n.store_dir) for n in self.supervisor.state.nodes if n.kind == "broker"]

    async def create_and_start(self, profile: str | ClusterSpec, name: str | None = None) -> None:
        spec = load_profile(profile) if isinstance(profile, str) else profile
        name = name or spec.name
        if name in cluster_names():
            supervisor = Supervisor.attach(name)
        else:
            supervisor = Supervisor.create(spec, name)
        self.message.emit(f"starting cluster {name}…")
        await supervisor.start()
        self.attach(name, supervisor)
        self.message.emit(f"cluster {name} is up; name server {supervisor.state.namesrv_addr}")

    # -- node actions ------------------------------------------------------------------------------
    async def node_action(self, action: str, node: str) -> None:
        supervisor = self.supervisor
        if supervisor is None:
            raise ConsoleError("no cluster is open")
        if action == "kill":
            await supervisor.kill(node)
        elif action == "pause":
            supervisor.pause(node)
        elif action == "resume":
            supervisor.resume(node)
        elif action == "restart":
            await supervisor.restart(node)
        elif action == "stop":
            await supervisor.stop(nodes=[supervisor.node(node)])
        elif action == "start":
            await supervisor.restart(node)
        self.message.emit(f"{node}: {action} done")
        self.refresh()

    async def stop_cluster(self) -> None:
        if self.supervisor is not None:
            await self.supervisor.stop()
            self.message.emit(f"cluster {self.supervisor.state.name} stopped")
            self.refresh()

    # -- sampling ----------------------------------------------------------------------------------
    def refresh(self) -> None:
        if (self.supervisor is None and self.external is None) or self._refreshing:
            return
        self._refreshing = True
        self._refresh_task = spawn(self._refresh(), on_error=self._refresh_failed)

    def _refresh_failed(self, text: str) -> None:
        self._refreshing = False
        self.message.emit(text)

    async def _refresh(self) -> None:
        try:
            # One request per broker a second: its runtime info feeds the charts and is its
            # health check too (status's own probe would ask every node a second time).
            rows = (await self.supervisor.status(probe=False) if self.supervisor is not None
                    else await self._external_rows())
            latest = {}
            infos = {}
            now = time.time()
            for row in rows:
                if row["state"] != "running":
                    continue
                if row["kind"] == "namesrv":
                    if self.supervisor is not None:
                        row["health"] = "ok" if await self._prober().namesrv_ready(row["address"]) \
                            else "not answering"
                    continue
                if row["kind"] == "proxy":
                    row["health"] = "ok" if await self._prober().proxy_ready(row["address"]) \
                        else "not answering"
                    continue
                try:
                    infos[row["name"]] = info = await asyncio.wait_for(
                        self.admin.broker_runtime_info(row["address"]), 2)
                    row["health"] = "ok"
                    # 5.x: timer messages waiting for their time, POP messages handed out and
                    # not acked yet (masters only).
                    row["timersPending"] = _num(info.get("timerPendingNum")) \
                        if "timerPendingNum" in info else None
                    row["popInFlight"] = _num(info.get("popInFlightNum")) \
                        if "popInFlightNum" in info else None
                    # Transactions not yet ended (masters), and the clients heartbeating here.
                    for key, field in (("transactionsOpen", "transactionOpenNum"),
                                       ("transactionsChecking", "transactionCheckingNum"),
                                       ("producers", "producerClientNum"),
                                       ("consumers", "consumerClientNum")):
                        row[key] = _num(info.get(field)) if field in info else None
                    if info.get("actingMaster") == "true":  # delivering for a master that is down
                        row["role"] = f"{row['role']} (acting master)"
                except Exception:  # a broker that stopped answering: a gap in its charts
                    row["health"] = "not answering"
            self.nodes = rows
            self.nodes_changed.emit(rows)
            for row in rows:
                info = infos.get(row["name"])
                if info is None:
                    continue
                sample = {
                    "time": now, "putTps": _num(info.get("putTps")),
                    "getTps": _num(info.get("getTransferedTps")),
                    "max": _num(info.get("commitLogMaxOffset")),
                    "committed": _num(info.get("commitLogCommittedOffset")),
                    "flushed": _num(info.get("commitLogFlushedOffset")),
                    "dispatched": _num(info.get("commitLogDispatchedOffset")),
                    "haLag": _num(info.get("haSlaveFallBehindBytes")),
                    "haAck": _num(info.get("haPush2SlaveMaxOffset")),
                    "role": info.get("brokerRole", ""),
                    "diskRatio": _num(info.get("commitLogDiskRatio")),
                    "latency": _histogram(info.get("putMessageDistributeTime", "")),
                }
                key = row["name"]
                self.samples.setdefault(key, deque(maxlen=HISTORY)).append(sample)
                latest[key] = sample
            if now >= self._lag_due and (self._slow_task is None or self._slow_task.done()):
                self._lag_due = now + 5
                self._slow_task = spawn(self._sample_slow(now), on_error=self.message.emit)
            self.sampled.emit(latest)
        finally:
            self._refreshing = False

    SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                               "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                               "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS"})

    async def _sample_slow(self, now: float) -> None:
        """Every 5 s, each group's lag and each topic's stored total: a request or two for
        each, asked SAMPLE_CONCURRENCY at a time, beside the nodes' sampling every second and
        not in its way. (One after another, in the second's sampling, a cluster of 3,000 topics
        took 1.4 s a pass, and held the nodes' charts for as long.) Figures that come back
        after the console moved to another cluster are dropped."""
        admin = self.admin
        if admin is None:
            return
        lag = await self._ask_each(admin.group_list, admin.consume_stats,
                                   lambda groups: sorted(set(groups) - self.SYSTEM_GROUPS))
        topics = await self._ask_each(admin.topic_list, admin.topic_stats,
                                      lambda names: [t for t in names
                                                     if not self.is_internal_topic(t)])
        if self.admin is admin:
            self._take_lag(now, lag)
            self._take_topics(now, topics)

    @staticmethod
    async def _ask_each(names, ask, keep) -> list[tuple[str, dict]]:
        """(name, ask(name)) for each name ``names()`` lists that ``keep`` keeps, in order,
        SAMPLE_CONCURRENCY at a time; one that fails or takes over 2 s is left out."""
        try:
            listed = keep(await asyncio.wait_for(names(), 2))
        except Exception:
            return []
        slots = asyncio.Semaphore(SAMPLE_CONCURRENCY)

        async def one(name: str) -> tuple[str, dict | None]:
            async with slots:
                try:
                    return name, await asyncio.wait_for(ask(name), 2)
                except Exception:
                    return name, None

        answers = await asyncio.gather(*(one(name) for name in listed))
        return [(name, stats) for name, stats in answers if stats is not None]

    def _take_lag(self, now: float, answers: list[tuple[str, dict]]) -> None:
        """Total lag of every consumer group (brokers' max offsets minus committed offsets)."""
        for group, stats in answers:
            self.group_stats[group] = stats
            total = sum(v["brokerOffset"] - max(v["consumerOffset"], 0) for v in stats.values())
            if stats:
                self.lag.setdefault(group, deque(maxlen=HISTORY // 5)).append((now, total))
                consumed = sum(max(v["consumerOffset"], 0) for v in stats.values())
                self.consumed.setdefault(group, deque(maxlen=HISTORY // 5)).append((now, consumed))

    def is_internal_topic(self, topic: str) -> bool:
        """RocketMQ's own topics, and the topic every cluster and broker registers under its name
        (hidden unless asked for)."""
        internal = {"DefaultCluster"}
        if self.supervisor is not None:
            internal |= {self.supervisor.state.cluster} | {n.group for n in self.supervisor.state.nodes}
        return is_system_topic(topic) or topic in internal or topic.endswith("_REPLY_TOPIC")

    def _take_topics(self, now: float, answers: list[tuple[str, dict]]) -> None:
        """Messages stored per topic (sum of its queues' max offsets): their rate is its TPS."""
        for topic, stats in answers:
            self.topic_stats[topic] = stats
            total = sum(v["maxOffset"] for v in stats.values())
            self.topic_totals.setdefault(topic, deque(maxlen=HISTORY // 5)).append((now, total))

    def topic_tps(self) -> dict[str, list[tuple[float, float]]]:
        """(time, messages/s) per topic, from successive totals."""
        rates = {}
        for topic, points in self.topic_totals.items():
            rates[topic] = [(t2, max(0.0, (n2 - n1) / (t2 - t1)))
                            for (t1, n1), (t2, n2) in itertools.pairwise(points) if t2 > t1]
        return rates

    async def _external_rows(self) -> list[dict]:
        """Node rows for a cluster we do not run, from the name servers' cluster info."""
        info = await self.admin.cluster_info()
        rows = [{"name": f"namesrv {a}", "kind": "namesrv", "role": "NAMESRV", "address": a,
                 "haPort": None, "pid": None, "state": "external", "health": "ok", "cpuPercent": None,
                 "rssBytes": None, "openFiles": None, "diskBytes": None}
                for a in self.external.split(";")]
        for name, data in sorted(info.get("brokerAddrTable", {}).items()):
            for broker_id, address in sorted(data["brokerAddrs"].items()):
                rows.append({"name": f"{name}-{broker_id}", "kind": "broker",
                             "role": "MASTER" if broker_id == 0 else "SLAVE", "address": address,
                             "haPort": None, "pid": None, "state": "running", "health": "ok",
                             "cpuPercent": None, "rssBytes": None, "openFiles": None, "diskBytes": None})
        return rows

    def _prober(self) -> Prober:
        if self._probe is None:
            self._probe = Prober(timeout=1.0)
        return self._probe

    async def close(self) -> None:
        self.timer.stop()
        for task in (self._refresh_task, self._slow_task):
            if task is not None and not task.done():
                await asyncio.gather(task, return_exceptions=True)
        if self._probe is not None:
            await self._probe.close()
        if self.admin is not None:
            await self.admin.close()
