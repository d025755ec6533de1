"""Config files on a disk that refuses writes: reported once, kept in memory, written later."""

from __future__ import annotations

import errno
import logging
import os

from cluster.broker.json_config import JsonConfigFile


def test_a_failing_write_keeps_the_old_file_and_says_so_once(tmp_path, monkeypatch, caplog):
    config = JsonConfigFile(str(tmp_path / "topics.json"))
    assert config.persist('{"a": 1}')
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with caplog.at_level(logging.WARNING, logger="cluster.broker.json_config"):
        for _ in range(5):
            assert not config.persist('{"a": 2}')
    said = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(said) == 1  # once per failing spell, then a reminder a minute
    assert not said[0].exc_info  # a sentence, no traceback
    assert "No space left on device" in said[0].getMessage()
    assert config.load() == {"a": 1}
    assert not (tmp_path / "topics.json.tmp").exists()
    monkeypatch.setattr(os, "fsync", real_fsync)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cluster.broker.json_config"):
        assert config.persist('{"a": 3}')
    assert config.load() == {"a": 3}
    assert any("written again" in r.getMessage() for r in caplog.records)
