"""Build the RocketDesk console as one folder with PyInstaller, on Linux, macOS or Windows:

    python packaging/build.py

dist/rocketdesk/ holds `rocketdesk` (the command line) and `rocketdesk-console` (the console,
windowed); on macOS also dist/RocketDesk.app. The project's .venv is made or brought up to date
first, as the two commands of the README do it (dev.py). build.sh runs this and can install a
desktop entry on Linux."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dev  # noqa: E402 - the .venv's place and its install, as `dev.py run|test` have them


def main() -> int:
    dev.ensure_installed()
    python = str(dev.venv_tool("python"))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "pyinstaller>=6.0"], check=True)
    subprocess.run([python, "-m", "PyInstaller", "--noconfirm", "--clean", "--distpath",
                    str(ROOT / "dist"), "--workpath", str(ROOT / "build" / "pyinstaller"),
                    str(ROOT / "packaging" / "rocketdesk.spec")], check=True)
    print(f"built {ROOT / 'dist' / 'rocketdesk'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
