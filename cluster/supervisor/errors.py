"""Typed errors of the supervisor; each message is a sentence a user can act on."""

from __future__ import annotations

from common.errors import RocketDeskError


class SupervisorError(RocketDeskError):
    """Base of supervisor errors."""


class SpecError(SupervisorError):
    """A cluster spec that cannot describe a cluster."""


class ClusterNotFoundError(SupervisorError):
    pass


class ClusterExistsError(SupervisorError):
    pass


class NodeNotFoundError(SupervisorError):
    pass


class NodeFailedError(SupervisorError):
    """A node died or never became ready; carries its last log lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message + (f"\n--- last log lines ---\n{log_tail}" if log_tail else ""))
        self.log_tail = log_tail
