"""Typed refusals of the name server: requests that decode but that the tables will not take.

::

    RocketDeskError
    └── NamesrvError                (.response_code: what the requester is answered)
        ├── KVConfigLimitError      a PUT_KV_CONFIG past a namespace's or the whole table's bound
        └── BrokerNameConflictError a broker name claimed in a second cluster by a new address

A malformed header or body is not one of these: it is the remoting layer's HeaderError.
"""

from __future__ import annotations

from cluster.remoting.codes import ResponseCode
from common.errors import RocketDeskError


class NamesrvError(RocketDeskError):
    """Base of the name server's refusals; ``str()`` is the remark the requester gets."""

    response_code: int = ResponseCode.SYSTEM_ERROR


class KVConfigLimitError(NamesrvError):
    """The put would take a namespace or the table past its bound (kv_config.py says why).

    Answered MESSAGE_ILLEGAL: RocketMQ's code for "this request's content is over a size limit"
    (a body or a property too long), which clients already treat as not worth retrying; the
    name server has no code of its own for a full KV table."""

    response_code = ResponseCode.MESSAGE_ILLEGAL


class BrokerNameConflictError(NamesrvError):
    """A registration from an address the broker name does not list, under another cluster."""
