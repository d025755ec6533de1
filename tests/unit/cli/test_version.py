"""`rocketdesk --version`: the version, the codec's implementation and the event loop."""

from __future__ import annotations

import pytest

from cluster.remoting.event_loop import loop_name
from common import speedups
from rocketdesk.cli import main


def test_version_names_the_compiled_core_and_the_event_loop(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rocketdesk ")
    assert lines[1] == f"codec and hashing: {speedups.describe()}"
    assert lines[2] == f"event loop: {loop_name()}"
