"""Store runtime statistics: put/get counters, TPS over sliding windows, the put-latency histogram.

Mirrors RocketMQ's ``StoreStatsService``: counters are sampled once a second into a ring, TPS is
the difference between the newest sample and the one ``window`` seconds older. The latency
buckets and their labels are RocketMQ's ``putMessageDistributeTime``.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from storage.service_thread import ServiceThread

# Upper bounds (ms) of the put-latency buckets; the last bucket is everything above 10 s.
PUT_LATENCY_BOUNDS_MS = (0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10_000)
PUT_LATENCY_LABELS = (
    "[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]",
    "[500ms~1s]", "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]",
)
SAMPLE_SECONDS = 600


@dataclass(slots=True, frozen=True)
class _Sample:
    at: float
    put_times: int
    put_size: int
    get_found: int
    get_miss: int
    get_transferred: int


class StoreStatsService(ServiceThread):
    """Counters updated on the put and get paths, sampled each second for TPS."""

    name = "StoreStatsService"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.put_message_times_total = 0
        self.put_message_size_total = 0
        self.put_message_failed_times = 0
        self.put_message_entire_time_max = 0.0
        self.put_latency_buckets = [0] * len(PUT_LATENCY_LABELS)
        # topic -> [messages, bytes]: one lookup a put (``topic_put_times``/``_size`` read it)
        self._topic_puts: dict[str, list[int]] = {}
        self.get_message_times_total_found = 0
        self.get_message_times_total_miss = 0
        self.get_message_transferred_msg_count = 0
        self.started_at = time.time()
        self._samples: deque[_Sample] = deque(maxlen=SAMPLE_SECONDS + 1)
        self.sample()

    def record_put(self, topic: str, count: int, size: int, elapsed_ms: float,
                   puts: int = 1) -> None:
        """Count ``puts`` successful puts of ``count`` messages in all, each taking up to
        ``elapsed_ms`` end to end (a batch is one put; a run of sends written together, one
        put each)."""
        bucket = bisect_left(PUT_LATENCY_BOUNDS_MS, elapsed_ms)  # first bound >= elapsed
        # (on every put: acquire/release and one topic lookup, not ``with``, ``max`` and two
        # dictionaries: 0.45 -> 0.29 µs)
        lock = self._lock
        lock.acquire()
        try:
            self.put_message_times_total += count
            self.put_message_size_total += size
            self.put_latency_buckets[bucket] += puts
            if elapsed_ms > self.put_message_entire_time_max:  # noqa: PLR1730 (no call a put)
                self.put_message_entire_time_max = elapsed_ms
            topic_puts = self._topic_puts.get(topic)
            if topic_puts is None:
                topic_puts = self._topic_puts[topic] = [0, 0]
            topic_puts[0] += count
            topic_puts[1] += size
        finally:
            lock.release()

    @property
    def topic_put_times(self) -> dict[str, int]:
        """Messages put a topic, since the store started (a copy)."""
        with self._lock:
            return {topic: puts[0] for topic, puts in self._topic_puts.items()}

    @property
    def topic_put_size(self) -> dict[str, int]:
        """Bytes put a topic, since the store started (a copy)."""
        with self._lock:
            return {topic: puts[1] for topic, puts in self._topic_puts.items()}

    def record_put_failure(self) -> None:
        with self._lock:
            self.put_message_failed_times += 1

    def record_get(self, found: int) -> None:
        with self._lock:
            if found:
                self.get_message_times_total_found += 1
                self.get_message_transferred_msg_count += found
            else:
                self.get_message_times_total_miss += 1

    def sample(self) -> None:
        with self._lock:
            self._samples.append(
                _Sample(time.monotonic(), self.put_message_times_total,
                        self.put_message_size_total, self.get_message_times_total_found,
                        self.get_message_times_total_miss,
                        self.get_message_transferred_msg_count)
            )

    def run_once(self) -> None:
        self._stopped.wait(1.0)
        self.sample()

    def _rate(self, window: int, attr: str) -> float:
        samples = list(self._samples)
        if len(samples) < 2:
            return 0.0
        newest = samples[-1]
        oldest = samples[max(0, len(samples) - 1 - window)]
        span = newest.at - oldest.at
        if span <= 0:
            return 0.0
        return (getattr(newest, attr) - getattr(oldest, attr)) / span

    def put_tps(self, window: int = 10) -> float:
        """Messages stored per second over the last ``window`` seconds."""
        return self._rate(window, "put_times")

    def get_transferred_tps(self, window: int = 10) -> float:
        return self._rate(window, "get_transferred")

    def latency_histogram(self) -> dict[str, int]:
        with self._lock:
            return dict(zip(PUT_LATENCY_LABELS, self.put_latency_buckets, strict=True))

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's runtime keys (``StoreStatsService.getRuntimeInfo``), values as strings."""
        with self._lock:
            total = self.put_message_times_total
            size = self.put_message_size_total
        windows = (10, 60, 600)
        return {
            "bootTimestamp": str(int(self.started_at * 1000)),
            "runtime": _runtime_text(time.time() - self.started_at),
            "putMessageEntireTimeMax": str(int(self.put_message_entire_time_max)),
            "putMessageTimesTotal": str(total),
            "putMessageSizeTotal": str(size),
            "putMessageFailedTimes": str(self.put_message_failed_times),
            "putMessageDistributeTime": " ".join(
                f"{label}:{n}" for label, n in self.latency_histogram().items()
            ),
            "putMessageAverageSize": str(size / total if total else 0.0),
            "putTps": " ".join(f"{self.put_tps(w):.4f}" for w in windows),
            "getFoundTps": " ".join(
                f"{self._rate(w, 'get_found'):.4f}" for w in windows
            ),
            "getMissTps": " ".join(f"{self._rate(w, 'get_miss'):.4f}" for w in windows),
            # (found and missed gets: rocketmq-dashboard splits it on spaces every minute)
            "getTotalTps": " ".join(
                f"{self._rate(w, 'get_found') + self._rate(w, 'get_miss'):.4f}" for w in windows
            ),
            "getTransferedTps": " ".join(f"{self.get_transferred_tps(w):.4f}" for w in windows),
            "getMessageEntireTimeMax": "0",
            # RocketMQ reports it and never sets it: no dispatch buffer here either
            "dispatchMaxBuffer": "0",
        }


def _runtime_text(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"
