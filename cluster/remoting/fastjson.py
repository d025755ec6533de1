"""Reading and writing JSON the way fastjson (RocketMQ's Java JSON library) does.

fastjson writes maps with integer keys unquoted (``{0:"10.0.0.1:10911"}``), which Python's
``json`` rejects. ``loads`` quotes bare numeric keys first, skipping string contents;
``dumps_legacy`` writes integer-keyed maps the old way for clients that expect it (the Go client
parses ``brokerAddrs`` by hand and needs ``{0:"…",1:"…"}`` with no spaces).
"""

from __future__ import annotations

import json
import re

# Where a bare numeric key may be: "{" or "," then digits then ":". A text with none cannot be
# mended by quoting keys, so a body that fails to parse for another reason is refused after one
# pass in C, not walked character by character (15 MiB: 2.5 s and 330 MB on the event loop).
# Possessive quantifiers: one linear pass, never backtracking, whatever the text.
_BARE_KEY_CANDIDATE = re.compile(r"[{,]\s*+-?\d++\s*+:", re.ASCII)
# The slow path's tokens: a whole string, skipped as it is (an unterminated one runs to the end
# of the text), or a bare key right after a "{" or "," outside any string.
_STRING_OR_BARE_KEY = re.compile(
    r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|(?<=[{,])(\s*+)(-?\d++)(?=\s*+:)', re.DOTALL | re.ASCII)


def _quoted(match: re.Match[str]) -> str:
    digits = match.group(2)
    return match.group(0) if digits is None else f'{match.group(1)}"{digits}"'


def quote_numeric_keys(text: str) -> str:
    """``{0:"a",-1:2}`` -> ``{"0":"a","-1":2}``; strings are left untouched."""
    return _STRING_OR_BARE_KEY.sub(_quoted, text)


def loads(text: str | bytes):
    """Parse standard JSON or fastjson's dialect with unquoted integer keys."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        if _BARE_KEY_CANDIDATE.search(text) is None:
            raise  # not fastjson's dialect either: the standard parser's reason stands
        return json.loads(quote_numeric_keys(text))


def dumps(value) -> str:
    """Compact standard JSON (what brokers >= 4.9.4 and 5.x send)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dumps_legacy(value) -> str:
    """Compact JSON with integer dict keys unquoted, as fastjson writes them."""
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            rendered_key = str(key) if isinstance(key, int) and not isinstance(key, bool) else (
                json.dumps(str(key), ensure_ascii=False))
            items.append(f"{rendered_key}:{dumps_legacy(item)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dumps_legacy(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
