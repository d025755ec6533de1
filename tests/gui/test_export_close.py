"""Closing the console while an export runs (no cluster needed: the export's process is a
stand-in; the real launcher let go with a real export is in test_console.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def test_closing_the_console_during_an_export_asks_whether_it_goes_on_and_never_kills_it(
        qtbot, loop, home, monkeypatch):
    """The window's close with an export running: "Don't close" keeps the window; "Keep it
    running" closes it and the export's process goes on, out of the console's session and
    writing to no pipe of the console's, after the window is gone too; "Cancel it" asks the
    process to stop. The export's process here is a stand-in that waits to be ended (the real
    launcher, let go with a real export, is in test_console)."""
    import gc
    import os
    import signal
    import sys
    import time

    from PySide6.QtWidgets import QApplication

    from gui.export_launch import ExportLaunch
    from gui.main_window import MainWindow
    from gui.views import export_view

    class StandIn(ExportLaunch):  # holds its events file half a second in, as a launcher would
        def __init__(self, args, env):
            super().__init__(["-c", "import json, sys, time; time.sleep(0.5); f = open(sys.argv[2], 'a'); "
                              "f.write(json.dumps({'event': 'launched'}) + chr(10)); f.flush(); "
                              "time.sleep(120)"], env)

    monkeypatch.setattr(export_view, "ExportLaunch", StandIn)
    answers, asked = [], []

    def answer(parent, running, continuous):
        asked.append(running)
        choice = answers.pop(0)
        if choice == "keep, once it has ended":  # while the question is up, the loop runs on
            parent.launch.terminate()
            parent.launch.process.wait(20)
            for _ in range(10):
                QApplication.processEvents()
                time.sleep(0.05)
            choice = "keep"
        return choice

    monkeypatch.setattr(export_view, "ask_on_close", answer)

    def window_exporting():
        window = MainWindow()
        qtbot.addWidget(window)
        window.model.external = "127.0.0.1:9876"
        window.show()
        window.export.topic.setText("Orders")
        window.export.start()
        launch = window.export.launch
        assert launch.running()
        return window, launch

    idle = MainWindow()
    qtbot.addWidget(idle)
    idle.show()
    assert idle.close()  # nothing running: no question
    assert asked == []

    window, launch = window_exporting()
    answers[:] = ["stay", "keep"]
    assert not window.close()
    assert (window.isVisible(), launch.running(), os.path.isdir(launch.folder)) == (True, True, True)
    assert asked == ["The export of Orders is running."]
    assert window.close()
    assert launch.running()
    assert not os.path.exists(launch.folder)  # the console's files of it: nobody reads them now
    window.deleteLater()
    QApplication.processEvents()
    del window
    gc.collect()
    assert launch.running()  # a QProcess would have been killed with its window
    if sys.platform.startswith("linux"):
        assert os.getsid(launch.pid) != os.getsid(0)  # a terminal's hangup does not reach it
        for fd in (1, 2):
            assert not os.readlink(f"/proc/{launch.pid}/fd/{fd}").startswith("pipe:")
    launch.terminate()
    assert launch.process.wait(20) != 0

    window, launch = window_exporting()
    answers[:] = ["cancel"]
    assert window.close()
    assert launch.process.wait(20) == -signal.SIGTERM  # asked to stop, not killed
    assert not os.path.exists(launch.folder)

    # One that ended since the tab last looked, or that is being cancelled: no question.
    window, launch = window_exporting()
    launch.terminate()
    launch.process.wait(20)
    assert window.close()
    assert not os.path.exists(launch.folder)
    window, launch = window_exporting()
    window.export.cancel()
    assert window.close()
    assert launch.process.wait(20) == -signal.SIGTERM
    assert len(asked) == 3  # (stay, keep, cancel above: none since)
    window, launch = window_exporting()
    answers[:] = ["keep, once it has ended"]
    assert window.close()
    assert not os.path.exists(launch.folder)

    # A launcher that does not hold its events file yet keeps its folder: removed from under
    # it, the file could not be opened and the launcher would end before the export began.
    late = ExportLaunch(["-c", "import time; time.sleep(120)"], dict(os.environ))
    late.start()
    assert not late.let_go(wait=0.3)
    assert (os.path.isdir(late.folder), late.running()) == (True, True)
    late.terminate()
    late.process.wait(20)
    late.remove()
