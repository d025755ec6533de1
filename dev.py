"""The README's two commands for every platform, dev.sh's twin in Python (on Windows and macOS
without bash, or wherever one prefers it):

    python dev.py run     install everything into .venv, then launch RocketDesk
    python dev.py test    install everything into .venv, then run the whole test suite

Extra arguments go to the launched program (run) or to pytest (test). It keeps the same .venv
and the same install stamp as dev.sh, so the two can be used in turn."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
EXTRAS = ".[test,spark,peers]"


def venv_tool(name: str) -> Path:
    """A program of the project's virtual environment (Scripts\\name.exe on Windows)."""
    if os.name == "nt":
        return VENV / "Scripts" / f"{name}.exe"
    return VENV / "bin" / name


def stamped_files() -> list[Path]:
    """What the install depends on, a change to any of which reinstalls (as dev.sh lists them):
    the project's declarations and every C source and header of its compiled core (a change
    to one the stamp missed would leave the old build in place, and the tests would run it)."""
    core = ROOT / "common"
    return [ROOT / "pyproject.toml", ROOT / "setup.py", *sorted(core.glob("*.c")),
            *sorted(core.glob("*.h"))]


def install_stamp() -> str:
    digest = hashlib.sha256()
    for path in stamped_files():
        digest.update(path.read_bytes())
    return digest.hexdigest()


def ensure_installed() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 (run by whatever python the user has)
        sys.exit("dev.py: Python 3.11 or newer is needed")
    if not venv_tool("python").exists():
        print(f"dev.py: creating {VENV.name} with {sys.executable}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    stamp = VENV / ".rocketdesk-installed"
    want = install_stamp()
    if not stamp.exists() or stamp.read_text().strip() != want:
        print("dev.py: installing RocketDesk and its dependencies", file=sys.stderr)
        subprocess.run([str(venv_tool("python")), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "-e", EXTRAS], cwd=ROOT, check=True)
        stamp.write_text(want + "\n")


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("run", [])
    if command not in ("run", "test"):
        print("usage: python dev.py run|test [args]", file=sys.stderr)
        return 2
    ensure_installed()
    os.chdir(ROOT)
    if command == "run":
        # The console on the default cluster, as `./dev.sh run` (see there).
        return hand_over([str(venv_tool("rocketdesk")), "console", *rest])
    for check in ("ruff", "lint-imports", "mypy"):
        args = [str(venv_tool(check))] + (["check", "."] if check == "ruff" else [])
        if subprocess.call(args) != 0:
            return 1
    # On workers, a test module to each: see dev.sh.
    return hand_over([str(venv_tool("python")), "-m", "pytest", *PARALLEL, *rest])


PARALLEL = ["--numprocesses", "auto", "--maxprocesses", "4", "--dist", "loadgroup"]


def hand_over(args: list[str]) -> int:
    """Become the program, as dev.sh's ``exec`` does, so that Ctrl-C reaches it alone (it then
    tears down what it started); Windows has no exec: wait for it, leaving Ctrl-C to it."""
    if os.name != "nt":
        os.execv(args[0], args)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
