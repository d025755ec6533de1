"""`rocketdesk bench store` runs end to end on a small scale and prints every figure."""

from __future__ import annotations

import argparse
import re

from rocketdesk.bench import store as bench_store
from rocketdesk.bench.store import add_arguments


def test_the_store_benchmark_prints_each_part(tmp_path, capsys, monkeypatch):
    # the benchmark tunes the interpreter for itself (GC, switch interval): not this process
    monkeypatch.setattr(bench_store, "tune_process", lambda: None)
    monkeypatch.setattr(bench_store, "PROPERTIES_CHUNK", 1000)  # (chunks and a part of one)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([
        "--messages", "3200", "--size", "256", "--writers", "4", "--sync-seconds", "0.5",
        "--file-size", str(8 << 20), "--dir", str(tmp_path), "--batch", "32",
    ])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"ASYNC_FLUSH put, dispatch included: 3,200 messages", out)
    assert re.search(r"ASYNC_FLUSH put in batches of 32, dispatch included: 3,200 messages", out)
    assert re.search(r"SYNC_FLUSH group commit, 4 writers: [\d,]+ messages .* 0 timeouts", out)
    assert "recovery of a" in out
    assert re.search(r"query by key among 3,200 messages: .*\(0 misses\)", out)
