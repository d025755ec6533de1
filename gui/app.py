"""``rocketdesk console``: open the console on the default cluster (started on first run).

Without a display (no DISPLAY or WAYLAND_DISPLAY, and no QT_QPA_PLATFORM chosen) it cannot open;
``rocketdesk console`` (rocketdesk/cli.py) then starts the default cluster from the command line
instead, so the README's run command works on any machine.
"""

from __future__ import annotations

import asyncio
import os
import sys

DEFAULT_PROFILE = "single"


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                or os.environ.get("QT_QPA_PLATFORM") or sys.platform in ("darwin", "win32"))


def run_console(args) -> int:
    if not has_display():
        # `rocketdesk console` starts the cluster from the command line instead; run directly,
        # the console can only say why it does not open.
        print("rocketdesk console: no display here (DISPLAY is not set), so the console cannot "
              "open; `rocketdesk up` starts the default cluster without it", file=sys.stderr)
        return 2
    from gui.platform_check import advice, missing_xcb_libraries

    missing = missing_xcb_libraries()
    if missing:
        print(f"rocketdesk console: {advice(missing)}", file=sys.stderr)
        return 2
    import qasync
    from PySide6.QtWidgets import QApplication

    from gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("RocketDesk")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = MainWindow()
    window.show()
    clusters = window.model.known_clusters()
    if args.name and args.name in clusters and not args.profile:
        window.open_cluster(args.name)
    elif args.profile or DEFAULT_PROFILE in clusters or not clusters:
        # The embedded default cluster: started on first run, reattached afterwards.
        window.profile.setCurrentText(args.profile or DEFAULT_PROFILE)
        window.create_cluster()
    else:
        window.open_cluster(clusters[0])
    with loop:
        closed = asyncio.Event()
        app.aboutToQuit.connect(closed.set)
        loop.run_until_complete(closed.wait())
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="rocketdesk console")
    parser.add_argument("--name", help="open this cluster instead of the default one")
    parser.add_argument("--profile", help="start (or reattach to) a cluster of this built-in profile")
    return run_console(parser.parse_args(argv))
