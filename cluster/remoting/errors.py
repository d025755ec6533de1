"""Typed errors of the remoting layer.

::

    RemotingError
    ├── LocalProtocolError      we were asked to send something the protocol cannot carry
    ├── RemoteProtocolError     the peer sent bytes that are not a valid frame (.response_code)
    ├── RemotingTimeoutError    no response within the timeout
    ├── RemotingConnectError    the connection could not be made or was lost
    └── BrokerResponseError     the peer answered with a non-success code (.response_code, .remark)
"""

from __future__ import annotations

from common.errors import RocketDeskError


class RemotingError(RocketDeskError):
    """Base of every remoting error."""


class LocalProtocolError(RemotingError):
    """Our side tried to break the protocol (a header too large to encode, say)."""


class RemoteProtocolError(RemotingError):
    """The peer sent bytes that do not decode; the connection is closed, nothing else is hurt."""

    def __init__(self, message: str, response_code: int = 1) -> None:
        super().__init__(message)
        self.response_code = response_code


class RemotingTimeoutError(RemotingError):
    """A request got no response in time."""


class RemotingConnectError(RemotingError):
    """A connection could not be opened, or closed while a request waited."""


class BrokerResponseError(RemotingError):
    """A response whose code is not SUCCESS."""

    def __init__(self, response_code: int, remark: str | None, request_code: int | None = None) -> None:
        name = _code_name(response_code)
        text = f"{name} ({response_code})"
        if remark:
            text += f": {remark.strip()}"
        super().__init__(text)
        self.response_code = response_code
        self.remark = remark
        self.request_code = request_code


def _code_name(code: int) -> str:
    from cluster.remoting.codes import ResponseCode

    try:
        return ResponseCode(code).name
    except ValueError:
        return "response code"
