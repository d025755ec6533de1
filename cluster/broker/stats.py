"""Broker statistics: messages put per topic and got per group, sampled each second for TPS."""

from __future__ import annotations

import time
from collections import deque


class BrokerStats:
    def __init__(self) -> None:
        self.put_by_topic: dict[str, int] = {}
        self.put_bytes_by_topic: dict[str, int] = {}
        self.get_by_group: dict[str, int] = {}
        self.get_by_topic: dict[str, int] = {}
        self.put_total = 0
        self.get_total = 0
        self.boot_timestamp = int(time.time() * 1000)
        self._samples: deque = deque(maxlen=61)
        self.sample()

    def record_send(self, topic: str, count: int, size: int) -> None:
        self.put_total += count
        self.put_by_topic[topic] = self.put_by_topic.get(topic, 0) + count
        self.put_bytes_by_topic[topic] = self.put_bytes_by_topic.get(topic, 0) + size

    def record_get(self, group: str, topic: str, count: int, size: int) -> None:
        self.get_total += count
        self.get_by_group[group] = self.get_by_group.get(group, 0) + count
        self.get_by_topic[topic] = self.get_by_topic.get(topic, 0) + count

    def sample(self) -> None:
        self._samples.append((time.monotonic(), self.put_total, self.get_total,
                              dict(self.get_by_group)))

    def _window(self, seconds: int):
        if len(self._samples) < 2:
            return None
        newest = self._samples[-1]
        oldest = self._samples[max(0, len(self._samples) - 1 - seconds)]
        span = newest[0] - oldest[0]
        return (newest, oldest, span) if span > 0 else None

    def put_tps(self, seconds: int = 10) -> float:
        window = self._window(seconds)
        return (window[0][1] - window[1][1]) / window[2] if window else 0.0

    def get_tps(self, seconds: int = 10) -> float:
        window = self._window(seconds)
        return (window[0][2] - window[1][2]) / window[2] if window else 0.0

    def group_get_tps(self, group: str, seconds: int = 10) -> float:
        window = self._window(seconds)
        if not window:
            return 0.0
        newest, oldest, span = window
        return (newest[3].get(group, 0) - oldest[3].get(group, 0)) / span
