"""The official RocketMQ C++ client core, installed from PyPI into a cache folder by the tests.

Every RocketMQ client on PyPI installs a top-level package named ``rocketmq``, so they live in
their own folders (never in the project's environment) and run in subprocesses:

* ``cpp``: the Apache wrapper rocketmq-client-python 2.0.0 with the 2.1.0 core's
  ``librocketmq.so`` taken from rocketmq-python-cvs 2.1.0.3 (SEND_MESSAGE_V2, code 310);
* ``old``: rocketmq-client-python 0.5.0rc2 with its bundled older core (SEND_MESSAGE, code 10).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time

import pytest

from common.platform.file_lock import try_lock
from common.platform.files import BINARY

CACHE = os.environ.get("ROCKETDESK_INTEROP_CACHE") or os.path.join(
    os.path.expanduser("~"), ".cache", "rocketdesk", "interop")


@contextlib.contextmanager
def _installing(wait: float = 1200.0):
    """One installer at a time: the suite's workers (pytest-xdist) may reach for the same
    client at once, and a folder one removes and refills must not be the other's."""
    os.makedirs(CACHE, exist_ok=True)
    fd = os.open(os.path.join(CACHE, ".installing"), os.O_RDWR | os.O_CREAT | BINARY, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                try_lock(fd)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)  # (the lock goes with it)


def _pip_target(target: str, requirement: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", "--target", target, requirement], check=True, timeout=600)


def _install() -> dict[str, str]:
    cpp = os.path.join(CACHE, "cpp")
    old = os.path.join(CACHE, "old")
    if not os.path.exists(os.path.join(cpp, "rocketmq", "librocketmq.so")):
        shutil.rmtree(cpp, ignore_errors=True)
        _pip_target(cpp, "rocketmq-client-python==2.0.0")
        cvs = os.path.join(CACHE, "cvs")
        _pip_target(cvs, "rocketmq-python-cvs==2.1.0.3")
        shutil.copy(os.path.join(cvs, "rocketmq", "librocketmq.so"),
                    os.path.join(cpp, "rocketmq", "librocketmq.so"))
    if not os.path.exists(os.path.join(old, "rocketmq", "librocketmq.so")):
        shutil.rmtree(old, ignore_errors=True)
        _pip_target(old, "rocketmq-client-python==0.5.0rc2")
    return {"cpp": cpp, "old": old}


@pytest.fixture(scope="session")
def cpp_clients() -> dict[str, str]:
    """Folders to put on PYTHONPATH for each client core."""
    with _installing():
        return _install()


def _install_py5() -> str:
    """The official 5.x Python client (gRPC) with its dependencies, in a folder of its own."""
    py5 = os.path.join(CACHE, "py5")
    if not os.path.exists(os.path.join(py5, "rocketmq", "v5", "producer")):
        shutil.rmtree(py5, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "--target", py5,
                        "rocketmq-python-client==5.1.2"], check=True, timeout=900)
    return py5


@pytest.fixture(scope="session")
def py5_client() -> str:
    """The folder to put on PYTHONPATH for the official 5.x client."""
    with _installing():
        return _install_py5()
