"""MessageStoreConfig: RocketMQ's store settings, under RocketMQ's key names.

Field names are the Python spelling of RocketMQ's keys (``mappedFileSizeCommitLog`` ->
``mapped_file_size_commit_log``); :meth:`MessageStoreConfig.from_properties` takes the keys as a
user's ``broker.conf`` spells them, including 4.x's ``mapedFile…`` misspelling.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from enum import Enum

from storage.errors import ConfigError


class FlushDiskType(Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(slots=True)
class MessageStoreConfig:
    """Every store setting with RocketMQ's default (see the protocol reference §5.7)."""

    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    store_path_commit_log: str = ""  # defaults to <root>/commitlog
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_interval_commit_log: int = 500
    commit_interval_commit_log: int = 200
    flush_commit_log_least_pages: int = 4
    commit_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    commit_commit_log_thorough_interval: int = 200
    flush_commit_log_timed: bool = True
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    sync_flush_timeout: int = 5000
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_maped_file_interval_forcibly: int = 120_000
    max_message_size: int = 1024 * 1024 * 4
    check_crc_on_recover: bool = True
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_safe: bool = False
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    os_page_cache_busy_time_out_mills: int = 1000
    # Fault in the CommitLog's pages ahead of the writer on a native thread of its own
    # (page_warmer.py; compiled core and Linux 5.14+ only). RocketDesk's own setting, not
    # RocketMQ's. On by default only with more than two cores: the thread's page zeroing pays
    # where it has a core of its own; on two, beside the broker's loop and a client, it takes
    # their time even without the interpreter lock (32 senders 45k -> 42.5k msg/s and p99 1.6 ->
    # 2.1 ms, batches +7 %, batched store puts +23 %; docs/benchmarks.md, sessions 10 and 11).
    warm_commit_log_pages: bool = field(default_factory=lambda: _usable_cpus() > 2)
    duplication_enable: bool = False
    # Replication (the HA service lives in cluster/ha; the store only holds its settings).
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024

    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

    @property
    def transient_store_pool_active(self) -> bool:
        """RocketMQ uses the pool only for an ASYNC_FLUSH master."""
        return (
            self.transient_store_pool_enable
            and self.flush_disk_type is FlushDiskType.ASYNC_FLUSH
            and self.broker_role is not BrokerRole.SLAVE
        )

    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` as milliseconds, level 1 first."""
        levels = []
        for item in self.message_delay_level.split():
            match = re.fullmatch(r"(\d+)([smhd])", item)
            if not match:
                raise ConfigError("messageDelayLevel", self.message_delay_level,
                                  f"{item!r} is not a number followed by s, m, h or d")
            levels.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
        return levels

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> tuple[MessageStoreConfig, list[str]]:
        """Build from broker.conf keys; returns the config and the keys it does not know."""
        known = {f.name: f for f in fields(cls)}
        config = cls()
        unknown = []
        for key, raw in props.items():
            name = java_key_to_field(key)
            if name not in known:
                unknown.append(key)
                continue
            setattr(config, name, _convert(key, raw, getattr(config, name)))
        try:
            config.validate()
        except ConfigError as exc:
            # Name the key as the user spelled it (mapedFileSizeCommitLog, say).
            field = java_key_to_field(exc.key)
            spelled = next((k for k in props if java_key_to_field(k) == field), exc.key)
            if spelled != exc.key:
                raise ConfigError(spelled, exc.value, str(exc).split(": ", 1)[-1]) from exc
            raise
        return config, unknown

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        if self.mapped_file_size_commit_log < 4096:
            raise ConfigError("mappedFileSizeCommitLog", self.mapped_file_size_commit_log,
                              "must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue < 20:
            raise ConfigError("mappedFileSizeConsumeQueue", self.mapped_file_size_consume_queue,
                              "must hold at least one 20-byte unit")
        if self.max_hash_slot_num < 1 or self.max_index_num < 2:
            raise ConfigError("maxIndexNum", self.max_index_num, "index needs slots and entries")
        if self.max_message_size < 1:
            raise ConfigError("maxMessageSize", self.max_message_size, "must be positive")
        self.delay_levels_ms()


_ALIASES = {
    "mapedFileSizeCommitLog": "mapped_file_size_commit_log",
    "mapedFileSizeConsumeQueue": "mapped_file_size_consume_queue",
    "destroyMappedFileIntervalForcibly": "destroy_maped_file_interval_forcibly",
    "haSlaveFallbehindMax": "ha_slave_fallbehind_max",
}


def java_key_to_field(key: str) -> str:
    """``flushDiskType`` -> ``flush_disk_type`` (with RocketMQ's historical aliases)."""
    if key in _ALIASES:
        return _ALIASES[key]
    # Word breaks before a capital that follows a lower-case letter or digit, and inside a run
    # of capitals before the last one (checkCRCOnRecover -> check_crc_on_recover).
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key).lower()


def _convert(key: str, raw: str, current: object) -> object:
    raw = raw.strip()
    try:
        if isinstance(current, bool):
            if raw.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return raw.lower() == "true"
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, Enum):
            return type(current)(raw.upper())
    except ValueError as exc:
        raise ConfigError(key, raw, str(exc) or "wrong type") from exc
    return raw
