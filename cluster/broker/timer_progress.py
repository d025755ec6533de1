"""A timer's progress through its queue (``config/timercheck.json``), which a returning master
and its slaves hand each other (cluster/broker/timer.py, acting_master.py, slave_sync.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import NamedTuple

from cluster.broker.json_config import JsonConfigFile

# A broker's timer progress as ext fields of its GET_ALL_DELAY_OFFSET answer (our own: see
# admin_processor.get_all_delay_offset).
TIMER_PROGRESS_FIELDS = ("timerScanOffset", "timerMinPendingOffset", "timerDeliveredUpTo")


class TimerProgress(NamedTuple):
    """How far the timer queue went (``config/timercheck.json``): every unit below
    ``scan_offset`` that fell due by ``delivered_up_to`` went out (or was rolled), and so did
    every unit below ``min_pending_offset``."""

    scan_offset: int = 0
    min_pending_offset: int = 0
    delivered_up_to: int = 0

    @classmethod
    def from_json(cls, data: dict) -> TimerProgress:
        return cls(int(data.get("scanOffset", 0)), int(data.get("minPendingOffset", 0)),
                   int(data.get("deliveredUpTo", 0)))

    def to_json(self) -> str:
        return json.dumps({"scanOffset": self.scan_offset,
                           "minPendingOffset": self.min_pending_offset,
                           "deliveredUpTo": self.delivered_up_to})

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> TimerProgress | None:
        """The progress an answer carries (TIMER_PROGRESS_FIELDS); None when it carries none
        (a broker without timers, RocketMQ's own) or none that reads as numbers."""
        try:
            return cls(*(int(fields[name]) for name in TIMER_PROGRESS_FIELDS))
        except (KeyError, ValueError):
            return None

    def ext_fields(self) -> dict[str, str]:
        return dict(zip(TIMER_PROGRESS_FIELDS, map(str, self), strict=True))

    def covers(self, other: TimerProgress) -> bool:
        """Whether every unit ``other`` counts as delivered, this counts too."""
        return (self.scan_offset >= other.scan_offset
                and self.delivered_up_to >= other.delivered_up_to)


def timer_check_path(broker) -> str:
    return os.path.join(broker.store_config.store_path_root_dir, "config", "timercheck.json")


def read_timer_progress(file: JsonConfigFile) -> TimerProgress | None:
    data = file.load()
    return TimerProgress.from_json(data) if data else None
