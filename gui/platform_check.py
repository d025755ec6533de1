"""Whether Qt's X11 platform plugin can load here, asked before Qt is (no Qt import).

Qt's xcb plugin needs a dozen X libraries a minimal Linux desktop may lack (libxcb-cursor0,
libxcb-icccm4, libxcb-keysyms1, …). Without them Qt prints only "Could not load the Qt platform
plugin xcb" and aborts. This module finds the plugin in the installed PySide6, asks the dynamic
linker (ldd) which of its libraries are missing, and names the Debian/Ubuntu packages that
provide them, so the console can say what to install and start the cluster without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

# The library file names ldd reports missing -> the Debian/Ubuntu package providing each.
PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0", "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-sync.so.1": "libxcb-sync1", "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-render.so.0": "libxcb-render0", "libxcb-util.so.1": "libxcb-util1",
    "libxcb.so.1": "libxcb1", "libX11-xcb.so.1": "libx11-xcb1", "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0", "libxkbcommon.so.0": "libxkbcommon0",
    "libEGL.so.1": "libegl1", "libGL.so.1": "libgl1", "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1", "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3", "libglib-2.0.so.0": "libglib2.0-0",
}
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def missing_from_ldd(text: str) -> list[str]:
    """The libraries an ldd listing says are not found, in order, once each."""
    seen: list[str] = []
    for name in _NOT_FOUND.findall(text):
        if name not in seen:
            seen.append(name)
    return seen


def packages_for(libraries: list[str]) -> list[str]:
    """The packages to install for ``libraries`` (a library we cannot place is named as is)."""
    out: list[str] = []
    for library in libraries:
        package = PACKAGES.get(library, library)
        if package not in out:
            out.append(package)
    return out


def _plugin_files() -> list[str]:
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = os.path.join(next(iter(spec.submodule_search_locations)), "Qt")
    candidates = [os.path.join(root, "plugins", "platforms", "libqxcb.so"),
                  os.path.join(root, "lib", "libQt6XcbQpa.so.6")]
    return [path for path in candidates if os.path.exists(path)]


def missing_xcb_libraries() -> list[str]:
    """Libraries Qt's xcb plugin needs and this machine lacks ([] when it can load, or when this
    is not a Linux X11 session, or ldd is not there to ask)."""
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return []
    if os.environ.get("QT_QPA_PLATFORM", "xcb") not in ("xcb", ""):
        return []  # another platform plugin was asked for
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    missing: list[str] = []
    for path in _plugin_files():
        try:
            listing = subprocess.run([ldd, path], capture_output=True, text=True, timeout=10,
                                     check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for name in missing_from_ldd(listing):
            if name not in missing:
                missing.append(name)
    return missing


def advice(missing: list[str]) -> str:
    """One sentence naming what to install."""
    packages = " ".join(packages_for(missing))
    return (f"the console cannot open on this X display: Qt's xcb plugin needs "
            f"{', '.join(missing)}; install them with `sudo apt-get install {packages}` "
            "(Debian/Ubuntu package names)")
