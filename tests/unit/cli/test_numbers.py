"""Counts and sizes on the command line are whole numbers of at least one, said per option."""

from __future__ import annotations

import pytest

from rocketdesk.cli import main


@pytest.mark.parametrize("argv", [
    ["export", "list", "--limit", "0"],  # (said "no exports yet")
    ["logs", "namesrv-0", "-n", "-5"],  # (printed all but the first five)
    ["store", "dump", ".", "--limit", "0"],  # (printed one record)
    ["bench", "store", "--queues", "0"],  # (ZeroDivisionError)
    ["bench", "producer", "-s", "-1"],  # ("negative argument not allowed", no option named)
    ["topic", "create", "-t", "T", "-q", "x"],
])
def test_a_count_or_size_below_one_is_refused_naming_its_option(argv, capsys, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert "error: argument" in said
    assert "must be at least 1" in said or "is not a whole number" in said
