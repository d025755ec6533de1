"""The Topics table's rows, without Qt."""

from __future__ import annotations

from gui.models.topics import ago, matches, topic_row


def test_a_topic_row_from_its_route_stats_groups_and_rate():
    route = {"queueDatas": [{"brokerName": "a", "readQueueNums": 4, "writeQueueNums": 4,
                             "perm": 6},
                            {"brokerName": "b", "readQueueNums": 2, "writeQueueNums": 2,
                             "perm": 6}]}
    stats = {0: {"minOffset": 0, "maxOffset": 10, "lastUpdateTimestamp": 1_000_000},
             1: {"minOffset": 5, "maxOffset": 7, "lastUpdateTimestamp": 2_000_000}}
    points = [(0.0, 100.0), (50.0, 10.0), (100.0, 20.0)]
    row = topic_row("Orders", route, stats, ["CID-b", "CID-a"], points)
    assert (row.queues, row.permission, row.messages, row.groups) == (6, "read/write", 12,
                                                                     ("CID-a", "CID-b"))
    assert row.put_tps == 15.0  # the last minute only
    cells = row.cells(now=2_000 + 90)
    assert cells[3] == "12"
    assert cells[5] == "CID-a, CID-b"
    assert cells[6] == "1 min ago"
    assert topic_row("Empty", {}, {}, [], None).cells()[4:] == ["-", "none yet", "never"]


def test_permissions_filter_and_ages():
    route = {"queueDatas": [{"perm": 4, "readQueueNums": 1}, {"perm": 6, "readQueueNums": 1}]}
    assert topic_row("T", route, {}, [], None).permission == "mixed"
    row = topic_row("Payments", {}, {}, ["CID-billing"], None)
    assert matches(row, "pay")
    assert matches(row, "billing")
    assert not matches(row, "orders")
    assert (ago(0), ago(10_000, now=15), ago(1, now=7200)) == ("never", "5 s ago", "1 h ago")
