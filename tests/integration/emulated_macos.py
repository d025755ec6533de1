"""Run a module or a script as on macOS, whose Python has no ``os.fdatasync`` and no
``os.posix_fallocate``: they are taken away before anything of ours is imported. And whose
file system ignores case (APFS as installed): the store's file system is said to.

    python -m tests.integration.emulated_macos -m cluster.broker -c broker.conf
    python -m tests.integration.emulated_macos path/to/script.py args…
"""

from __future__ import annotations

import os
import runpy
import sys

MISSING = ("fdatasync", "posix_fallocate")


def emulate() -> None:
    for name in MISSING:
        if hasattr(os, name):
            delattr(os, name)
    from common.platform import file_names

    file_names.ignores_case = lambda folder: True


if __name__ == "__main__":
    emulate()
    if sys.argv[1] == "-m":
        module = sys.argv[2]
        sys.argv = [module, *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")
