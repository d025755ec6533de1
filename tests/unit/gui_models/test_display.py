"""The console's wording, without Qt: binary bodies never shown as replacement characters,
properties and broker addresses as people read them, counts without SI prefixes."""

from __future__ import annotations

from gui.models.display import (
    body_preview,
    broker_addrs_text,
    count,
    is_text,
    plural,
    properties_text,
)


def test_text_bodies_read_as_text_and_binary_ones_as_hex():
    assert body_preview(b"hello\nworld") == "hello world"
    assert body_preview("héllo wörld".encode()) == "héllo wörld"
    assert body_preview(b"x" * 100, limit=10) == "xxxxxxxxx…"
    binary = bytes(range(0, 256, 17))
    shown = body_preview(binary, limit=30)
    assert shown.startswith("binary, 16 bytes: 00 11 22")
    assert "\ufffd" not in shown
    assert is_text(b'{"a": 1}')
    assert not is_text(b"\xff\xfe\x00")


def test_properties_and_broker_addresses_are_not_python_reprs():
    text = properties_text({"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "01AB"})
    assert text.splitlines() == ["  KEYS     = k1", "  TAGS     = TagA", "  UNIQ_KEY = 01AB"]
    assert properties_text({}) == "(none)"
    assert broker_addrs_text("broker-a", {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}) == \
        "broker-a: master 127.0.0.1:10911, slave 1 127.0.0.1:10921"
    assert broker_addrs_text("broker-b", {}) == "broker-b: no node registered"


def test_counts_carry_their_unit_without_si_prefixes():
    assert count(1250, "msg/s") == "1,250 msg/s"
    assert count(0.5, "msg/s") == "0.5 msg/s"
    assert count(None) == "-"


def test_plurals_read_as_english():
    assert (plural(1, "master"), plural(2, "master"), plural(0, "proxy", "proxies")) == (
        "1 master", "2 masters", "0 proxies")


def test_a_name_keeps_its_colour_and_axis_labels_thin_out():
    from gui.models.display import ColorRegistry, thin_labels

    colors = ColorRegistry(["red", "green"])
    assert [colors.color(n) for n in ("b-0", "a-0", "b-0", "c-0")] == ["red", "green", "red", "red"]
    labels = [f"{i}ms" for i in range(16)]
    thinned = thin_labels(labels, most=8)
    assert len(thinned) == 16
    assert sum(1 for x in thinned if x) == 8
    assert thinned[0] == "0ms"
    assert thin_labels(["a", "b"]) == ["a", "b"]


def test_a_charts_hover_reads_out_each_series_at_the_nearest_sample():
    from gui.models.display import readout

    nan = float("nan")
    series = [("broker-a-0", [-10.0, -5.0, -1.0], [100.0, 2500.0, 3120.4]),
              ("broker-b-0", [-10.0, -5.5, -1.0], [90.0, nan, 3050.0]),
              ("broker-c-0", [-60.0], [7.0])]  # nothing within 3 s of the line
    assert readout(-5.2, series, "msg/s") == "5 s ago: broker-a-0 2,500 msg/s"  # b has a gap
    assert readout(-1.1, series, "msg/s") == (
        "1 s ago: broker-a-0 3,120 msg/s · broker-b-0 3,050 msg/s")
    assert readout(-0.1, series[:1], "bytes") == "now: broker-a-0 3,120 bytes"
    assert readout(-30, series) == ""


def test_a_trace_reads_as_a_timeline():
    from types import SimpleNamespace

    from gui.models.display import trace_timeline

    def event(kind, ts, group, success=None, cost=None, detail=""):
        return SimpleNamespace(kind=kind, timestamp=ts, group=group, success=success,
                               cost_ms=cost, detail=detail)

    lines = trace_timeline([event("SubAfter", 1_000_250, "CID-a", True, 4),
                            event("Pub", 1_000_000, "pg", True, 2, "to broker-a"),
                            event("EndTx", 0, "pg"),
                            event("SubBefore", 1_000_245, "CID-a")], when=lambda ms: f"t{ms}")
    assert lines == ["  from t1000000",
                     "         +0 ms  Pub       pg ok, took 2 ms to broker-a",
                     "       +245 ms  SubBefore CID-a",
                     "       +250 ms  SubAfter  CID-a ok, took 4 ms",
                     "     (no time)  EndTx     pg"]
    assert trace_timeline([]) == ["  no trace (tracing was off for it)"]


def test_table_times_are_short_local_and_exact_to_the_millisecond(monkeypatch):
    import time

    from gui.models.display import local_zone, table_time

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        assert table_time(1764120000123) == "2025-11-26 09:20:00.123"
        assert table_time(0) == table_time(None) == "-"
        assert local_zone() == "CST (UTC+0800)"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_latency_buckets_read_as_their_upper_bounds():
    from gui.models.display import latency_bucket_label

    buckets = ["[<=0ms]", "[0~10ms]", "[500ms~1s]", "[5~10s]", "[10s~]"]
    assert [latency_bucket_label(b) for b in buckets] == ["0", "≤10", "≤1s", "≤10s", ">10s"]
