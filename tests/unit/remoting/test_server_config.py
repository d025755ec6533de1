"""NettyServerConfig: keys from broker.conf and the name server's file, checks, derived cap."""

from __future__ import annotations

import pytest

from cluster.broker.config import load_broker_config
from cluster.namesrv.__main__ import parse_args
from cluster.remoting import server as server_module
from cluster.remoting.server import NettyServerConfig, RemotingServer
from cluster.settings import SettingError

KEYS = {
    "serverSocketBacklog": ("server_socket_backlog", 2048),
    "serverChannelMaxIdleTimeSeconds": ("server_channel_max_idle_time_seconds", 60),
    "serverChannelPartialFrameTimeoutMillis": ("server_channel_partial_frame_timeout_millis", 500),
    "serverMaxConnections": ("server_max_connections", 5),
    "writeBufferHighWaterMark": ("write_buffer_high_water_mark", 4 << 20),
    "writeBufferLowWaterMark": ("write_buffer_low_water_mark", 1 << 20),
    "serverChannelMaxWriteBufferBytes": ("server_channel_max_write_buffer_bytes", 32 << 20),
    "serverChannelMaxInflightRequests": ("server_channel_max_inflight_requests", 2048),
    "serverChannelMaxInflightBytes": ("server_channel_max_inflight_bytes", 8 << 20),
}


def test_defaults():
    config = NettyServerConfig()
    assert config.server_socket_backlog == 1024
    assert config.server_channel_max_idle_time_seconds == 120
    assert config.server_channel_partial_frame_timeout_millis == 30_000
    assert config.server_channel_max_inflight_requests == 1024
    assert config.server_channel_max_write_buffer_bytes == 64 << 20


def test_broker_conf_keys_reach_the_broker_config():
    props = {key: str(value) for key, (_, value) in KEYS.items()}
    broker, _, unknown = load_broker_config(props)
    assert unknown == []
    for _, (name, value) in KEYS.items():
        assert getattr(broker, name) == value
    server = RemotingServer("127.0.0.1", 0, broker)
    assert server.max_connections == 5


def test_namesrv_conf_keys_reach_the_namesrv_config(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("".join(f"{key}={value}\n" for key, (_, value) in KEYS.items()))
    config, unknown = parse_args(["-c", str(path)])
    assert unknown == []
    for _, (name, value) in KEYS.items():
        assert getattr(config, name) == value


@pytest.mark.parametrize(("props", "key"), [
    ({"writeBufferLowWaterMark": str(2 << 20)}, "writeBufferLowWaterMark"),
    ({"serverChannelMaxWriteBufferBytes": "1024"}, "serverChannelMaxWriteBufferBytes"),
    ({"serverSocketBacklog": "0"}, "serverSocketBacklog"),
    ({"serverChannelMaxInflightRequests": "-1"}, "serverChannelMaxInflightRequests"),
])
def test_values_the_server_cannot_run_with_are_setting_errors(props, key):
    with pytest.raises(SettingError) as caught:
        load_broker_config(props)
    assert caught.value.key == key


@pytest.mark.parametrize(("soft", "cap"), [
    (1024, 768),        # a quarter kept back for the store, logs and other sockets
    (20_000, 10_000),   # never more than 10,000 by default
    (4096, 3072),
    (300, 44),          # at least 256 kept back
    (100, 32),          # and never below 32
])
def test_the_default_cap_follows_rlimit_nofile(monkeypatch, soft, cap):
    monkeypatch.setattr(server_module, "open_files_limit", lambda: soft)
    assert server_module.derived_max_connections() == cap
    assert RemotingServer().max_connections == cap


def test_an_unlimited_rlimit_gives_the_default_cap(monkeypatch):
    monkeypatch.setattr(server_module, "open_files_limit", lambda: None)
    assert server_module.derived_max_connections() == server_module.DEFAULT_MAX_CONNECTIONS
