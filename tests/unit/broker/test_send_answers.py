"""What a send's answer names for messages that wait elsewhere before delivery: a half message
(in the half topic), a delayed one (in the schedule topic), a timer message. As RocketMQ, the
answer names the queue the sender asked for, not the one the message waits in."""

from __future__ import annotations

import time

import pytest

from cluster.remoting.codec import encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message import properties_to_string
from tests.unit.broker.test_pull_answers import _connection, _on_a_broker, _until
from tests.unit.broker.test_send_lane import _answers


def _send(topic: str, queue_id: int, props: dict[str, str], opaque: int) -> bytes:
    fields = {"a": "pg", "b": topic, "c": "TBW102", "d": 8, "e": queue_id, "f": 0,
              "g": int(time.time() * 1000), "h": 0,
              "i": properties_to_string({"UNIQ_KEY": f"{opaque:032X}", "WAIT": "true", **props}),
              "j": 0, "k": False, "m": False}
    return encode(request(RequestCode.SEND_MESSAGE_V2, fields, b"body", opaque=opaque))


@pytest.mark.parametrize("props", [
    {"TRAN_MSG": "true", "PGROUP": "pg"},  # (its answer named queue 0, the half queue)
    {"DELAY": "3"},
    {"TIMER_DELAY_SEC": "60"},
], ids=["half message", "delay level", "timer"])
def test_a_sends_answer_names_the_queue_asked_for(tmp_path, props):
    async def scenario(broker):
        connection, transport = _connection(broker)
        connection.data_received(_send("Wide", 3, props, 7))
        assert await _until(lambda: _answers(b"".join(transport.writes)), 5)
        [(code, _, remark, fields)] = _answers(b"".join(transport.writes))
        assert code == ResponseCode.SUCCESS, remark
        assert fields["queueId"] == "3"

    _on_a_broker(tmp_path, scenario)
