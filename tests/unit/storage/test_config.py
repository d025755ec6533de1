"""broker.conf keys map onto MessageStoreConfig the way RocketMQ spells them."""

from __future__ import annotations

import pytest

from storage.config import BrokerRole, FlushDiskType, MessageStoreConfig
from storage.errors import ConfigError


def test_rocketmq_keys_and_the_4x_misspelling_are_understood():
    config, unknown = MessageStoreConfig.from_properties({
        "storePathRootDir": "/data/store",
        "mapedFileSizeCommitLog": "1048576",
        "flushDiskType": "SYNC_FLUSH",
        "brokerRole": "sync_master",
        "syncFlushTimeout": "3000",
        "transientStorePoolEnable": "true",
        "brokerName": "broker-a",
    })
    assert config.store_path_root_dir == "/data/store"
    assert config.mapped_file_size_commit_log == 1048576
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.broker_role is BrokerRole.SYNC_MASTER
    assert config.sync_flush_timeout == 3000
    assert config.transient_store_pool_enable is True
    assert unknown == ["brokerName"]  # a broker key, not a store key: reported, not fatal


def test_defaults_are_rocketmqs():
    config = MessageStoreConfig()
    assert config.mapped_file_size_commit_log == 1024**3
    assert config.mapped_file_size_consume_queue == 6_000_000
    assert config.flush_interval_commit_log == 500
    assert config.flush_commit_log_least_pages == 4
    assert config.sync_flush_timeout == 5000
    assert config.file_reserved_time == 72
    assert config.max_message_size == 4 * 1024 * 1024
    assert config.max_hash_slot_num == 5_000_000
    assert config.max_index_num == 20_000_000
    assert config.delay_levels_ms()[:3] == [1000, 5000, 10000]
    assert len(config.delay_levels_ms()) == 18


@pytest.mark.parametrize(
    ("key", "value"),
    [("flushDiskType", "SOMETIMES"), ("syncFlushTimeout", "soon"), ("checkCRCOnRecover", "yes"),
     ("mapedFileSizeCommitLog", "10"), ("messageDelayLevel", "1s 5x")],
)
def test_a_bad_value_is_an_error_naming_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        MessageStoreConfig.from_properties({key: value})
    assert info.value.key == key or key in str(info.value)
