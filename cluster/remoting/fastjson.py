"""Reading and writing JSON the way fastjson (RocketMQ's Java JSON library) does.

fastjson writes maps with integer keys unquoted (``{0:"10.0.0.1:10911"}``), which Python's
``json`` rejects. ``loads`` quotes bare numeric keys first, skipping string contents;
``dumps_legacy`` writes integer-keyed maps the old way for clients that expect it (the Go client
parses ``brokerAddrs`` by hand and needs ``{0:"…",1:"…"}`` with no spaces).
"""

from __future__ import annotations

import json


def quote_numeric_keys(text: str) -> str:
    """``{0:"a",-1:2}`` -> ``{"0":"a","-1":2}``; strings are left untouched."""
    out = []
    i = 0
    n = len(text)
    expect_key = False
    while i < n:
        char = text[i]
        if char == '"':
            j = i + 1
            while j < n:
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] == '"':
                    break
                j += 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if char in "{,":
            out.append(char)
            i += 1
            expect_key = True
            continue
        if expect_key and (char.isdigit() or char == "-"):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
        if not char.isspace():
            expect_key = False
        out.append(char)
        i += 1
    return "".join(out)


def loads(text: str | bytes):
    """Parse standard JSON or fastjson's dialect with unquoted integer keys."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
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
