"""The Export tab's list of exports from job records, without Qt."""

from __future__ import annotations

from gui.models.exports import export_rows


def test_rows_say_where_each_export_stands():
    records = [
        {"id": "b", "created": 200.0, "state": "running", "topics": ["Live"], "exported": 4000,
         "lag": 12, "service": True, "continuous": True, "out": "/lake/live"},
        {"id": "a", "created": 100.0, "state": "failed", "topics": ["Orders", "Audit"],
         "exported": 0, "total": 9000, "out": "/x", "error": "ExportError: no such topic"},
        {"id": "c", "created": 50.0, "state": "running", "topics": ["Gone"], "pid": 1},
    ]
    rows = export_rows(records, lambda r: "lost" if r["id"] == "c" else r["state"])
    live, failed, lost = rows
    assert live.running
    assert live.cells()[1:] == ["running (continuous)", "Live", "4,000", "12", "warm", "/lake/live"]
    assert failed.cells()[1:6] == ["failed", "Orders, Audit", "0 of 9,000", "-", "its own"]
    assert failed.tooltip() == "export a: ExportError: no such topic"
    assert (lost.state, lost.running, lost.cells()[3]) == ("lost", False, "-")
