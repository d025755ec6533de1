"""The topology picture's boxes, arrows and colours from the model's node rows, without Qt."""

from __future__ import annotations

from gui.models.topology import BOX_HEIGHT, build_topology, condition


def node(name, kind="broker", role="ASYNC_MASTER", state="running", health="ok", **more):
    group, _, broker_id = name.rpartition("-")
    row = {"name": name, "kind": kind, "role": role, "state": state, "health": health,
           "address": f"127.0.0.1:{10000 + len(name)}"}
    if kind == "broker":
        row.update(group=group, brokerId=int(broker_id))
    return {**row, **more}


def two_groups(**states) -> list[dict]:
    rows = [node("namesrv-0", "namesrv", "NAMESRV"), node("proxy-0", "proxy", "PROXY"),
            node("broker-b-0"), node("broker-a-1", role="SLAVE"), node("broker-a-0", "broker",
                                                                        "SYNC_MASTER"),
            node("broker-b-1", role="SLAVE")]
    return [dict(r, **states.get(r["name"], {})) for r in rows]


def test_name_servers_on_top_and_a_column_per_group_master_first():
    picture = build_topology(two_groups(), {"broker-a-0": {"haLag": 0},
                                            "broker-b-0": {"haLag": 3 * 2**20}})
    boxes = {b.name: b for b in picture.boxes}
    assert boxes["namesrv-0"].y == boxes["proxy-0"].y < boxes["broker-a-0"].y
    a0, a1, b0, b1 = (boxes[n] for n in ("broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"))
    assert a0.x == a1.x < b0.x == b1.x  # groups side by side, in name order
    assert a0.y == b0.y
    assert a1.y == b1.y
    assert a1.y >= a0.y + BOX_HEIGHT
    # No two boxes overlap, and all fit in the picture.
    for one in picture.boxes:
        assert one.x + one.width <= picture.width
        assert one.y + one.height <= picture.height
        for other in picture.boxes:
            if other is not one:
                assert (one.x + one.width <= other.x or other.x + other.width <= one.x
                        or one.y + one.height <= other.y or other.y + other.height <= one.y)
    assert [(link.source, link.target, link.label) for link in picture.links] == [
        ("broker-a-0", "broker-a-1", "HA lag 0 B"), ("broker-b-0", "broker-b-1", "HA lag 3.0 MiB")]
    assert not any(link.dashed for link in picture.links)
    assert a0.lines == ["broker-a-0", "sync master", "127.0.0.1:10010", "serving"]
    assert boxes["proxy-0"].lines[1] == "proxy (5.x clients)"
    assert picture.box_at(a1.x + 5, a1.y + 5) is a1
    assert picture.box_at(1, 1) is None


def test_a_fault_drill_shows_as_it_happens():
    # The master killed, a slave paused: red and orange boxes, replication drawn as broken.
    picture = build_topology(two_groups(**{
        "broker-a-0": {"state": "died", "health": "-"},
        "broker-b-1": {"state": "paused", "health": "-"},
        "namesrv-0": {"health": "not answering"}}), {})
    boxes = {b.name: b for b in picture.boxes}
    assert boxes["broker-a-0"].edge == "#c62828"
    assert boxes["broker-a-0"].lines[-1] == "died"
    assert boxes["broker-b-1"].edge == "#ef6c00"
    assert boxes["broker-b-1"].lines[-1] == "paused"
    assert boxes["namesrv-0"].lines[-1] == "not answering"
    assert boxes["broker-b-0"].edge == "#2e7d32"
    assert "SIGSTOP" in boxes["broker-b-1"].tooltip
    assert [(link.label, link.dashed, link.color) for link in picture.links] == [
        ("not replicating", True, "#c62828"), ("not replicating", True, "#c62828")]


def test_a_slave_far_behind_is_drawn_as_a_warning_and_an_unknown_lag_says_so():
    picture = build_topology(two_groups(), {"broker-a-0": {"haLag": 512 * 2**20}})
    by_source = {link.source: link for link in picture.links}
    assert by_source["broker-a-0"].color == "#ef6c00"
    assert by_source["broker-a-0"].label == "HA lag 512.0 MiB"
    assert by_source["broker-b-0"].label == "HA lag unknown"


def test_a_cluster_run_elsewhere_is_grouped_by_its_names():
    rows = [{"name": "namesrv 10.0.0.1:9876", "kind": "namesrv", "role": "NAMESRV",
             "address": "10.0.0.1:9876", "state": "external", "health": "ok"},
            {"name": "broker-x-0", "kind": "broker", "role": "MASTER", "address": "10.0.0.2:10911",
             "state": "running", "health": "ok"},
            {"name": "broker-x-1", "kind": "broker", "role": "SLAVE", "address": "10.0.0.3:10911",
             "state": "running", "health": "ok"}]
    picture = build_topology(rows)
    assert [(link.source, link.target) for link in picture.links] == [("broker-x-0", "broker-x-1")]
    assert picture.box("broker-x-0").y < picture.box("broker-x-1").y


def test_no_cluster_says_why_the_picture_is_empty_and_states_read_as_words():
    empty = build_topology([])
    assert empty.boxes == []
    assert "No cluster open" in empty.empty_reason
    assert condition({"state": "running", "health": "-"}) == "starting"
    assert condition({"state": "stopped"}) == "stopped"
    assert condition({"state": "something new"}) == "stopped"


def test_with_several_slaves_the_masters_figure_is_an_upper_bound_for_each():
    rows = [node("broker-a-0"), node("broker-a-1", role="SLAVE"), node("broker-a-2", role="SLAVE")]
    picture = build_topology(rows, {"broker-a-0": {"haLag": 2048}})
    assert [link.label for link in picture.links] == ["HA lag ≤ 2.0 KiB (slowest of 2)"] * 2
