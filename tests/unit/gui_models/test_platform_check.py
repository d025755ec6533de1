"""The start-up check for Qt's X11 plugin: what ldd reports missing becomes the packages to
install, in one sentence; on this machine the check runs without importing Qt."""

from __future__ import annotations

import sys

from gui import platform_check
from gui.platform_check import advice, missing_from_ldd, packages_for

LDD = """\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibfancy.so.9 => not found
"""


def test_missing_libraries_become_packages_to_install():
    missing = missing_from_ldd(LDD)
    assert missing == ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1",
                       "libfancy.so.9"]
    assert packages_for(missing) == ["libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1",
                                     "libfancy.so.9"]
    sentence = advice(missing[:3])
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in sentence


def test_no_x_session_means_nothing_to_check(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    assert platform_check.missing_xcb_libraries() == []
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert platform_check.missing_xcb_libraries() == []


def test_the_check_asks_ldd_without_importing_qt(monkeypatch):
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.setattr(platform_check, "_plugin_files", lambda: ["/plugin/libqxcb.so"])

    class Done:
        stdout = LDD

    monkeypatch.setattr(platform_check.subprocess, "run", lambda *a, **k: Done())
    monkeypatch.setattr(platform_check.shutil, "which", lambda name: "/usr/bin/ldd")
    if sys.platform.startswith("linux"):
        assert platform_check.missing_xcb_libraries()[:2] == ["libxcb-cursor.so.0",
                                                               "libxcb-icccm.so.4"]


def test_the_run_command_names_the_packages_and_starts_the_cluster_instead(monkeypatch, capsys):
    import argparse

    from rocketdesk import cli

    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(platform_check, "missing_xcb_libraries",
                        lambda: ["libxcb-cursor.so.0", "libxcb-icccm.so.4"])
    started: list = []
    monkeypatch.setattr(cli, "main", lambda argv: started.append(argv) or 0)
    code = cli._console(argparse.Namespace(profile=None, name=None))
    assert code == 0
    assert started == [["up", "--profile", "single"]]
    said = capsys.readouterr().err
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4" in said
    assert "Traceback" not in said
