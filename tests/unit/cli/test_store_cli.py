"""`rocketdesk store inspect|dump` and `rocketdesk demo`, run as a user runs them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

from storage.message_store import DefaultMessageStore
from tests.conftest import ROOT, make_message, small_config


def rocketdesk(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "rocketdesk.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def _store(root, running=False):
    store = DefaultMessageStore(small_config(root))
    store.load()
    store.start()
    for i in range(12):
        store.put_message(make_message(topic="Orders" if i % 2 else "Audit", queue_id=i % 3,
                                       body=f"payload {i}".encode(), tags="T", keys=f"k{i}"))
    store.wait_dispatched()
    if not running:
        store.shutdown()
    return store


def test_inspect_summarises_topics_and_queues(tmp_path):
    _store(tmp_path)
    result = rocketdesk("store", "inspect", "--json", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["commitLog"]["records"] == 12
    assert report["topics"]["Orders"]["1"] == {
        "records": 2, "consumeQueueMinOffset": 0, "consumeQueueMaxOffset": 2,
        "consumeQueueProblems": 0}
    assert report["problems"] == []
    text = rocketdesk("store", "inspect", str(tmp_path))
    assert "no problems found" in text.stdout
    assert "Orders" in text.stdout


def test_inspect_reports_a_corrupt_record_and_exits_non_zero(tmp_path):
    store = _store(tmp_path)
    path = os.path.join(store.config.commit_log_dir, "00000000000000000000")
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(data.index(b"payload 3"))  # the body is what the CRC covers
        f.write(b"X")
    result = rocketdesk("store", "inspect", str(tmp_path))
    assert result.returncode == 1
    assert "PROBLEMS" in result.stdout
    assert "Traceback" not in result.stderr


def test_inspect_works_while_the_store_is_in_use(tmp_path):
    store = _store(tmp_path, running=True)
    try:
        result = rocketdesk("store", "inspect", "--json", str(tmp_path))
        assert result.returncode == 0, result.stdout
        report = json.loads(result.stdout)
        assert report["abortFilePresent"] is True
        assert report["commitLog"]["records"] == 12
        # Read-only: the running store still accepts writes afterwards.
        assert store.put_message(make_message()).ok
    finally:
        store.shutdown()


def test_dump_prints_one_json_object_per_record_with_the_body_in_base64(tmp_path):
    _store(tmp_path)
    result = rocketdesk("store", "dump", str(tmp_path), "--topic", "Orders", "--queue", "1")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [base64.b64decode(r["body"]) for r in lines] == [b"payload 1", b"payload 7"]
    first = lines[0]
    for field in ("topic", "queueId", "queueOffset", "commitLogOffset", "msgId", "keys", "tags",
                  "properties", "bornTimestamp", "storeTimestamp"):
        assert field in first
    assert (first["keys"], first["tags"], first["queueOffset"]) == ("k1", "T", 0)


def test_bad_directory_is_a_sentence_not_a_traceback(tmp_path):
    result = rocketdesk("store", "inspect", str(tmp_path / "missing"))
    assert result.returncode == 1
    assert result.stderr.startswith("rocketdesk: ")
    assert "Traceback" not in result.stderr
    (tmp_path / "not-a-store").mkdir()
    for command in ("inspect", "dump"):  # (dump printed nothing and succeeded)
        result = rocketdesk("store", command, str(tmp_path / "not-a-store"))
        assert result.returncode == 1, command
        assert "holds no RocketMQ store" in result.stderr
    # A broker's store before its first message: a checkpoint, no CommitLog file yet.
    store = DefaultMessageStore(small_config(tmp_path / "started"))
    store.load()
    store.start()
    store.shutdown()
    for command in ("inspect", "dump"):
        result = rocketdesk("store", command, str(tmp_path / "started"))
        assert result.returncode == 0, (command, result.stderr)


def test_demo_never_removes_a_folder_it_did_not_write(tmp_path, monkeypatch):
    """`demo --dir` on a folder of the user's: refused, with a sentence, the files kept (the
    folder was deleted whole); on its own folder, it writes the store again."""
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    result = rocketdesk("demo", "--dir", str(mine))
    assert result.returncode == 1
    assert "holds files the demo did not write" in result.stderr
    assert (mine / "notes.txt").read_text() == "mine"
    for _ in range(2):
        again = rocketdesk("demo", "--dir", str(tmp_path / "demo"))
        assert again.returncode == 0, again.stdout + again.stderr
    # Its default folder, as an older version left it (no marker): still its own.
    older = tmp_path / "home" / "demo-store"
    (older / "commitlog").mkdir(parents=True)
    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path / "home"))
    default = rocketdesk("demo")
    assert default.returncode == 0, default.stdout + default.stderr
    assert str(older) in default.stdout


def test_demo_writes_and_inspects_a_store(tmp_path):
    result = rocketdesk("demo", "--dir", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no problems found" in result.stdout
    assert "OrderEvents" in result.stdout
