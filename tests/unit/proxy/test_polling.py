"""How long a 5.x receive waits, as RocketMQ's proxy decides it."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration

from cluster.proxy.receiving import MAX_POLL_MS, POLL_MARGIN_MS, polling_ms
from cluster.proxy.schema import pb


class _Deadline:
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def time_remaining(self) -> float | None:
        return self.seconds


def _receive(timeout_ms: int | None = None):
    request_ = pb.ReceiveMessageRequest()
    if timeout_ms is not None:
        request_.long_polling_timeout.CopyFrom(Duration(seconds=timeout_ms // 1000,
                                                        nanos=timeout_ms % 1000 * 1_000_000))
    return request_


@pytest.mark.parametrize(("timeout_ms", "left_s", "expected"), [
    (5_000, 30.0, 5_000),  # the client's own
    (None, 8.0, 8_000 - POLL_MARGIN_MS),  # an older client: what its deadline leaves
    (120_000, 300.0, MAX_POLL_MS),  # long awaits are clamped, not refused
    (20_000, 8.0, 8_000 - POLL_MARGIN_MS),  # never past the call's deadline
    (0, 30.0, 0),
])
def test_the_wait_is_the_clients_within_the_broker_and_the_deadline(timeout_ms, left_s, expected):
    assert polling_ms(_receive(timeout_ms), _Deadline(left_s)) == expected


def test_a_timeout_that_is_no_duration_is_refused():
    request_ = _receive()
    request_.long_polling_timeout.CopyFrom(Duration(seconds=-5))
    assert polling_ms(request_, _Deadline(None)) is None
