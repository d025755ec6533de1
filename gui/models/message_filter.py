"""Narrowing a scan's results, without Qt: RocketMQ's SQL92 over a message's properties, text in
its body, a JSON path in its body, and a store-time range.

The SQL92 expression is the one consumers subscribe with (cluster/filter/sql92.py), over the
message's properties plus a few of its record fields under names a user reads on screen (a
property of the same name wins): ``topic``, ``queueId``, ``queueOffset``, ``storeTimestamp``,
``bornTimestamp``, ``reconsumeTimes``, ``bodyLength``. The JSON path is ``$.a.b[0].c`` (the
``$.`` may be left out), alone (the path exists) or with ``=``, ``!=``, ``>``, ``>=``, ``<``,
``<=`` or ``contains`` and a JSON value (``42``, ``"paid"``, ``true``, ``null``; a bare word is
a string). Every part given must hold; a problem in a part is a ``FilterProblem`` whose message
is a sentence for the status bar.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from cluster.filter.sql92 import FilterSyntaxError, SqlFilter
from common.errors import RocketDeskError

_MISSING = object()
# A condition: the path (no spaces or operator characters), then an operator, then the value.
_CONDITION = re.compile(r"^\s*([^\s=!<>]+?)\s*(?:(contains|>=|<=|!=|=|>|<)\s*(.*?))?\s*$",
                        re.DOTALL)
_STEP = re.compile(r"\.?([A-Za-z_][\w-]*)|\[(\d+)\]|\.?\[\"([^\"]*)\"\]")


class FilterProblem(RocketDeskError, ValueError):
    """A filter the user wrote that cannot be used; the message says why."""


def record_fields(record) -> dict[str, str]:
    """What a SQL92 filter sees of a message: its properties, and its record fields where no
    property has the name."""
    fields = {"topic": record.topic, "queueId": str(record.queue_id),
              "queueOffset": str(record.queue_offset),
              "storeTimestamp": str(record.store_timestamp),
              "bornTimestamp": str(record.born_timestamp),
              "reconsumeTimes": str(record.reconsume_times), "bodyLength": str(len(record.body))}
    return {**fields, **record.properties}


def _parse_path(text: str) -> list[str | int]:
    path = text.strip()
    if path.startswith("$"):
        path = path[1:]
    steps: list[str | int] = []
    position = 0
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None or match.end() == position:
            raise FilterProblem(f"the JSON path {text.strip()!r} is not like $.order.items[0].sku "
                                f"(stuck at {path[position:]!r})")
        name, index, quoted = match.groups()
        steps.append(int(index) if index is not None else (quoted if quoted is not None else name))
        position = match.end()
    if not steps:
        raise FilterProblem("the JSON path names nothing: write it like $.order.total")
    return steps


def _follow(document, steps):
    for step in steps:
        if isinstance(step, int):
            if not isinstance(document, list) or step >= len(document):
                return _MISSING
        elif not isinstance(document, dict) or step not in document:
            return _MISSING
        document = document[step]
    return document


def _literal(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text.strip("'")  # a bare word, or 'single quoted': a string


def _same(a, b) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, and nested values compare the same way."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@dataclass(frozen=True, slots=True)
class JsonCondition:
    steps: tuple
    op: str | None
    value: object

    @classmethod
    def parse(cls, text: str) -> JsonCondition:
        match = _CONDITION.match(text)
        if match is None:
            raise FilterProblem(f"the JSON condition {text.strip()!r} is not like "
                                "$.order.total > 100")
        path, op, value = match.groups()
        if op is not None and not value:
            raise FilterProblem(f"the JSON condition {text.strip()!r} has no value after {op}")
        if op is None and value:
            raise FilterProblem(f"the JSON condition {text.strip()!r} is not like "
                                "$.order.total > 100")
        return cls(tuple(_parse_path(path)), op, _literal(value) if op else None)

    def holds(self, body: bytes) -> bool:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):  # (nested deeper than Python's stack: as not JSON)
            return False  # not JSON: no path in it
        found = _follow(document, self.steps)
        if found is _MISSING:
            return False
        op, value = self.op, self.value
        if op is None:
            return True
        if op == "contains":
            if isinstance(found, str):
                return isinstance(value, str) and value in found
            if isinstance(found, dict):  # a key of the object
                return isinstance(value, str) and value in found
            return isinstance(found, list) and any(_same(item, value) for item in found)
        if op in ("=", "!="):
            return _same(found, value) == (op == "=")
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (found, value))
        if not numbers and not (isinstance(found, str) and isinstance(value, str)):
            return False  # ordering compares numbers with numbers, strings with strings
        return {">": found > value, ">=": found >= value, "<": found < value,
                "<=": found <= value}[op]


@dataclass(frozen=True, slots=True)
class ResultFilter:
    """Every given part must hold for a message to be shown."""

    sql: SqlFilter | None = None
    body_text: bytes | None = None
    json: JsonCondition | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @classmethod
    def parse(cls, sql: str = "", body_text: str = "", json_path: str = "",
              since_ms: int | None = None, until_ms: int | None = None) -> ResultFilter:
        compiled = None
        if sql.strip():
            try:
                compiled = SqlFilter(sql)
            except FilterSyntaxError as exc:
                raise FilterProblem(f"the SQL92 filter is not valid: {exc}") from exc
        if since_ms is not None and until_ms is not None and since_ms > until_ms:
            raise FilterProblem("the time range ends before it begins")
        return cls(compiled, body_text.encode() if body_text else None,
                   JsonCondition.parse(json_path) if json_path.strip() else None,
                   since_ms, until_ms)

    @property
    def active(self) -> bool:
        return any(part is not None for part in (self.sql, self.body_text, self.json,
                                                 self.since_ms, self.until_ms))

    def matches(self, record) -> bool:
        stored = record.store_timestamp
        if self.since_ms is not None and stored < self.since_ms:
            return False
        if self.until_ms is not None and stored > self.until_ms:
            return False
        if self.body_text is not None and self.body_text not in record.body:
            return False
        if self.json is not None and not self.json.holds(record.body):
            return False
        return self.sql is None or self.sql.matches(record_fields(record))

    def apply(self, records: list) -> list:
        return [r for r in records if self.matches(r)] if self.active else list(records)
