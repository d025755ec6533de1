"""ServiceThread's shutdown (storage/service_thread.py): a thread stuck past the wait is left
running and said to be abandoned, so the store's shutdown syncs nothing more on that disk."""

from __future__ import annotations

import threading

from storage.service_thread import ServiceThread


class _Stuck(ServiceThread):
    """A service whose round blocks (as a flush in msync on a hung disk would)."""

    name = "Stuck"

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()

    def run_once(self) -> None:
        self.inside.set()
        self.release.wait(10)


class _Idle(ServiceThread):
    name = "Idle"

    def run_once(self) -> None:
        self.wait_for_running(10)


def test_a_thread_that_outlives_the_wait_is_abandoned():
    service = _Stuck()
    service.start()
    assert service.inside.wait(5)
    service.shutdown(0.05)
    assert service.abandoned
    service.release.set()


def test_a_thread_that_stops_in_time_is_not():
    service = _Idle()
    service.start()
    service.shutdown(5)
    assert not service.abandoned
