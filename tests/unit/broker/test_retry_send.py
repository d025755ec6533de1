"""A message sent back to %RETRY%<group> with SEND_MESSAGE (an orderly consumer giving up, or a
client whose CONSUMER_SEND_MSG_BACK failed) goes to the group's DLQ once its reconsume times
reach the most it may have, as RocketMQ 4.x decides (reconsumeTimes >= maxReconsumeTimes)."""

from __future__ import annotations

import asyncio

import pytest

from cluster.remoting.codec import encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message import properties_to_string
from tests.unit.broker.test_pull_answers import _broker, _connection, _until
from tests.unit.broker.test_send_lane import _answers


def _send_back(times: int, most: int, opaque: int) -> bytes:
    fields = {"a": "cg-orderly", "b": "%RETRY%cg-orderly", "c": "TBW102", "d": 1, "e": 0,
              "f": 0, "g": 1_700_000_000_000, "h": 0,
              "i": properties_to_string({"UNIQ_KEY": f"{opaque:032X}", "WAIT": "true",
                                         "DELAY": "6"}),
              "j": times, "k": False, "l": most, "m": False}
    return encode(request(RequestCode.SEND_MESSAGE_V2, fields, b"gave up", opaque=opaque,
                          version=121))


@pytest.mark.parametrize(("times", "dead"), [(2, False), (3, True), (4, True)])
def test_a_retry_at_its_most_reconsume_times_goes_to_the_dlq(tmp_path, times, dead):
    async def run():
        broker = await _broker(tmp_path)
        try:
            connection, transport = _connection(broker)
            connection.data_received(_send_back(times, 3, 7))
            # (a dead one creates the DLQ topic, answered once its topics.json write is done:
            # on a loaded disk that can take a while)
            assert await _until(lambda: transport.writes, 10)
            [(code, _opaque, remark, _fields)] = _answers(b"".join(transport.writes))
            assert code == ResponseCode.SUCCESS, remark
            broker.store.wait_dispatched()
            in_dlq = broker.store.get_max_offset_in_queue("%DLQ%cg-orderly", 0)
            assert in_dlq == (1 if dead else 0)
        finally:
            await broker.stop()

    asyncio.run(run())
