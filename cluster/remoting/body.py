"""Checked reading of JSON request bodies (heartbeats, lock batches, group configs, registrations).

A body is as hostile as a header: ``{"retryQueueNums": 1e12}``, ``{"consumeEnable": "false"}``
(which ``bool()`` reads as True) or a list where an object goes must be answered, not raised
inside a processor. ``JsonBody`` reads values the way fastjson binds them onto a Java bean,
checks their type and range, and raises :class:`HeaderError` with a sentence naming the path.
"""

from __future__ import annotations

import json
from typing import Any

from cluster.remoting import fastjson
from cluster.remoting.header import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    HeaderError,
    java_integer,
)

_ABSENT = object()


class JsonBody:
    """One JSON object of a body, with typed getters; ``path`` names it in errors."""

    def __init__(self, data: dict, path: str) -> None:
        self.data = data
        self.path = path

    @classmethod
    def parse(cls, body: bytes, what: str) -> JsonBody:
        """The body as a JSON object (fastjson's dialect), or HeaderError."""
        try:
            data = fastjson.loads(body)
        except RecursionError:
            raise HeaderError(f"the {what} body nests too deeply") from None
        except UnicodeDecodeError:
            raise HeaderError(f"the {what} body is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            # json's message says where it stopped ("Expecting value: line 1 column 5"), which
            # is what the sender needs; ours, not Python's, says what it is about.
            raise HeaderError(f"the {what} body does not parse as JSON: {exc.msg} at character "
                              f"{exc.pos}") from None
        except ValueError:
            where = None
            raise HeaderError(f"the {what} body does not parse as JSON: {where or 'malformed'}") \
                from None
        if not isinstance(data, dict):
            raise HeaderError(f"the {what} body is not a JSON object")
        return cls(data, what)

    def _fail(self, key: str, why: str) -> HeaderError:
        return HeaderError(f"{self.path}.{key} {why}")

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key, _ABSENT)
        if value is _ABSENT or value is None:
            if default is _ABSENT:
                raise self._fail(key, "is missing")
            return default
        return value

    def integer(self, key: str, default: Any = _ABSENT, *, bits: int = 32,
                minimum: int | None = None, maximum: int | None = None) -> Any:
        value = self._get(key, default)
        if value is default and default is not _ABSENT:
            return value
        if isinstance(value, bool):
            raise self._fail(key, "is a boolean where a number goes")
        if isinstance(value, str):
            number = java_integer(value.strip())
            if number is None:
                raise self._fail(key, f"= {value[:40]!r} is not an integer")
            value = number
        if isinstance(value, float):
            if not value.is_integer():
                raise self._fail(key, f"= {value} is not an integer")
            value = int(value)
        if not isinstance(value, int):
            raise self._fail(key, "is not a number")
        low, high = (INT32_MIN, INT32_MAX) if bits == 32 else (INT64_MIN, INT64_MAX)
        low = low if minimum is None else max(low, minimum)
        high = high if maximum is None else min(high, maximum)
        if not low <= value <= high:
            shown_value = str(value) if abs(value) < 10**20 else f"{str(value)[:20]}…"
            raise self._fail(key, f"= {shown_value} is outside {low}..{high}")
        return value

    def boolean(self, key: str, default: Any = _ABSENT) -> Any:
        value = self._get(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if value is default and default is not _ABSENT:
            return value
        raise self._fail(key, "is not a boolean")

    def text(self, key: str, default: Any = _ABSENT, *, max_length: int = 65_536) -> Any:
        value = self._get(key, default)
        if value is default and default is not _ABSENT:
            return value
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self._fail(key, "is not a string")
        value = str(value)
        if len(value) > max_length:
            raise self._fail(key, f"is {len(value)} characters long; the limit is {max_length}")
        return value

    def obj(self, key: str, *, required: bool = False) -> JsonBody | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self._fail(key, "is missing")
            return None
        if not isinstance(value, dict):
            raise self._fail(key, "is not a JSON object")
        return JsonBody(value, f"{self.path}.{key}")

    def items(self, key: str, *, max_items: int = 65_536) -> list[Any]:
        """A JSON array (absent or null: empty)."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(key, "is not a JSON array")
        if len(value) > max_items:
            raise self._fail(key, f"has {len(value)} entries; the limit is {max_items}")
        return value

    def objects(self, key: str, *, max_items: int = 65_536) -> list[JsonBody]:
        """A JSON array of objects."""
        out = []
        for index, value in enumerate(self.items(key, max_items=max_items)):
            if not isinstance(value, dict):
                raise self._fail(f"{key}[{index}]", "is not a JSON object")
            out.append(JsonBody(value, f"{self.path}.{key}[{index}]"))
        return out
