"""The bundle's windowed program, ``rocketdesk-console``: what RocketDesk.app runs on macOS and
what a Windows user starts from the Start menu or Explorer. It opens the console in this process,
so no terminal window comes with it.

A windowed program has no standard streams on Windows, so the processes the console starts
(nodes, load generators, exports), which log to their streams, run the bundle's console-mode
program ``rocketdesk`` instead: ``sys.executable`` points at it before anything is started
(entry.py runs ``rocketdesk -m MODULE`` the way ``python -m`` would)."""

import os
import runpy
import sys

_cli = os.path.join(os.path.dirname(sys.executable),
                    "rocketdesk.exe" if sys.platform == "win32" else "rocketdesk")
if os.path.exists(_cli):
    sys.executable = _cli
sys.argv = ["gui", *sys.argv[1:]]
runpy.run_module("gui", run_name="__main__", alter_sys=True)
