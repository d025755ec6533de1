"""Deleting expired store files, and refusing writes when the disk is nearly full.

Mirrors RocketMQ's ``CleanCommitLogService`` and ``CleanConsumeQueueService``. Every
``cleanResourceInterval`` (10 s):

* CommitLog files untouched for ``fileReservedTime`` hours are deleted when it is the
  ``deleteWhen`` hour, when the disk holding the store is more than ``diskMaxUsedSpaceRatio`` %
  used, or when a user asked (``execute_delete_files_manually``). Above
  ``diskSpaceCleanForciblyRatio`` % files go regardless of age.
* Above ``diskSpaceWarningLevelRatio`` % the store raises its DISK_FULL running flag and refuses
  writes with SERVICE_NOT_AVAILABLE until usage drops again (checked every round, so writes come
  back within ``cleanResourceInterval`` of space being freed). This is the early refusal; a disk
  that fills up between two checks is caught by the writers themselves (ENOSPC, file_space.py).
* ConsumeQueue and index files whose entries all point below the CommitLog's new minimum go too.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

from storage.errors import describe_os_error
from storage.running_flags import DISK_FULL
from storage.service_thread import ServiceThread

log = logging.getLogger(__name__)

MANUAL_DELETE_ROUNDS = 20


def disk_used_ratio(path: str) -> float:
    """Fraction (0..1) of the file system holding ``path`` that is in use."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)  # the CommitLog folder appears with its first file
    usage = shutil.disk_usage(path)
    return (usage.total - usage.free) / usage.total if usage.total else 0.0


def is_delete_hour(delete_when: str, hour: int) -> bool:
    """Whether ``hour`` is one of ``deleteWhen``'s ``;``-separated hours."""
    return any(part.strip() and int(part) == hour for part in delete_when.split(";"))


class CleanService(ServiceThread):
    """Deletes expired CommitLog, ConsumeQueue and index files; tracks the disk-full flag."""

    name = "CleanService"

    def __init__(self, store, usage_of: Callable[[str], float] = disk_used_ratio) -> None:
        super().__init__()
        self.store = store
        self.usage_of = usage_of
        self.manual_delete_rounds = 0
        self.disk_full = False
        self.last_usage = 0.0

    def run_once(self) -> None:
        self.clean_once()
        self._stopped.wait(self.store.config.clean_resource_interval / 1000)

    def check_disk(self) -> tuple[bool, bool]:
        """Update the disk-full flag; returns (space to delete, clean immediately)."""
        config = self.store.config
        try:
            usage = self.usage_of(config.commit_log_dir)
        except OSError as exc:  # the store's folder is gone or unreadable: keep the last verdict
            log.warning("cannot tell how full the disk is: %s", describe_os_error(exc))
            usage = self.last_usage
        self.last_usage = usage
        percent = usage * 100
        full = percent > config.disk_space_warning_level_ratio
        flags = self.store.running_flags
        if full:
            flags.set(DISK_FULL, (
                f"the disk is {usage:.0%} full, above diskSpaceWarningLevelRatio "
                f"{config.disk_space_warning_level_ratio}%: writes are refused until space is freed"
            ))
        else:
            flags.clear(DISK_FULL)
        self.disk_full = full
        clean_forcibly = percent > config.disk_space_clean_forcibly_ratio
        return percent > config.disk_max_used_space_ratio or clean_forcibly, clean_forcibly

    def clean_once(self) -> int:
        """One round; returns how many CommitLog files were deleted."""
        store = self.store
        config = store.config
        space_to_delete, clean_immediately = self.check_disk()
        manual = self.manual_delete_rounds > 0
        if manual:
            self.manual_delete_rounds -= 1
        time_to_delete = is_delete_hour(config.delete_when, time.localtime().tm_hour)
        deleted = 0
        if time_to_delete or space_to_delete or manual:
            deleted = store.commit_log.mapped_file_queue.delete_expired_file_by_time(
                config.file_reserved_time * 3_600_000,
                config.delete_commit_log_files_interval,
                config.destroy_maped_file_interval_forcibly,
                clean_immediately or (manual and config.file_reserved_time == 0),
            )
            if deleted:
                log.info("deleted %d expired CommitLog files", deleted)
        store.clean_derived_files()
        return deleted
