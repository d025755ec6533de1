"""BrokerConfig: the broker's own settings (the store's are storage.config.MessageStoreConfig).

One ``broker.conf`` holds both; :func:`load_broker_config` splits it and reports keys neither
knows.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from cluster.remoting.server import NettyServerConfig, ServerConfigError
from cluster.settings import SettingError, apply_properties
from storage.config import BrokerRole, MessageStoreConfig
from storage.errors import ConfigError


def _hostname() -> str:
    return socket.gethostname().split(".")[0] or "broker"


@dataclass(slots=True)
class BrokerConfig(NettyServerConfig):
    """The broker's keys; the remoting server's (serverSocketBacklog, ...) are inherited."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=_hostname)
    broker_id: int = 0
    namesrv_addr: str = field(default_factory=lambda: os.environ.get("NAMESRV_ADDR", ""))
    listen_port: int = 10911
    # Nothing listens beyond loopback unless configured; brokerIP1 is what clients are told.
    bind_address: str = "127.0.0.1"
    broker_ip1: str = "127.0.0.1"
    broker_ip2: str = ""
    ha_listen_port: int = 0  # 0: listenPort + 1, as RocketMQ sets it
    broker_permission: int = 6
    # 5.x timer messages (RocketMQ keeps these two in the store's config; one broker.conf).
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3 * 24 * 3600
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    flush_consumer_offset_interval: int = 5000
    reject_transaction_message: bool = False
    long_polling_enable: bool = True
    # POPs held at once waiting for messages, on one topic and in all (RocketMQ's): past them,
    # a POP that finds nothing is answered POLLING_FULL at once instead of being held.
    pop_polling_size: int = 1024
    max_pop_polling_size: int = 100_000
    short_polling_time_mills: int = 1000
    notify_consumer_ids_changed_enable: bool = True
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    register_broker_timeout_mills: int = 6000
    register_name_server_period: int = 30_000
    slave_read_enable: bool = False
    enable_property_filter: bool = False  # SQL92 subscriptions, off by default as in RocketMQ
    # RocketMQ 5: a slave delivers delayed messages while its master is down, handing them to
    # another group's master (remote escape); both off by default, as there.
    enable_slave_acting_master: bool = False
    enable_remote_escape: bool = False
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    # How long a queue lock of an orderly consumer lives without renewal (ms). RocketMQ reads
    # it from the JVM property rocketmq.broker.rebalance.lockMaxLiveTime; here it is a
    # broker.conf key. A consumer that dies holding locks blocks its queues this long.
    rebalance_lock_max_live_time: int = 60_000
    transaction_check_interval: int = 60_000
    rocketmq_home: str = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.broker_ip1}:{self.effective_ha_port}"

    @property
    def effective_ha_port(self) -> int:
        return self.ha_listen_port or self.listen_port + 1

    def namesrv_list(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]


def load_broker_config(props: dict[str, str]) -> tuple[BrokerConfig, MessageStoreConfig, list[str]]:
    """Split broker.conf keys between the broker and its store; returns the unknown keys."""
    broker = BrokerConfig()
    broker_unknown = set(apply_properties(broker, props))
    try:
        broker.check()
    except ServerConfigError as exc:
        raise SettingError(exc.key, str(exc.value), exc.reason) from exc
    store_props = {k: v for k, v in props.items() if k in broker_unknown}
    try:
        store, store_unknown = MessageStoreConfig.from_properties(store_props)
    except ConfigError as exc:
        raise SettingError(exc.key, str(exc.value), str(exc).split(": ", 1)[-1]) from exc
    if "storePathRootDir" not in props:
        store.store_path_root_dir = os.path.join(os.path.expanduser("~"), "store")
    if broker.broker_id != 0 and "brokerRole" not in props:
        store.broker_role = BrokerRole.SLAVE
    return broker, store, sorted(store_unknown)
