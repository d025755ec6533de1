"""The broker's counters: messages sent and handed to consumers, their rates, the totals at the
last two midnights (RocketMQ's BrokerStats), and the runtime-info keys a broker of threads
would report that this one has no threads for."""

from __future__ import annotations

import math
import shutil
import time
from collections import deque
from datetime import date

# RocketMQ's rate windows (StoreStatsService: putTps, getTransferedTps...), in seconds.
TPS_WINDOWS = (10, 60, 600)
# Gets by group are copied into every sample: kept for the shortest window only, a table of
# thousands of groups ten minutes deep would be hundreds of MB.
GROUP_SAMPLES = 61

# BrokerConfig's defaults for the queues of RocketMQ's request thread pools. Requests here are
# answered on the event loop, with no queue ahead of them: their sizes and head waits are 0.
THREAD_POOL_QUEUE_CAPACITY = {"send": 10_000, "pull": 100_000, "query": 20_000}
END_TRANSACTION_QUEUE_CAPACITY = 100_000


class BrokerStats:
    def __init__(self) -> None:
        self.put_by_topic: dict[str, int] = {}
        self.put_bytes_by_topic: dict[str, int] = {}
        self.get_by_group: dict[str, int] = {}
        self.get_by_topic: dict[str, int] = {}
        self.put_total = 0
        self.get_total = 0
        self.boot_timestamp = int(time.time() * 1000)
        # The totals at the last two local midnights (BrokerStats.record runs at each): what
        # tools subtract for "today" and "yesterday". Both 0 until the first midnight passes.
        self.msg_put_total_yesterday_morning = 0
        self.msg_put_total_today_morning = 0
        self.msg_get_total_yesterday_morning = 0
        self.msg_get_total_today_morning = 0
        self._today = date.today()
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=TPS_WINDOWS[-1] + 1)
        self._group_samples: deque[tuple[float, dict[str, int]]] = deque(maxlen=GROUP_SAMPLES)
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
        """Once a second: the counters for the rates; at the first sample of a new day, the
        midnight totals."""
        now = time.monotonic()
        self._samples.append((now, self.put_total, self.get_total))
        self._group_samples.append((now, dict(self.get_by_group)))
        today = date.today()
        if today != self._today:
            # Days missed (the process paused over them) roll at most twice, as RocketMQ's
            # daily task catching up would: both mornings become now. A clock set back rolls
            # nothing.
            for _ in range(min((today - self._today).days, 2)):
                self.record_morning()
            self._today = today

    def record_morning(self) -> None:
        """Mirrors BrokerStats.record: this morning's totals become yesterday's."""
        self.msg_put_total_yesterday_morning = self.msg_put_total_today_morning
        self.msg_get_total_yesterday_morning = self.msg_get_total_today_morning
        self.msg_put_total_today_morning = self.put_total
        self.msg_get_total_today_morning = self.get_total

    @staticmethod
    def _rate(samples: deque, seconds: int, index: int, group: str | None = None) -> float:
        if len(samples) < 2:
            return 0.0
        newest = samples[-1]
        oldest = samples[max(0, len(samples) - 1 - seconds)]
        span = newest[0] - oldest[0]
        if span <= 0:
            return 0.0
        if group is not None:
            return (newest[index].get(group, 0) - oldest[index].get(group, 0)) / span
        return (newest[index] - oldest[index]) / span

    def put_tps(self, seconds: int = 10) -> float:
        return self._rate(self._samples, seconds, 1)

    def get_tps(self, seconds: int = 10) -> float:
        return self._rate(self._samples, seconds, 2)

    def group_get_tps(self, group: str, seconds: int = 10) -> float:
        return self._rate(self._group_samples, seconds, 1, group)

    def put_tps_windows(self) -> str:
        """``putTps`` as RocketMQ gives it: the 10 s, 60 s and 600 s rates, space-separated."""
        return " ".join(f"{self.put_tps(w):.4f}" for w in TPS_WINDOWS)

    def get_tps_windows(self) -> str:
        """``getTransferedTps``: messages handed out a second, over the three windows."""
        return " ".join(f"{self.get_tps(w):.4f}" for w in TPS_WINDOWS)


def thread_pool_runtime_info() -> dict[str, str]:
    """The thread-pool keys of GET_BROKER_RUNTIME_INFO (AdminBrokerProcessor.prepareRuntimeInfo),
    which rocketmq-dashboard and mqadmin brokerStatus read: nothing queued, nothing waiting."""
    info = {}
    for pool, capacity in THREAD_POOL_QUEUE_CAPACITY.items():
        info[f"{pool}ThreadPoolQueueSize"] = "0"
        info[f"{pool}ThreadPoolQueueCapacity"] = str(capacity)
        info[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
    info["EndTransactionQueueSize"] = "0"
    info["EndTransactionThreadPoolQueueCapacity"] = str(END_TRANSACTION_QUEUE_CAPACITY)
    return info


def human_readable_byte_count(count: int) -> str:
    """MixAll.humanReadableByteCount(bytes, false): ``"512 B"``, ``"1.5 KiB"``, ``"3.9 TiB"``."""
    if count < 1024:
        return f"{count} B"
    exp = min(int(math.log(count) / math.log(1024)), 6)
    return f"{count / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def commit_log_dir_capacity(path: str) -> str | None:
    """``commitLogDirCapacity``: the store's file system, ``"Total : 98.3 GiB, Free : 41.0
    GiB."`` (free as a non-root writer sees it); None when it cannot be asked (no such key is
    given, as RocketMQ gives none for a missing folder)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return (f"Total : {human_readable_byte_count(usage.total)}, "
            f"Free : {human_readable_byte_count(usage.free)}.")
