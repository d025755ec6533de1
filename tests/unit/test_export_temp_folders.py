"""Where a Spark process started for an export keeps its temporary files (not /tmp, which
would keep what a JVM killed before its shutdown hooks leaves), and which of them go."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from rocketdesk.export_service import SERVICE_PID_FILE, _service_temp_folder, with_temp_folder


def test_the_environment_puts_the_jvms_and_the_pythons_temporary_files_in_the_folder(tmp_path):
    folder = tmp_path / "with space"
    env = with_temp_folder({"SPARK_SUBMIT_OPTS": "-Dother=1", "PATH": "/bin"}, str(folder))
    assert folder.is_dir()
    assert env["TMPDIR"] == env["TEMP"] == env["TMP"] == str(folder)
    assert env["PATH"] == "/bin"
    # (what Spark's launcher adds to the driver JVM's command line: quoted for the space, with
    # forward slashes, which Java takes on Windows too)
    java = str(folder).replace("\\", "/")
    assert env["SPARK_SUBMIT_OPTS"] == f'-Dother=1 -Djava.io.tmpdir="{java}"'
    assert with_temp_folder({}, str(folder))["SPARK_SUBMIT_OPTS"] == f'-Djava.io.tmpdir="{java}"'


def test_a_new_service_folder_removes_those_of_services_gone_and_keeps_a_running_ones(tmp_path):
    parent = tmp_path / "service-tmp"
    running, gone, unmarked = (parent / "running", parent / "gone", parent / "unmarked")
    for folder in (running, gone, unmarked):
        (folder / "spark-1").mkdir(parents=True)
    (running / SERVICE_PID_FILE).write_text(str(os.getpid()))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    (gone / SERVICE_PID_FILE).write_text(str(ended.pid))
    # A pid the system has handed on: a process started after the file was written (a
    # reused pid) is not the service; nor is a pid that is no pid.
    reused = parent / "reused"
    (reused / "spark-1").mkdir(parents=True)
    (reused / SERVICE_PID_FILE).write_text(str(os.getpid()))
    an_hour_before = psutil.Process().create_time() - 3600
    os.utime(reused / SERVICE_PID_FILE, (an_hour_before, an_hour_before))
    for name, text in (("zero", "0"), ("negative", "-5"), ("huge", str(2**70)), ("text", "abc")):
        (parent / name).mkdir()
        (parent / name / SERVICE_PID_FILE).write_text(text)
    new = _service_temp_folder(parent)
    assert sorted(p.name for p in parent.iterdir()) == sorted(["running", new.name])
    assert (running / "spark-1").is_dir()  # a service too busy to answer keeps its files
    assert not list(new.iterdir())


def test_a_starter_ended_while_its_service_warms_up_leaves_the_waiters_waiting_for_that_service(
        tmp_path, monkeypatch):
    """A console's warm-up (``export service start``) ends with the console, maybe before its
    service answers: an export the console left running waits for that service, not for a
    starter that is gone (and fails only when no service process runs at all)."""
    import pytest

    from export.errors import ExportError
    from rocketdesk import export_service

    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path))
    starter = subprocess.Popen([sys.executable, "-c", "pass"])
    starter.wait()  # the warm-up, ended
    monkeypatch.setattr(export_service, "find_service", lambda: None)  # nothing answers yet
    with pytest.raises(ExportError, match="did not become ready"):
        export_service._wait_for_other_starter(starter.pid, wait=5)

    service = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reused = tmp_path / "exports" / "service-tmp" / "reused"
        reused.mkdir(parents=True)
        (reused / SERVICE_PID_FILE).write_text(str(os.getpid()))  # its pid since handed on
        os.utime(reused / SERVICE_PID_FILE, (0, 0))
        assert export_service._warming_service() is None  # (nothing to wait for)
        folder = tmp_path / "exports" / "service-tmp" / "abc"
        folder.mkdir()
        (folder / SERVICE_PID_FILE).write_text(str(service.pid))
        assert export_service._warming_service() == service.pid
        asked = []

        def answers_on_the_fifth_ask():
            asked.append(1)
            return "the service" if len(asked) >= 5 else None

        monkeypatch.setattr(export_service, "find_service", answers_on_the_fifth_ask)
        client, _ = export_service._wait_for_other_starter(starter.pid, wait=30)
        assert client == "the service"
    finally:
        service.kill()
        service.wait()
