"""The compiled core builds where it has not been built yet: on macOS (no Linux calls) and on
Windows (no POSIX calls, no GCC extensions MSVC lacks). Neither platform is at hand here, so
each source is compiled as it would be there: with the Linux branches taken away, and with a
Windows cross-compiler against a Windows configuration of Python's own headers, then linked
into an extension module, so that every call it makes outside Python is one Windows' C
runtime has. Not tried: what MSVC alone would refuse, and a call glibc's headers declare that
macOS's lack (docs/platforms.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINGW = "x86_64-w64-mingw32-gcc"
FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror=implicit-function-declaration",
         "-Werror=vla"]

# Windows' pyconfig.h in the shape of Python's own for 64-bit Windows (PC/pyconfig.h): enough
# for Python.h and an extension module, written here, not copied.
WINDOWS_PYCONFIG = """\
#ifndef Py_CONFIG_H
#define Py_CONFIG_H
#include <io.h>
#include <stdio.h>
#include <float.h>
#include <basetsd.h>
#define MS_WIN32
#define MS_WIN64
#define MS_WINDOWS
#define NT_THREADS
#define WITH_THREAD
#define HAVE_SSIZE_T 1
#define PY_LONG_LONG long long
#define PY_LLONG_MIN LLONG_MIN
#define PY_LLONG_MAX LLONG_MAX
#define PY_ULLONG_MAX ULLONG_MAX
#define Py_ENABLE_SHARED 1
#define HAVE_DECLSPEC_DLL
#define PLATFORM "win32"
#define SIZEOF_VOID_P 8
#define SIZEOF_TIME_T 8
#define SIZEOF_OFF_T 4
#define SIZEOF_FPOS_T 8
#define SIZEOF_SIZE_T 8
#define SIZEOF_SHORT 2
#define SIZEOF_INT 4
#define SIZEOF_LONG 4
#define SIZEOF_LONG_LONG 8
#define SIZEOF_DOUBLE 8
#define SIZEOF_FLOAT 4
#define SIZEOF_WCHAR_T 2
#define SIZEOF__BOOL 1
#define HAVE_UINTPTR_T 1
#define HAVE_INTPTR_T 1
#define HAVE_COPYSIGN 1
#define HAVE_ROUND 1
#define HAVE_DECL_ISINF 1
#define HAVE_DECL_ISNAN 1
#define HAVE_DECL_ISFINITE 1
#define STDC_HEADERS 1
#define WITH_DOC_STRINGS 1
#define WITH_PYMALLOC 1
#define HAVE_DYNAMIC_LOADING
#define HAVE_WCHAR_H 1
#define HAVE_ERRNO_H 1
#define HAVE_FCNTL_H 1
#define HAVE_SIGNAL_H 1
#define HAVE_STDDEF_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_TYPES_H 1
#define Py_WCHAR_T_SIZE 2
#define DOUBLE_IS_LITTLE_ENDIAN_IEEE754 1
#endif
"""


def extensions() -> dict[str, list[str]]:
    """setup.py's extension modules and their C sources."""
    text = (ROOT / "setup.py").read_text()
    found = {name: re.findall(r'"(common/[\w.]+\.c)"', sources)
             for name, sources in re.findall(r'Extension\("([\w.]+)",\s*\[([^\]]*)\]', text)}
    assert found, "setup.py's extensions were not found"
    assert all(found.values()), "an extension without C sources"
    return found


def complaints(output: str) -> list[str]:
    """The compiler's warnings and errors about the project's own sources."""
    return [line for line in output.splitlines()
            if line.startswith("common/") and (": warning:" in line or ": error:" in line)]


def test_the_compiled_core_compiles_without_the_linux_calls():
    """As on macOS: every branch that is Linux's alone left out (no page warmer, no range
    sync), strict C11 without variable-length arrays (MSVC has none)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here (the compiled core is not built either)")
    include = sysconfig.get_paths()["include"]
    for sources in extensions().values():
        for source in sources:
            done = subprocess.run([compiler, "-fsyntax-only", "-std=c11", "-D_DEFAULT_SOURCE",
                                   "-U__linux__", *FLAGS, "-Wpedantic", f"-I{include}", source],
                                  cwd=ROOT, capture_output=True, text=True, timeout=120,
                                  check=False)
            assert done.returncode == 0, done.stderr
            assert not complaints(done.stderr), done.stderr


def test_the_compiled_core_builds_and_links_for_windows(tmp_path):
    if shutil.which(MINGW) is None or shutil.which("x86_64-w64-mingw32-dlltool") is None:
        pytest.skip("no Windows cross-compiler here (Debian: apt-get install "
                    "gcc-mingw-w64-x86-64-win32)")
    include = tmp_path / "include"
    shutil.copytree(sysconfig.get_paths()["include"], include)
    (include / "pyconfig.h").write_text(WINDOWS_PYCONFIG)
    for name, sources in extensions().items():
        objects = []
        for source in sources:
            target = tmp_path / (Path(source).stem + ".o")
            done = subprocess.run([MINGW, "-c", *FLAGS, f"-I{include}", source, "-o", str(target)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=120,
                                  check=False)
            assert done.returncode == 0, done.stderr
            assert not complaints(done.stderr), done.stderr
            objects.append(str(target))
        # Python's own functions come from its DLL: an import library naming each one used.
        undefined = subprocess.run(["x86_64-w64-mingw32-nm", "-u", *objects], capture_output=True,
                                   text=True, check=True).stdout.split()
        python = sorted({s.removeprefix("__imp_") for s in undefined
                         if re.match(r"(__imp_)?_?Py", s)})
        definition = tmp_path / "python3.def"
        definition.write_text("LIBRARY python3.dll\nEXPORTS\n" + "\n".join(python) + "\n")
        subprocess.run(["x86_64-w64-mingw32-dlltool", "-d", str(definition), "-l",
                        str(tmp_path / "libpython3.a")], check=True, timeout=60)
        # Linked as Windows links an extension: whatever else it calls must be in Windows' C
        # runtime or kernel32 (a pread, an mmap, a pthread left in would be undefined here).
        module = tmp_path / (name.rsplit(".", 1)[-1] + ".pyd")
        done = subprocess.run([MINGW, "-shared", *objects, f"-L{tmp_path}", "-lpython3", "-o",
                               str(module)], capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        exports = subprocess.run(["x86_64-w64-mingw32-objdump", "-p", str(module)],
                                 capture_output=True, text=True, check=True).stdout
        assert f"PyInit_{name.rsplit('.', 1)[-1]}" in exports
