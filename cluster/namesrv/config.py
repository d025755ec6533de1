"""NamesrvConfig: the name server's settings under RocketMQ's key names."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cluster.remoting.server import NettyServerConfig


@dataclass(slots=True)
class NamesrvConfig(NettyServerConfig):
    """The name server's keys; the remoting server's (serverSocketBacklog, ...) are inherited."""

    listen_port: int = 9876
    # Nothing listens beyond loopback unless the user says so.
    bind_address: str = "127.0.0.1"
    rocketmq_home: str = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))
    kv_config_path: str = field(
        default_factory=lambda: os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json"))
    scan_not_active_broker_interval: int = 10_000  # ms
    broker_channel_expired_time: int = 120_000  # ms
    # Serve ORDER_TOPIC_CONFIG's entry as a route's orderTopicConf (RocketMQ's key and default).
    order_message_enable: bool = False
