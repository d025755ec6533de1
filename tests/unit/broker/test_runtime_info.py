"""GET_BROKER_RUNTIME_INFO carries every key rocketmq-dashboard and mqadmin brokerStatus read,
in RocketMQ's formats."""

from __future__ import annotations

import json
import re
from datetime import date, timedelta

import pytest

from cluster.broker.stats import BrokerStats, human_readable_byte_count
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.unit.broker.broker_harness import ask, on_a_broker

THREE_RATES = re.compile(r"\d+\.\d+ \d+\.\d+ \d+\.\d+")
SIZE = r"\d+(\.\d)? ([KMGTPE]i)?B"


def test_runtime_info_has_the_keys_tools_read(tmp_path):
    # The dashboard splits getTotalTps on spaces every minute: a missing key threw there.
    async def scenario(broker):
        answer = await ask(broker, request(RequestCode.GET_BROKER_RUNTIME_INFO))
        assert answer.code == ResponseCode.SUCCESS
        table = json.loads(answer.body)["table"]
        for key in ("putTps", "getTransferedTps", "getTotalTps", "getFoundTps", "getMissTps"):
            assert THREE_RATES.fullmatch(table[key]), (key, table[key])
        for key in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                    "msgPutTotalTodayNow", "msgGetTotalYesterdayMorning",
                    "msgGetTotalTodayMorning", "msgGetTotalTodayNow",
                    "startAcceptSendRequestTimeStamp", "dispatchMaxBuffer"):
            assert table[key].isdigit(), (key, table[key])
        for pool, capacity in (("send", "10000"), ("pull", "100000"), ("query", "20000")):
            assert table[f"{pool}ThreadPoolQueueSize"] == "0"
            assert table[f"{pool}ThreadPoolQueueCapacity"] == capacity
            assert table[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] == "0"
        assert re.fullmatch(f"Total : {SIZE}, Free : {SIZE}\\.", table["commitLogDirCapacity"])

    on_a_broker(tmp_path, scenario)


def test_the_midnight_totals_roll_at_the_first_sample_of_a_day():
    stats = BrokerStats()
    stats.record_send("T", 5, 50)
    stats.record_get("cg", "T", 2, 20)
    stats.sample()
    assert (stats.msg_put_total_today_morning, stats.msg_get_total_today_morning) == (0, 0)
    stats._today = date.today() - timedelta(days=1)
    stats.sample()  # midnight passed
    assert (stats.msg_put_total_yesterday_morning, stats.msg_put_total_today_morning) == (0, 5)
    assert (stats.msg_get_total_yesterday_morning, stats.msg_get_total_today_morning) == (0, 2)
    stats.record_send("T", 3, 30)
    stats._today = date.today() - timedelta(days=1)
    stats.sample()
    assert (stats.msg_put_total_yesterday_morning, stats.msg_put_total_today_morning) == (5, 8)
    stats.sample()  # the same day: nothing rolls
    assert (stats.msg_put_total_yesterday_morning, stats.msg_put_total_today_morning) == (5, 8)
    stats.record_send("T", 1, 10)
    stats._today = date.today() - timedelta(days=5)  # paused over days: both mornings are now
    stats.sample()
    assert (stats.msg_put_total_yesterday_morning, stats.msg_put_total_today_morning) == (9, 9)


def test_rates_are_given_over_ten_sixty_and_six_hundred_seconds(monkeypatch):
    clock = iter(range(10_000))
    monkeypatch.setattr("cluster.broker.stats.time.monotonic", lambda: next(clock))
    stats = BrokerStats()
    for _ in range(600):
        stats.record_send("T", 2, 20)
        stats.sample()
    stats.record_send("T", 600, 20)  # a burst in the newest second
    stats.sample()
    # (1800 - 1182) / 10, (1800 - 1082) / 60, (1800 - 2) / 600: ten minutes are remembered
    assert stats.put_tps_windows() == "61.8000 11.9667 2.9967"


@pytest.mark.parametrize(("count", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (100 * 1024**3, "100.0 GiB"), (5 * 1024**5 + 1, "5.0 PiB"),
])
def test_sizes_are_written_as_mix_all_writes_them(count, text):
    assert human_readable_byte_count(count) == text
