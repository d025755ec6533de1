"""The Consumer groups table's rows, without Qt."""

from __future__ import annotations

from gui.models.groups import consume_kind, group_row, rate


def test_a_group_row_from_its_stats_clients_and_consumed_totals():
    stats = {0: {"brokerOffset": 100, "consumerOffset": 60, "inFlight": 3},
             1: {"brokerOffset": 50, "consumerOffset": -1, "inFlight": 0}}
    connections = {"consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                   "connectionSet": [{"clientId": "a", "consumeType": "CONSUME_POP"},
                                     {"clientId": "b"}]}
    row = group_row("CID-a", {"retryMaxTimes": 3}, stats, connections,
                    [(0.0, 0), (30.0, 300), (60.0, 900)])
    assert (row.lag, row.in_flight, row.clients, row.how, row.retry_max_times) == (
        90, 3, 2, "4.x push + 5.x POP", 3)
    assert row.consume_tps == 15.0
    assert row.cells()[3] == "2"
    offline = group_row("CID-b", {}, {}, {}, [])
    assert offline.cells()[1:5] == ["0", "-", "offline", "-"]


def test_consume_kinds_and_rates():
    assert consume_kind({"messageModel": "BROADCASTING", "connectionSet": [
        {"consumeType": "CONSUME_PASSIVELY"}]}) == "4.x push (broadcast)"
    assert rate([(0, 5)]) is None
    assert rate([(0, 0), (10, 50)]) == 5.0
