"""The client's own errors (beside the remoting errors its calls raise)."""

from __future__ import annotations

from common.errors import RocketDeskError


class MQClientError(RocketDeskError):
    """A send or client call that could not be done; says why in a sentence."""


class ClientArgumentError(MQClientError, ValueError):
    """A value the caller gave that no call can use (an address, a msgId, a missing listener)."""
