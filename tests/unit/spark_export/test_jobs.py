"""Exports as jobs without Spark: the job record kept from an export's events, `export list`
routing, and what the warm service refuses before it touches Spark."""

from __future__ import annotations

import json

import pytest

from export.job_record import JobRecord, read_records


def test_a_record_follows_the_events_and_is_always_whole_on_disk(tmp_path):
    path = tmp_path / "20261126-040000-abcdef.json"
    record = JobRecord(str(path), {"topics": ["Orders"], "out": "/x", "service": True})
    on_disk = json.loads(path.read_text())
    assert (on_disk["id"], on_disk["state"], on_disk["service"]) == (
        "20261126-040000-abcdef", "running", True)
    record.on_event("started", {"pid": 42})
    record.on_event("planned", {"total": 1000})
    record.on_event("progress", {"exported": 400})
    assert json.loads(path.read_text())["exported"] == 400
    record.on_event("session", {"sparkVersion": "4.3.0"})  # nothing a reader needs: unchanged
    record.on_event("finished", {"exported": 1000, "verified": True,
                                 "endingOffsets": {"Orders": {"broker-a": {"0": 1000}}}})
    done = json.loads(path.read_text())
    assert (done["state"], done["pid"], done["exported"], done["total"]) == ("finished", 42, 1000, 1000)
    assert done["summary"]["endingOffsets"] == {"Orders": {"broker-a": {"0": 1000}}}
    assert not list(tmp_path.glob("*.part"))

    failed = JobRecord(str(tmp_path / "20261126-050000-000000.json"), {"topics": ["T"]})
    failed.on_event("failed", {"error": "ExportError: no such topic"})
    (tmp_path / "broken.json").write_text("{not json")
    listed = read_records(str(tmp_path))
    assert [r["state"] for r in listed] == ["failed", "finished"]  # newest first, broken skipped
    assert listed[0]["error"] == "ExportError: no such topic"


def test_export_subcommands_are_routed_and_the_export_keeps_its_options():
    from rocketdesk.cli_export_jobs import route

    assert route(["export", "list", "--json"]) == ["export-jobs", "list", "--json"]
    assert route(["-v", "export", "cancel", "last"]) == ["-v", "export-jobs", "cancel", "last"]
    assert route(["export", "-t", "list", "--out", "x"]) == ["export", "-t", "list", "--out", "x"]
    assert route(["export"]) == ["export"]


def test_the_service_refuses_bad_requests_before_spark_is_asked(tmp_path):
    pytest.importorskip("pyspark")
    from export.service import ExportService

    service = ExportService(str(tmp_path))
    assert service.answer({"token": "guess", "op": "ping"}) == {"ok": False, "error": "wrong token"}
    ask = lambda **r: service.answer({"token": service.token, **r})  # noqa: E731
    assert ask(op="reboot")["error"] == "unknown op 'reboot'"
    assert "letters, digits" in ask(op="submit", id="../../etc", args=[])["error"]
    assert "bad export arguments" in ask(op="submit", id="a1", args=["--nonsense"])["error"]
    spark_cluster = ["--topic", "T", "--out", str(tmp_path / "o"), "--master", "spark://h:7077"]
    assert "local exports only" in ask(op="submit", id="a1", args=spark_cluster)["error"]
    assert ask(op="cancel", id="nobody") == {"ok": True, "cancelled": False}
    assert service.jobs == {}


def test_a_service_for_consoles_ends_once_every_console_it_served_has_and_it_is_quiet(tmp_path):
    pytest.importorskip("pyspark")
    import subprocess
    import sys

    from export import service as service_module
    from export.service import ExportService

    first = subprocess.Popen([sys.executable, "-c", "pass"])
    first.wait()  # the console that started it, closed
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        service = ExportService(str(tmp_path), parent_pid=first.pid)
        ask = lambda **r: service.answer({"token": service.token, **r})  # noqa: E731
        assert not service.consoles_gone()  # a request just now (its start): not quiet yet
        service.last_activity -= service_module.PARENT_GRACE + 1
        assert service.consoles_gone()
        for hostile in ("12", 12.5, True, None, 0, -1, 1 << 31, 10**30, [1]):
            assert ask(op="adopt", pid=hostile)["ok"] is False, hostile
        assert service.parents == {first.pid}
        service.last_activity -= service_module.PARENT_GRACE + 1
        assert service.consoles_gone()  # (no hostile pid reached psutil)
        assert ask(op="adopt", pid=second.pid)["consoles"] == sorted([first.pid, second.pid])
        service.last_activity -= service_module.PARENT_GRACE + 1
        assert not service.consoles_gone()  # the second console still runs
        service.jobs["kept"] = object()  # an export running, its consoles all gone
    finally:
        second.kill()
        second.wait()
    assert not service.consoles_gone()
    service.jobs.clear()
    assert service.consoles_gone()
    alone = ExportService(str(tmp_path))  # started from the command line: ends when idle only
    alone.answer({"token": alone.token, "op": "adopt", "pid": second.pid})
    alone.last_activity -= service_module.PARENT_GRACE + 1
    assert alone.parents == set()
    assert not alone.consoles_gone()


def test_cancel_says_what_happened_even_without_waiting(tmp_path, monkeypatch, capsys):
    import os

    from rocketdesk.cli import main

    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path))
    jobs = tmp_path / "exports" / "jobs"
    jobs.mkdir(parents=True)
    # A running export of a live process (this one, standing in: the stop request is recorded,
    # not sent), asked to cancel with no time to wait: a sentence, not a traceback.
    JobRecord(str(jobs / "20261126-060000-cccccc.json"),
              {"topics": ["T"], "pid": os.getpid(), "continuous": True})
    asked = []
    monkeypatch.setattr("common.platform.processes.terminate", asked.append)
    assert main(["export", "cancel", "last", "--wait", "0"]) == 1
    assert asked == [os.getpid()]
    assert "asked to stop; still running after 0 s" in capsys.readouterr().out

    # A record whose pid is not a number (hand-edited, or from elsewhere) reads as lost.
    JobRecord(str(jobs / "20261126-070000-dddddd.json"), {"topics": ["T"], "pid": "x"})
    assert main(["export", "list"]) == 0
    assert "lost" in capsys.readouterr().out

    # A record left by an export killed long ago, whose pid the system has since handed to
    # another process (this one, standing in): lost, and a cancel signals nothing.
    import json

    handed_on = jobs / "20261126-080000-eeeeee.json"
    JobRecord(str(handed_on), {"topics": ["T"], "pid": os.getpid()})
    record = json.loads(handed_on.read_text())
    assert abs(record["pidStarted"] - __import__("psutil").Process().create_time()) < 1
    record["pidStarted"] -= 3600  # (the export's process started an hour before this one)
    handed_on.write_text(json.dumps(record))
    asked.clear()
    assert main(["export", "cancel", "20261126-080000-eeeeee", "--wait", "0"]) == 0
    assert asked == []
    assert "is lost already" in capsys.readouterr().out


def test_a_spark_cluster_job_gets_its_arguments_from_a_file_no_shell_reads(tmp_path):
    # On Windows spark-submit is a .cmd: cmd.exe would take a retry topic's % and a tag
    # filter's | as its own. The job reads them from a JSON file instead.
    from argparse import Namespace

    from export.job import parse_args
    from rocketdesk.cli_export import build_command

    out = str(tmp_path / "@ausgabe-ü\u2028")  # (argparse's @file reading would mangle it)
    job_args = ["--topic", "%RETRY%group", "--tags", "TagA||TagB", "--out", out, "--format", "parquet"]
    command = build_command(Namespace(master="spark://127.0.0.1:7077"), job_args, str(tmp_path))
    assert command[-2] == "--args-file"
    assert not {"%RETRY%group", "TagA||TagB", out} & set(command)
    parsed = parse_args(command[-2:])
    assert (parsed.topic, parsed.tags, parsed.out) == (["%RETRY%group"], "TagA||TagB", out)
    (tmp_path / "bad.json").write_text('{"--topic": 1}', encoding="utf-8")
    with pytest.raises(SystemExit, match="JSON list of strings"):
        parse_args(["--args-file", str(tmp_path / "bad.json")])


def test_an_events_record_is_saved_before_its_line_is_written(tmp_path):
    """The console reads the job records once it sees an event line: the record must
    already say what the line says (else the table lags the progress line)."""
    from export.job import Events
    from export.job_record import JobRecord

    events = tmp_path / "events.jsonl"
    lines_when_saved = []

    class Watching(JobRecord):
        def _write(self) -> None:
            lines_when_saved.append(events.read_text() if events.exists() else "")
            super()._write()

    record = Watching(str(tmp_path / "job.json"), {"topics": ["T"]})
    emitter = Events(str(events), record)
    emitter.emit("progress", exported=10, total=20)
    emitter.close()
    assert lines_when_saved[-1] == ""  # saved while the line was not there yet
    assert '"exported": 10' in events.read_text()


def test_an_events_file_that_cannot_be_written_stops_the_export_before_a_job_starts(tmp_path):
    """Opened first: a launcher that failed on it after starting its job ended and left the
    job running alone, with no one to clean up after it."""
    import os
    import subprocess
    import sys

    import psutil

    from tests.conftest import ROOT

    env = dict(os.environ, ROCKETDESK_HOME=str(tmp_path / "home"), ROCKETDESK_EXPORT_WARM="0")
    done = subprocess.run([sys.executable, "-m", "rocketdesk.cli", "export", "-n", "127.0.0.1:1",
                           "-t", "Orders", "--out", str(tmp_path / "out"), "--cold", "--events",
                           str(tmp_path / "no-such-folder" / "events.jsonl")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    started = [p for p in psutil.process_iter(["cmdline"])
               if str(tmp_path / "out") in " ".join(p.info["cmdline"] or [])]
    for process in started:  # (the job an older launcher left behind, ended here)
        process.kill()
    assert done.returncode == 1
    assert "no-such-folder" in done.stderr
    assert started == []  # no job was started


def test_the_follower_says_the_launcher_holds_the_copy_and_survives_a_copy_it_cannot_write(
        tmp_path, capsys):
    import os

    from rocketdesk.cli_export import Follower, open_events_copy

    copy_path = tmp_path / "copy.jsonl"
    copy = open_events_copy(str(copy_path))
    assert json.loads(copy_path.read_text())["event"] == "launched"  # before any job's line
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"event": "planned", "total": 3, "queues": 1}) + "\n")
    follower = Follower(str(events), copy)
    assert follower.poll()
    assert [json.loads(line)["event"] for line in copy_path.read_text().splitlines()] == [
        "launched", "planned"]

    class Full:
        def write(self, line):
            raise OSError(28, "No space left on device")

    # A copy whose file was removed (a console closed, letting the export run) is dropped.
    os.remove(copy_path)
    follower.next_look = 0
    with events.open("a") as more:
        more.write(json.dumps({"event": "progress", "exported": 1, "total": 3}) + "\n")
    assert follower.poll()
    assert follower.copy is None
    assert copy.closed
    follower.copy = Full()
    with events.open("a") as more:
        more.write(json.dumps({"event": "finished", "exported": 3, "verified": True}) + "\n")
    assert follower.poll()  # the export is followed to its end without the copy
    assert (follower.summary["exported"], follower.copy) == (3, None)
    assert "no longer copying the events" in capsys.readouterr().err
    follower.close()
    copy.close()


def test_an_export_that_fails_before_its_job_starts_is_listed_failed_with_the_reason(tmp_path):
    """No job, so no job record of the job's own: the launcher makes it, so that an export a
    closed console left running is found failed in the Exports table rather than nowhere."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    home = tmp_path / "home"
    events = tmp_path / "events.jsonl"
    (tmp_path / "bin").mkdir()
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env.update(ROCKETDESK_HOME=str(home), PATH=str(tmp_path / "bin"))  # no java on it
    done = subprocess.run([sys.executable, "-m", "rocketdesk.cli", "export", "-n", "127.0.0.1:1",
                           "-t", "Orders", "--out", str(tmp_path / "out"), "--cold", "--events",
                           str(events)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert "Spark needs Java" in done.stderr
    [record] = read_records(str(home / "exports" / "jobs"))
    assert (record["state"], record["topics"], record["out"]) == ("failed", ["Orders"], str(tmp_path / "out"))
    assert record["error"].startswith("Spark needs Java")
    said = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["event"] for e in said] == ["launched", "failed"]
    assert said[1]["error"] == record["error"]


def test_skip_lost_reaches_the_source_as_fail_on_data_loss_false():
    """An export that fell behind the brokers' retention can go on (`--skip-lost`): the job
    gets it, and the rocketmq source is told failOnDataLoss=false; without it, it fails."""
    import argparse

    from export.job import parse_args, source_options
    from export.options import SourceOptions
    from rocketdesk.cli_export import add_command, job_arguments

    commands = argparse.ArgumentParser().add_subparsers()
    add_command(commands)
    for asked, fails in ((["--skip-lost"], False), ([], True)):
        cli = commands.choices["export"].parse_args(["-n", "127.0.0.1:9876", "-t", "T",
                                                     "--out", "/tmp/x", *asked])
        job = parse_args(job_arguments(cli))
        assert SourceOptions.parse(source_options(job)).fail_on_data_loss is fails
