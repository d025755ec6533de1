"""The Overview's figures and alerts, from the cluster model's samples, without Qt."""

from __future__ import annotations

from collections import deque

from gui.models.overview import build_overview


def sample(t, put, get=0.0, role="ASYNC_MASTER", **more):
    return {"time": t, "putTps": put, "getTps": get, "role": role, **more}


def test_a_healthy_cluster_at_a_glance():
    nodes = [{"name": "namesrv-0", "kind": "namesrv", "state": "running", "health": "ok",
              "diskBytes": 10},
             {"name": "broker-a-0", "kind": "broker", "role": "SYNC_MASTER", "state": "running",
              "health": "ok", "diskBytes": 1000, "timersPending": 3, "popInFlight": 2},
             {"name": "broker-a-1", "kind": "broker", "role": "SLAVE", "state": "running",
              "health": "ok", "diskBytes": 900},
             {"name": "proxy-0", "kind": "proxy", "role": "PROXY", "state": "running",
              "health": "ok", "diskBytes": 0}]
    samples = {"broker-a-0": deque([sample(100, 10.0, 5.0), sample(101, 20.0, 7.0,
                                                                 diskRatio=0.2, haLag=100)]),
               "broker-a-1": deque([sample(101, 0.0, 0.0, role="SLAVE")])}
    lag = {"CID-a": deque([(100, 50), (105, 40)]), "CID-b": deque([(105, 7)])}
    topics = {"Orders": deque([(105, 1000)]), "Payments": deque([(105, 500)]),
              "%RETRY%CID-a": deque([(105, 3)])}
    view = build_overview(nodes, samples, lag, topics)
    assert (view.nodes_up, view.nodes_total, view.masters, view.slaves, view.proxies) == (
        4, 4, 1, 1, 1)
    assert (view.topics, view.messages_stored, view.disk_bytes) == (2, 1500, 1910)
    assert (view.put_tps, view.get_tps, view.put_history) == (20.0, 7.0, [10.0, 20.0])
    assert view.worst_lag == ("CID-a", 40)
    assert view.worst_ha_lag == ("broker-a-0", 100)
    assert (view.timers_pending, view.pop_in_flight, view.disk_ratio) == (3, 2, 0.2)
    assert view.alerts == []
    assert view.healthy


def test_alerts_name_what_needs_a_look_and_where():
    nodes = [{"name": "broker-a-0", "kind": "broker", "role": "ASYNC_MASTER", "state": "died",
              "health": "-"},
             {"name": "broker-b-1", "kind": "broker", "role": "SLAVE", "state": "paused",
              "health": "-"},
             {"name": "proxy-0", "kind": "proxy", "state": "running", "health": "not answering"}]
    samples = {"broker-b-0": deque([sample(1, 1.0, diskRatio=0.91, haLag=200 * 2**20)]),
               "broker-c-0": deque([sample(1, 1.0, diskRatio=0.8)])}
    lag = {"CID-slow": deque([(1, 25_000)])}
    topics = {"%DLQ%CID-slow": deque([(1, 4)])}
    view = build_overview(nodes, samples, lag, topics)
    assert not view.healthy
    kinds = [(a.severity, a.view, a.subject) for a in view.alerts]
    assert [k for k in kinds if k[0] == "error"] == kinds[:3]  # errors first
    assert ("error", "cluster", "broker-a-0") in kinds  # died
    assert ("error", "cluster", "proxy-0") in kinds  # not answering
    assert ("warning", "cluster", "broker-b-1") in kinds  # paused
    assert ("error", "cluster", "broker-b-0") in kinds  # disk 91 %: writes refused
    assert ("warning", "cluster", "broker-c-0") in kinds  # disk 80 %: files deleted early
    assert ("warning", "charts", "broker-b-0") in kinds  # slave 200 MiB behind
    assert ("warning", "groups", "CID-slow") in kinds  # lag, and its dead letters
    texts = " | ".join(a.text for a in view.alerts)
    assert "4 dead letters of group CID-slow" in texts
    assert "disk is 91% full: past 90% it refuses writes" in texts
    assert "disk is 80% full: past 75% expired files are deleted early, and writes stop past 90%" in texts


def test_transactions_and_clients_at_a_glance_and_an_alert_for_transactions_left_open():
    nodes = [{"name": "broker-a-0", "kind": "broker", "role": "ASYNC_MASTER", "state": "running",
              "health": "ok", "transactionsOpen": 12, "transactionsChecking": 0,
              "producers": 3, "consumers": 2},
             {"name": "broker-b-0", "kind": "broker", "role": "ASYNC_MASTER", "state": "running",
              "health": "ok", "transactionsOpen": 4, "transactionsChecking": 1,
              "producers": 2, "consumers": 5},
             {"name": "broker-b-1", "kind": "broker", "role": "SLAVE", "state": "running",
              "health": "ok"}]
    view = build_overview(nodes, {}, {}, {})
    assert (view.transactions_open, view.transactions_checking) == (16, 1)
    # A client heartbeats every broker it uses: the most one broker sees, not the sum.
    assert (view.producers, view.consumers) == (3, 5)
    [alert] = view.alerts
    assert alert.severity == "warning"
    assert alert.text.startswith("1 transaction on broker-b-0 not committed or rolled back")
    assert (alert.view, alert.subject) == ("topics", "transactions")
    # Open but young transactions are traffic, not a problem.
    nodes[1]["transactionsChecking"] = 0
    assert build_overview(nodes, {}, {}, {}).alerts == []
