"""The store's runtime information: RocketMQ's GET_BROKER_RUNTIME_INFO keys for the store."""

from __future__ import annotations

import math
import time


def commit_log_positions(store) -> dict[str, int]:
    """CommitLog positions: max (written), committed, flushed, dispatched, min."""
    queue = store.commit_log.mapped_file_queue
    return {
        "min": store.commit_log.get_min_offset(),
        "max": queue.get_max_wrote_position(),
        "committed": queue.get_max_offset(),
        "flushed": queue.flushed_where,
        "dispatched": store.reput.reput_from_offset,
    }


def human_readable_byte_count(count: int) -> str:
    """As RocketMQ words remainHowManyDataToFlush (MixAll.humanReadableByteCount, binary
    units): "512 B", "1.5 KiB", "3.0 GiB". mqadmin brokerStatus shows the text as it is."""
    if count < 1024:
        return f"{count} B"
    exponent = min(int(math.log(count, 1024)), 6)
    if 1024 ** exponent > count:  # (a float log just below a power of 1024)
        exponent -= 1
    return f"{count / 1024 ** exponent:.1f} {'KMGTPE'[exponent - 1]}iB"


def store_runtime_info(store) -> dict[str, str]:
    """RocketMQ's store runtime keys plus RocketDesk's positions and histogram."""
    info = store.stats.runtime_info()
    positions = commit_log_positions(store)
    commit_log = store.commit_log
    in_lock = commit_log.begin_time_in_lock  # read once: the put path clears it concurrently
    info.update({
        "commitLogMinOffset": str(positions["min"]),
        "commitLogMaxOffset": str(positions["max"]),
        "commitLogCommittedOffset": str(positions["committed"]),
        "commitLogFlushedOffset": str(positions["flushed"]),
        "commitLogDispatchedOffset": str(positions["dispatched"]),
        "dispatchBehindBytes": str(store.reput.behind()),
        "commitLogDiskRatio": f"{store.clean_service.last_usage:.4f}",
        "consumeQueueDiskRatio": f"{store.clean_service.last_usage:.4f}",
        "pageCacheLockTimeMills": str(int((time.monotonic() - in_lock) * 1000) if in_lock else 0),
        "remainTransientStoreBufferNumbs": str(
            store.pool.available_buffer_nums() if store.pool else 0
        ),
        "remainHowManyDataToFlush": human_readable_byte_count(
            commit_log.mapped_file_queue.remain_how_many_data_to_flush()
        ),
        "earliestMessageTimeStamp": str(_earliest_commit_log_time(commit_log)),
    })
    return info


def _earliest_commit_log_time(commit_log) -> int:
    first = commit_log.mapped_file_queue.get_first_mapped_file()
    if first is None or first.read_position == 0:
        return -1
    stored = commit_log.pickup_store_timestamp(first.file_from_offset, 80)
    return -1 if stored is None else stored
