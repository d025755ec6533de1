"""RouteInfoManager: which brokers exist, which topics they serve, who is alive.

Pure data, no I/O (mirrors RocketMQ's ``RouteInfoManager``):

* cluster -> broker names; broker name -> BrokerData (cluster, {brokerId: address}; 0 = master);
* topic -> {broker name: QueueData} (applied only from a master's registration);
* broker address -> live info (last registration time, dataVersion, HA address, connection).

A broker that has not registered for 120 s, or whose connection closed, leaves every table.
A broker name belongs to one cluster at a time (see ``_claim_cluster``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.namesrv.errors import BrokerNameConflictError

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_MS = 120_000
MIX_ALL_MASTER_ID = 0
DEFAULT_TOPIC = "TBW102"

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"brokerAddrs": dict(sorted(self.broker_addrs.items())),
                "brokerName": self.broker_name, "cluster": self.cluster}

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MIX_ALL_MASTER_ID)


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: float
    data_version: dict
    ha_server_addr: str
    connection_id: object = None


@dataclass(slots=True)
class RegisterResult:
    ha_server_addr: str | None
    master_addr: str | None


class RouteInfoManager:
    """The name server's tables; every method is safe to call from any thread."""

    def __init__(self, clock=time.time) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}
        # Told the name of a broker that left every table (called under the tables' lock).
        self.on_broker_name_removed: list[Callable[[str], None]] = []

    def _now_ms(self) -> float:
        return self._clock() * 1000

    # -- registration ------------------------------------------------------------------------
    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: dict | None,
        filter_server_list: list[str] | None = None,
        connection_id: object = None,
    ) -> RegisterResult:
        """Record a broker's registration; a slave learns its master's addresses back.
        BrokerNameConflictError when another cluster's broker already has the name."""
        with self._lock:
            broker_data = self.broker_addr_table.get(broker_name)
            first = broker_data is None
            if broker_data is None:
                broker_data = BrokerData(cluster_name, broker_name)
                self.broker_addr_table[broker_name] = broker_data
            elif broker_data.cluster != cluster_name:
                self._claim_cluster(broker_data, cluster_name, broker_addr)
            self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
            # The same address under another id: a slave became master, or the reverse.
            for other_id, addr in list(broker_data.broker_addrs.items()):
                if addr == broker_addr and other_id != broker_id:
                    del broker_data.broker_addrs[other_id]
            old_addr = broker_data.broker_addrs.get(broker_id)
            broker_data.broker_addrs[broker_id] = broker_addr
            first = first or old_addr is None
            data_version = (topic_config_wrapper or {}).get("dataVersion") or {}
            if topic_config_wrapper is not None and broker_id == MIX_ALL_MASTER_ID:
                live = self.broker_live_table.get(broker_addr)
                if first or live is None or live.data_version != data_version:
                    table = topic_config_wrapper.get("topicConfigTable") or {}
                    for topic_config in table.values():
                        self._create_and_update_queue_data(broker_name, topic_config)
            self.broker_live_table[broker_addr] = BrokerLiveInfo(
                self._now_ms(), data_version, ha_server_addr, connection_id)
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)
            if broker_id != MIX_ALL_MASTER_ID:
                master = broker_data.master_addr()
                if master is not None:
                    master_live = self.broker_live_table.get(master)
                    if master_live is not None:
                        return RegisterResult(master_live.ha_server_addr, master)
            return RegisterResult(None, None)

    def _claim_cluster(self, broker_data: BrokerData, cluster_name: str, broker_addr: str) -> None:
        """A registration naming another cluster than the broker name is listed under.

        One of the broker's own addresses re-registering under a new cluster name is the broker
        moved (its broker.conf changed): it leaves the old cluster's set. Listed under both, it
        stayed there forever, and a DELETE_TOPIC_IN_NAMESRV for either cluster deleted its
        routes. Any other address is refused until the broker's addresses leave (unregistered,
        connection closed or 120 s silent): taking the name over would move a live broker's
        routes on the word of whoever can reach the port, while a broker refused by mistake
        only waits. (RocketMQ 4.9's registerBroker adds the name to the new cluster's set and
        leaves it in the old one: the both-clusters state this avoids.)"""
        if broker_addr not in broker_data.broker_addrs.values():
            raise BrokerNameConflictError(
                f"broker name {broker_data.broker_name} is registered in cluster "
                f"{broker_data.cluster} by {', '.join(sorted(broker_data.broker_addrs.values()))}; "
                f"{broker_addr} cannot register it in cluster {cluster_name} until those leave")
        log.warning("broker %s (%s) moved from cluster %s to %s", broker_data.broker_name,
                    broker_addr, broker_data.cluster, cluster_name)
        self._leave_cluster(broker_data.broker_name, broker_data.cluster)
        broker_data.cluster = cluster_name

    def _leave_cluster(self, broker_name: str, cluster: str) -> None:
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]

    def _create_and_update_queue_data(self, broker_name: str, topic_config: dict) -> None:
        topic = topic_config.get("topicName")
        if not topic:
            return
        queue_data = QueueData(
            broker_name,
            int(topic_config.get("readQueueNums", 16)),
            int(topic_config.get("writeQueueNums", 16)),
            int(topic_config.get("perm", PERM_READ | PERM_WRITE)),
            int(topic_config.get("topicSysFlag", 0)),
        )
        self.topic_queue_table.setdefault(topic, {})[broker_name] = queue_data

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str,
                          broker_id: int) -> None:
        """A broker leaving cleanly: only the entry that name, id and address all match.

        Its liveness goes only with that entry: an UNREGISTER naming the address under a wrong
        broker name or id took the liveness alone, and the broker stayed in the routes with
        nothing left to expire it. ``cluster_name`` is not trusted either: the name leaves
        the cluster it is listed under."""
        with self._lock:
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None or broker_data.broker_addrs.get(broker_id) != broker_addr:
                log.info("unregister of %s as %s/%d in %s matches no registration; ignored",
                         broker_addr, broker_name, broker_id, cluster_name)
                return
            del broker_data.broker_addrs[broker_id]
            self.broker_live_table.pop(broker_addr, None)
            self.filter_server_table.pop(broker_addr, None)
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name)

    def _remove_broker_name(self, broker_name: str) -> None:
        broker_data = self.broker_addr_table.pop(broker_name, None)
        if broker_data is not None:
            self._leave_cluster(broker_name, broker_data.cluster)
        for callback in self.on_broker_name_removed:
            callback(broker_name)
        for topic, queues in list(self.topic_queue_table.items()):
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    def _remove_broker_addr(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            for broker_id, addr in list(broker_data.broker_addrs.items()):
                if addr == broker_addr:
                    del broker_data.broker_addrs[broker_id]
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name)

    def on_connection_closed(self, connection_id: object) -> list[str]:
        """Drop every broker that registered over a connection that just closed."""
        with self._lock:
            gone = [addr for addr, live in self.broker_live_table.items()
                    if live.connection_id is connection_id and connection_id is not None]
            for addr in gone:
                self._remove_broker_addr(addr)
            return gone

    def scan_not_active_broker(self, expired_ms: float = BROKER_CHANNEL_EXPIRED_MS) -> list[str]:
        """Remove brokers silent for longer than ``expired_ms``; returns their addresses."""
        with self._lock:
            now = self._now_ms()
            gone = [addr for addr, live in self.broker_live_table.items()
                    if live.last_update_ms + expired_ms < now]
            for addr in gone:
                self._remove_broker_addr(addr)
            return gone

    def query_data_version(self, broker_addr: str, data_version: dict | None) -> tuple[bool, dict]:
        """QUERY_DATA_VERSION: whether the broker's topics changed since it registered (None,
        a version that did not parse, counts as changed), and the version registered. Only an
        unchanged broker is refreshed, as in RocketMQ: one whose topics changed must register
        them, not be kept alive on a version query."""
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            if live is None:
                return True, {}
            changed = data_version is None or live.data_version != data_version
            if not changed:
                live.last_update_ms = self._now_ms()
            return changed, live.data_version

    # -- queries -----------------------------------------------------------------------------
    def pickup_topic_route_data(self, topic: str) -> dict | None:
        """TopicRouteData for ``topic`` as plain values, or None when no broker serves it."""
        with self._lock:
            queues = self.topic_queue_table.get(topic)
            if not queues:
                return None
            broker_datas = []
            filter_servers: dict[str, list[str]] = {}
            for broker_name in sorted(queues):
                broker_data = self.broker_addr_table.get(broker_name)
                if broker_data is None:
                    continue
                broker_datas.append(BrokerData(broker_data.cluster, broker_name,
                                               dict(broker_data.broker_addrs)))
                for addr in broker_data.broker_addrs.values():
                    if addr in self.filter_server_table:
                        filter_servers[addr] = list(self.filter_server_table[addr])
            if not broker_datas:
                return None
            return {
                "brokerDatas": broker_datas,
                "filterServerTable": filter_servers,
                "queueDatas": [queues[name] for name in sorted(queues)],
            }

    def get_all_cluster_info(self) -> tuple[dict[str, BrokerData], dict[str, list[str]]]:
        with self._lock:
            brokers = {name: BrokerData(d.cluster, name, dict(d.broker_addrs))
                       for name, d in self.broker_addr_table.items()}
            clusters = {c: sorted(names) for c, names in self.cluster_addr_table.items()}
            return brokers, clusters

    def get_all_topic_list(self) -> list[str]:
        with self._lock:
            return sorted(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        with self._lock:
            names = self.cluster_addr_table.get(cluster, set())
            return sorted(topic for topic, queues in self.topic_queue_table.items()
                          if any(name in queues for name in names))

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        with self._lock:
            if cluster is None:
                self.topic_queue_table.pop(topic, None)
                return
            queues = self.topic_queue_table.get(topic, {})
            for name in self.cluster_addr_table.get(cluster, set()):
                queues.pop(name, None)
            if not queues:
                self.topic_queue_table.pop(topic, None)

    def change_write_perm_of_broker(self, broker_name: str, add: bool) -> int:
        """Wipe (or restore) the write permission of every topic on a broker; returns how many.

        Restoring sets read and write outright, as RocketMQ's ADD_WRITE_PERM_OF_BROKER does: a
        queue wiped while it was unreadable too comes back readable."""
        with self._lock:
            count = 0
            for queues in self.topic_queue_table.values():
                queue_data = queues.get(broker_name)
                if queue_data is not None:
                    if add:
                        queue_data.perm = PERM_READ | PERM_WRITE
                    else:
                        queue_data.perm &= ~PERM_WRITE
                    count += 1
            return count
