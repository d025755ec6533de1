"""Java ``.properties`` files, as RocketMQ's ``broker.conf`` and ``namesrv.conf`` are written.

Comments start with ``#`` or ``!``; a key ends at the first unescaped ``=``, ``:`` or
whitespace; a line ending in an odd number of backslashes continues on the next; ``\\t``,
``\\n``, ``\\uXXXX`` and friends are unescaped (``java.util.Properties.load``).
"""

from __future__ import annotations

import re

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str):
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Key/value pairs of a properties file, later keys overriding earlier ones."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape(key)] = _unescape(rest.rstrip("\r"))
    return result


_OTHER_BREAKS = "\x0b\x1c\x1d\x1e\x85\u2028\u2029"


def _escape(text: str, key: bool) -> str:
    out = text.replace("\\", "\\\\")  # first: a Windows path's separators read back as such
    for char, name in (("\t", "t"), ("\n", "n"), ("\r", "r"), ("\f", "f")):
        out = out.replace(char, "\\" + name)
    for char in _OTHER_BREAKS:  # Java reads them as text; str.splitlines as line ends
        out = out.replace(char, f"\\u{ord(char):04x}")
    if key:
        for char in "=: #!":
            out = out.replace(char, "\\" + char)
    if out[:1].isspace():  # a leading blank would be read as the separator's
        out = f"\\u{ord(out[0]):04x}{out[1:]}"
    return out


def format_properties(values: dict[str, object]) -> str:
    """A properties file :func:`parse_properties` reads back as ``values`` (as Java's would)."""
    return "".join(f"{_escape(str(k), True)}={_escape(str(v), False)}\n" for k, v in values.items())


def load_properties(path: str) -> dict[str, str]:
    """Read and parse a properties file (UTF-8; Latin-1 files with \\u escapes read the same)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_properties(handle.read())
