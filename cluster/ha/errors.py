"""Typed errors of replication."""

from __future__ import annotations

from common.errors import RocketDeskError


class HAError(RocketDeskError):
    """Base of replication errors."""


class HAProtocolError(HAError):
    """The peer sent bytes that cannot be a valid report or transfer frame."""


class OffsetMismatchError(HAError):
    """A transfer does not start where the slave's CommitLog ends: the two have diverged."""

    def __init__(self, slave_offset: int, master_offset: int) -> None:
        super().__init__(
            f"master pushed offset {master_offset} but the slave's CommitLog ends at {slave_offset}")
        self.slave_offset = slave_offset
        self.master_offset = master_offset
