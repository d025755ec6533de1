"""`rocketdesk bench peers`: its figures, its table and its JSON, without starting any server."""

from __future__ import annotations

import asyncio
import json

import pytest

from common.errors import RocketDeskError
from rocketdesk.bench import peer_servers, peers
from rocketdesk.bench.peers import (
    JETSTREAM,
    REDIS_STREAMS,
    ROCKETDESK,
    SHAPES,
    PeerUnavailableError,
    Row,
    Sample,
    Shape,
    add_ratios,
    cpu_percent,
    format_row,
    format_table,
    percentile,
    summarize,
    throughput_ratio,
)
from rocketdesk.cli import build_parser, main


# -- statistics ------------------------------------------------------------------------------------
def test_percentile_of_nothing_is_none():
    assert percentile([], 0.5) is None


def test_percentile_interpolates_between_ranks_like_numpy():
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 1.0) == 4.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.99) == pytest.approx(99.01)
    assert percentile(values, 0.50) == pytest.approx(50.5)


def test_cpu_percent_is_of_one_core_and_none_without_a_reading():
    assert cpu_percent(10.0, 13.0, 2.0) == pytest.approx(150.0)
    assert cpu_percent(None, 13.0, 2.0) is None
    assert cpu_percent(10.0, None, 2.0) is None
    assert cpu_percent(10.0, 13.0, 0.0) is None
    assert cpu_percent(13.0, 10.0, 1.0) == 0.0  # a restarted process must not show negative


def test_ratio_is_rocketdesk_over_the_peer_and_none_when_either_is_missing():
    assert throughput_ratio(2000.0, 4000.0) == 0.5
    assert throughput_ratio(3000.0, 1000.0) == 3.0
    assert throughput_ratio(2000.0, None) is None
    assert throughput_ratio(None, 2000.0) is None
    assert throughput_ratio(2000.0, 0.0) is None


def test_summarize_counts_messages_not_requests():
    sample = Sample(messages=64, requests=2, elapsed=0.5, latencies_ms=[3.0, 1.0],
                    server_cpu=80.0, client_cpu=95.0)
    row = summarize("batch 32", ROCKETDESK, sample)
    assert row.msg_per_sec == 128.0
    assert row.mean_ms == 2.0
    assert row.p50_ms == 2.0
    assert row.p99_ms == pytest.approx(2.98)
    assert (row.requests, row.messages, row.note) == (2, 64, None)


def test_summarize_without_acknowledged_messages_has_no_figures_but_says_why():
    sample = Sample(failures=32, elapsed=1.0, last_error="connection refused")
    row = summarize("1 sender", JETSTREAM, sample)
    assert row.msg_per_sec is None
    assert row.p99_ms is None
    assert "32 messages failed" in row.note
    assert "connection refused" in row.note


def test_rounds_give_the_median_round_and_pool_their_latencies():
    rounds = [Sample(messages=100, requests=100, elapsed=1.0, latencies_ms=[1.0] * 100,
                     server_cpu=50.0, client_cpu=None),
              Sample(messages=300, requests=300, elapsed=1.0, latencies_ms=[3.0] * 300,
                     server_cpu=70.0, client_cpu=90.0),
              Sample(messages=200, requests=200, elapsed=1.0, latencies_ms=[2.0] * 200,
                     server_cpu=60.0, client_cpu=80.0, failures=5, last_error="timeout")]
    row = summarize("1 sender", ROCKETDESK, *rounds)
    assert row.round_rates == [100.0, 300.0, 200.0]
    assert row.msg_per_sec == 200.0  # the median round, not the best or the mean
    assert (row.requests, row.messages, row.failures) == (600, 600, 5)
    assert row.mean_ms == pytest.approx((100 * 1 + 300 * 3 + 200 * 2) / 600)
    assert row.p50_ms == 2.5
    assert row.server_cpu == pytest.approx(60.0)
    assert row.client_cpu == pytest.approx(85.0)  # (a round without a reading does not count)
    assert row.note == "5 messages failed, the last: timeout"


def test_a_ratio_over_rounds_is_the_median_of_each_rounds_own():
    # RocketDesk and the peer drift together: round by round RocketDesk is ahead, though its
    # median round is slower than the peer's median round.
    ours = summarize("1 sender", ROCKETDESK, *(Sample(messages=m, requests=m, elapsed=1.0,
                                                      latencies_ms=[1.0] * m) for m in (90, 110, 200)))
    peer = summarize("1 sender", REDIS_STREAMS, *(Sample(messages=m, requests=m, elapsed=1.0,
                                                         latencies_ms=[1.0] * m) for m in (80, 100, 180)))
    missing = Row("1 sender", JETSTREAM, note="nats-server is not installed")
    rows = [ours, peer, missing]
    add_ratios(rows)
    assert peer.round_ratios == pytest.approx([90 / 80, 110 / 100, 200 / 180])
    assert peer.ratio == pytest.approx(200 / 180)
    assert ours.msg_per_sec / peer.msg_per_sec == 1.1  # (what best-of or median-vs-median says)
    assert (missing.ratio, missing.round_ratios) == (None, [])
    assert ours.ratio is None


def test_a_round_a_peer_failed_in_has_no_ratio_and_does_not_count():
    ours = summarize("1 sender", ROCKETDESK, *(Sample(messages=m, requests=m, elapsed=1.0,
                                                      latencies_ms=[1.0] * m) for m in (100, 100)))
    peer = summarize("1 sender", JETSTREAM, Sample(failures=1, elapsed=1.0, last_error="refused"),
                     Sample(messages=50, requests=50, elapsed=1.0, latencies_ms=[1.0] * 50))
    add_ratios([ours, peer])
    assert peer.round_ratios == [None, 2.0]
    assert peer.ratio == 2.0


def test_each_system_goes_first_in_turn():
    systems = ["R", "N", "S"]
    assert [peers.rotated(systems, turn) for turn in range(4)] == [
        ["R", "N", "S"], ["N", "S", "R"], ["S", "R", "N"], ["R", "N", "S"]]
    assert peers.rotated([], 3) == []


def test_rounds_rotate_the_order_and_give_one_row_a_system():
    order = []

    class _Recording(_FakeEndpoint):
        async def after_shape(self) -> None:  # (once after each measurement)
            order.append(self.system)

    first, second = _Recording(), _Recording()
    first.system, second.system = "A", "B"
    rows = asyncio.run(peers._run_shapes([first, second], b"x", 0.02, 0.0, rounds=2))
    assert [(row.shape, row.system) for row in rows] == [
        (shape.name, system) for shape in SHAPES for system in ("A", "B")]
    assert all(len(row.round_rates) == 2 for row in rows)
    assert order == ["A", "B", "B", "A"] * len(SHAPES)


def test_the_table_lists_every_rounds_ratio():
    ours = summarize("1 sender", ROCKETDESK, *(Sample(messages=m, requests=m, elapsed=1.0,
                                                      latencies_ms=[1.0] * m) for m in (90, 110)))
    peer = summarize("1 sender", REDIS_STREAMS, *(Sample(messages=m, requests=m, elapsed=1.0,
                                                         latencies_ms=[1.0] * m) for m in (100, 100)))
    rows = [ours, peer]
    add_ratios(rows)
    text = format_table(rows)
    assert "2 rounds" in text
    assert text.splitlines()[-1].split() == ["1", "sender", "Redis", "Streams", "0.90x", "1.10x"]
    assert format_row(peer).split()[-3] == "1.00x"


def test_ratios_are_per_shape_and_skip_missing_peers():
    rows = [Row("1 sender", ROCKETDESK, msg_per_sec=1000.0),
            Row("1 sender", JETSTREAM, msg_per_sec=4000.0),
            Row("1 sender", REDIS_STREAMS, note="redis-server is not installed"),
            Row("batch 32", ROCKETDESK, msg_per_sec=9000.0),
            Row("batch 32", JETSTREAM, msg_per_sec=3000.0)]
    add_ratios(rows)
    assert [row.ratio for row in rows] == [None, 0.25, None, None, 3.0]


def test_every_shape_lists_every_system_a_missing_peer_with_its_reason():
    rows = [Row(shape.name, ROCKETDESK, msg_per_sec=10.0) for shape in SHAPES]
    ordered = peers._ordered(rows, {JETSTREAM: "nats-server is not installed (apt-get install "
                                                "nats-server)", REDIS_STREAMS: "did not start"})
    assert [(row.shape, row.system) for row in ordered] == [
        (shape.name, system) for shape in SHAPES for system in (ROCKETDESK, JETSTREAM, REDIS_STREAMS)]
    assert ordered[1].note.startswith("nats-server is not installed")


# -- the table and the JSON ------------------------------------------------------------------------
def _rows() -> list[Row]:
    rows = [Row("1 sender", ROCKETDESK, msg_per_sec=12345.6, mean_ms=0.4, p50_ms=0.35, p99_ms=1.25,
                server_cpu=95.2, client_cpu=99.0),
            Row("1 sender", JETSTREAM, msg_per_sec=24691.2, mean_ms=0.2, p50_ms=0.19, p99_ms=0.5),
            Row("1 sender", REDIS_STREAMS,
                note="redis-server is not installed (apt-get install redis-server)")]
    add_ratios(rows)
    return rows


def test_table_figures_are_aligned_under_their_headers():
    text = format_table(_rows(), ["preamble line", ""])
    lines = text.splitlines()
    assert lines[0] == "preamble line"
    header, rule, ours, nats, redis = lines[2:7]
    assert set(rule) == {"-"}
    assert len(rule) == len(header)
    assert len(ours) == len(nats) == len(header)
    # each figure ends where its column title ends
    for title, cell in (("msg/s", "12,346"), ("p99 ms", "1.250"), ("RD/peer", "-"),
                        ("server cpu", "95%"), ("client cpu", "99%")):
        assert ours.index(cell) + len(cell) == header.index(title) + len(title), title
    assert nats.index("0.50x") + 5 == header.index("RD/peer") + len("RD/peer")
    assert redis.split() == ["1", "sender", "Redis", "Streams", "redis-server", "is", "not",
                             "installed", "(apt-get", "install", "redis-server)"]


def test_a_row_with_figures_and_failures_shows_both():
    row = Row("32 senders", ROCKETDESK, msg_per_sec=10.0, mean_ms=1.0, p50_ms=1.0, p99_ms=2.0,
              failures=3, note="3 messages failed, the last: timeout")
    assert format_row(row).endswith("(3 messages failed, the last: timeout)")


def test_json_report_is_serializable_with_camel_case_keys():
    report = {"loop": "uvloop", "size": 1024, "duration": 1.0, "cpus": 2,
              "systems": {ROCKETDESK: "own cluster"}, "rows": _rows()}
    data = json.loads(json.dumps(peers.report_to_json(report)))
    first = data["rows"][0]
    assert first["system"] == ROCKETDESK
    assert first["msgPerSec"] == 12345.6
    assert {"meanMs", "p50Ms", "p99Ms", "serverCpuPercent", "clientCpuPercent",
            "rocketdeskRatio", "note"} <= set(first)
    assert data["rows"][1]["rocketdeskRatio"] == 0.5
    assert data["rows"][2]["msgPerSec"] is None


def test_preamble_names_the_loop_and_each_system():
    report = {"loop": "uvloop", "size": 1024, "duration": 5.0, "cpus": 2,
              "systems": {ROCKETDESK: "own cluster", JETSTREAM: "nats-server 2.9.10"}}
    text = "\n".join(peers.preamble(report))
    assert "1,024-byte bodies, 5 s per shape," in text
    assert "uvloop" in text
    text = "\n".join(peers.preamble(report | {"rounds": 3}))
    assert "5 s per shape and round, 3 rounds" in text
    assert "nats-server 2.9.10" in text


# -- what is missing, said as a sentence -----------------------------------------------------------
def test_a_missing_server_names_its_debian_package(monkeypatch):
    monkeypatch.setattr(peer_servers, "find_binary", lambda name: None)
    with pytest.raises(PeerUnavailableError, match=r"not installed \(apt-get install nats-server\)"):
        peer_servers.require_binary("nats-server", "nats-server")
    assert issubclass(PeerUnavailableError, RocketDeskError)


def test_a_missing_client_names_the_extra():
    with pytest.raises(PeerUnavailableError, match=r"rocketdesk\[peers\]"):
        peer_servers.require_client("no_such_client_module_for_rocketdesk.asyncio", "no-such-client")


def test_find_binary_returns_none_for_an_unknown_program():
    assert peer_servers.find_binary("no-such-server-for-rocketdesk") is None


# -- measuring, against a fake system ---------------------------------------------------------------
class _FakeEndpoint:
    system = "fake"
    description = "in memory"

    def __init__(self, fail_every: int = 0) -> None:
        self.calls = 0
        self.fail_every = fail_every

    async def send(self, body: bytes) -> None:
        await self.send_batch(body, 1)

    async def send_batch(self, body: bytes, count: int) -> None:
        self.calls += 1
        await asyncio.sleep(0.001)
        if self.fail_every and self.calls % self.fail_every == 0:
            raise ConnectionError("refused")

    def server_processes(self):
        return []

    async def after_shape(self) -> None:
        pass


def test_measure_counts_each_batch_as_its_messages():
    endpoint = _FakeEndpoint()
    sample = asyncio.run(peers.measure(endpoint, Shape("batch 4", 1, 4), b"x", 0.05))
    assert sample.requests == endpoint.calls > 0
    assert sample.messages == 4 * sample.requests
    assert len(sample.latencies_ms) == sample.requests
    assert sample.elapsed >= 0.05
    assert sample.server_cpu is None
    assert sample.client_cpu is not None


def test_measure_runs_concurrent_senders_and_counts_failures():
    endpoint = _FakeEndpoint(fail_every=3)
    sample = asyncio.run(peers.measure(endpoint, Shape("4 senders", 4, 1), b"x", 0.05))
    assert sample.failures > 0
    assert sample.last_error == "refused"
    assert sample.messages + sample.failures == endpoint.calls


# -- the command line -------------------------------------------------------------------------------
def test_bench_peers_is_a_bench_target():
    args = build_parser().parse_args(["bench", "peers", "--duration", "2", "--json"])
    assert args.func is peers.run_peers_bench
    assert (args.duration, args.size, args.json, args.namesrv) == (2.0, 1024, True, None)
    assert args.rounds == 1
    assert build_parser().parse_args(["bench", "peers", "--rounds", "3"]).rounds == 3


def test_bad_arguments_are_a_sentence_before_anything_starts(capsys):
    assert main(["bench", "peers", "--duration", "0"]) == 1
    assert "--duration must be positive" in capsys.readouterr().err
