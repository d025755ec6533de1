"""The command line's output: UTF-8 whatever the platform's code page (Windows writes
redirected output in cp1252, where a message body with a character outside it stopped a
command)."""

from __future__ import annotations

import io
import sys

from rocketdesk.cli import utf8_output


def test_output_in_a_code_page_becomes_utf8(monkeypatch):
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="cp1252"))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BytesIO(), encoding="cp1252"))
    utf8_output()
    print("körper ✓ 消息")  # (✓ and 消息 are not in cp1252: an error before)
    sys.stdout.flush()
    assert raw.getvalue().decode("utf-8") == "körper ✓ 消息\n"
