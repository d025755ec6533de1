"""The console on a real X server (Xvfb with Qt's xcb plugin), not the offscreen one: it opens,
shows its tabs and paints a window a screenshot can be taken of. Skipped, with the reason,
where Xvfb or the plugin's libraries are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from gui.platform_check import missing_xcb_libraries

pytestmark = pytest.mark.gui
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import sys
    from PySide6.QtWidgets import QApplication
    import qasync, asyncio
    app = QApplication(sys.argv[:1])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    from gui.main_window import MainWindow
    window = MainWindow()
    window.resize(1200, 800)
    window.show()
    for _ in range(20):
        app.processEvents()
    assert app.platformName() == "xcb", app.platformName()
    tabs = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    image = window.grab()
    image.save(sys.argv[1])
    print("tabs:", "|".join(tabs), "size:", image.width(), image.height())
    window.close()
""")


def test_the_console_opens_on_a_real_x_server(tmp_path):
    xvfb = shutil.which("xvfb-run")
    if xvfb is None:
        pytest.skip("Xvfb is not installed (Debian: apt-get install xvfb)")
    env = dict(os.environ, QT_QPA_PLATFORM="xcb", DISPLAY=":0", PYTHONPATH=ROOT,
               ROCKETDESK_HOME=str(tmp_path / "home"))
    missing = missing_xcb_libraries() if os.environ.get("DISPLAY") else []
    if missing:
        pytest.skip(f"Qt's xcb plugin lacks {', '.join(missing)}")
    shot = tmp_path / "console.png"
    script = tmp_path / "open_console.py"
    script.write_text(SCRIPT)
    done = subprocess.run([xvfb, "-a", "-s", "-screen 0 1280x900x24", sys.executable,
                           str(script), str(shot)], capture_output=True, text=True, env=env,
                          timeout=120, cwd=ROOT, check=False)
    if "could not load the Qt platform plugin" in done.stderr.lower():
        pytest.skip("Qt's xcb plugin cannot load here: " + done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tabs: Overview|Cluster|Charts" in done.stdout
    assert shot.stat().st_size > 10_000  # a painted window, not an empty image
