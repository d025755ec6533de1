"""Store runtime statistics: put/get counters, TPS over sliding windows, the put-latency histogram.

Mirrors RocketMQ's ``StoreStatsService``: counters are sampled once a second into a ring, TPS is
the difference between the newest sample and the one ``window`` seconds older. The latency
buckets and their labels are RocketMQ's ``putMessageDistributeTime``.
"""

from __future__ import annotations

import operator
import threading
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from common import speedups
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


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int64(value: object) -> int:
    number = operator.index(value)  # type: ignore[arg-type]
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise OverflowError("Python int too large to convert to C long long")
    return number


class PutCounter:
    """The store's put counters: messages, bytes, latency buckets, the slowest put, and each
    topic's messages and bytes. The pure twin (and reference) of common/_put_counter.c, which
    the store uses where the core is built: there a put's counting costs ~0.1 µs, here 0.47."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times = 0
        self._size = 0
        self._max_ms = 0.0
        self._buckets = [0] * len(PUT_LATENCY_LABELS)
        self._topics: dict[str, list[int]] = {}  # topic -> [messages, bytes]

    def record(self, topic: str, count: int, size: int, elapsed_ms: float, /,
               puts: int = 1) -> None:
        """Count ``puts`` puts of ``count`` messages and ``size`` bytes in all, each taking up
        to ``elapsed_ms``. Every count stays an int64, as the compiled one's: a put that would
        take one past it raises OverflowError and changes nothing."""
        if type(topic) is not str:
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        count, size, puts = _int64(count), _int64(size), _int64(puts)
        if type(elapsed_ms) is not float:
            if not isinstance(elapsed_ms, int | float):
                raise TypeError(f"elapsed_ms must be a number, not {type(elapsed_ms).__name__}")
            elapsed_ms = float(elapsed_ms)
        bucket = bisect_left(PUT_LATENCY_BOUNDS_MS, elapsed_ms)  # first bound >= elapsed
        with self._lock:
            pair = self._topics.get(topic) or [0, 0]
            sums = (self._times + count, self._size + size, self._buckets[bucket] + puts,
                    pair[0] + count, pair[1] + size)
            if not all(_INT64_MIN <= value <= _INT64_MAX for value in sums):
                raise OverflowError("a put counter would leave the range of int64")
            self._times, self._size, self._buckets[bucket], pair[0], pair[1] = sums
            self._topics[topic] = pair
            if elapsed_ms > self._max_ms:  # noqa: PLR1730 (as the compiled one compares)
                self._max_ms = elapsed_ms

    def totals(self) -> tuple[int, int, float]:
        """(messages, bytes, the slowest put's ms)."""
        with self._lock:
            return self._times, self._size, self._max_ms

    def buckets(self) -> list[int]:
        with self._lock:
            return list(self._buckets)

    def topic_puts(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            return {topic: (pair[0], pair[1]) for topic, pair in self._topics.items()}


# The compiled counter, where the core is built and has it (None: the pure one).
_PUT_COUNTER = getattr(speedups.store_core, "PutCounter", None) or PutCounter


class StoreStatsService(ServiceThread):
    """Counters updated on the put and get paths, sampled each second for TPS."""

    name = "StoreStatsService"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._puts = _PUT_COUNTER()
        # Count a put: ``record_put(topic, count, size, elapsed_ms, puts=1)`` counts ``puts``
        # successful puts of ``count`` messages in all, each taking up to ``elapsed_ms`` end to
        # end (a batch is one put; a run of sends written together, one put each). The
        # counter's own method: compiled, no Python frame a put.
        self.record_put = self._puts.record
        self.put_message_failed_times = 0
        self.get_message_times_total_found = 0
        self.get_message_times_total_miss = 0
        self.get_message_transferred_msg_count = 0
        self.started_at = time.time()
        self._samples: deque[_Sample] = deque(maxlen=SAMPLE_SECONDS + 1)
        self.sample()

    @property
    def put_message_times_total(self) -> int:
        return self._puts.totals()[0]

    @property
    def put_message_size_total(self) -> int:
        return self._puts.totals()[1]

    @property
    def put_message_entire_time_max(self) -> float:
        return self._puts.totals()[2]

    @property
    def put_latency_buckets(self) -> list[int]:
        """Puts in each latency bucket (a copy)."""
        return self._puts.buckets()

    @property
    def topic_put_times(self) -> dict[str, int]:
        """Messages put a topic, since the store started (a copy)."""
        return {topic: pair[0] for topic, pair in self._puts.topic_puts().items()}

    @property
    def topic_put_size(self) -> dict[str, int]:
        """Bytes put a topic, since the store started (a copy)."""
        return {topic: pair[1] for topic, pair in self._puts.topic_puts().items()}

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
        times, size, _ = self._puts.totals()  # (one reading: the two counts agree)
        with self._lock:
            self._samples.append(
                _Sample(time.monotonic(), times, size, self.get_message_times_total_found,
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
        return dict(zip(PUT_LATENCY_LABELS, self._puts.buckets(), strict=True))

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's runtime keys (``StoreStatsService.getRuntimeInfo``), values as strings."""
        total, size, slowest = self._puts.totals()
        windows = (10, 60, 600)
        return {
            "bootTimestamp": str(int(self.started_at * 1000)),
            "runtime": _runtime_text(time.time() - self.started_at),
            "putMessageEntireTimeMax": str(int(slowest)),
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
