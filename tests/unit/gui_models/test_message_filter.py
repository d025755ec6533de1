"""Narrowing scan results by SQL92, body text, a JSON path and a time range, without Qt."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gui.models.message_filter import FilterProblem, JsonCondition, ResultFilter, record_fields


def rec(body=b"", stored=1000, queue_id=0, offset=0, **props):
    # The fields of a MessageRecord the filter reads.
    return SimpleNamespace(topic="Orders", queue_id=queue_id, queue_offset=offset, body=body,
                           store_timestamp=stored, born_timestamp=stored - 5, reconsume_times=0,
                           properties={k: str(v) for k, v in props.items()})


ORDERS = [
    rec(json.dumps({"order": {"id": 1, "total": 120.5, "items": [{"sku": "A-1"}]},
                    "status": "paid"}).encode(), stored=1000, TAGS="paid", amount=120),
    rec(json.dumps({"order": {"id": 2, "total": 20, "items": []}, "status": "new"}).encode(),
        stored=2000, queue_id=1, TAGS="new", amount=20),
    rec(b"\x00\x01 not json", stored=3000, TAGS="raw"),
]


def ids(records) -> list[int]:
    return [ORDERS.index(r) for r in records]


def test_sql92_over_properties_and_record_fields():
    assert ids(ResultFilter.parse(sql="TAGS = 'paid'").apply(ORDERS)) == [0]
    assert ids(ResultFilter.parse(sql="amount > 50 OR TAGS IN ('raw')").apply(ORDERS)) == [0, 2]
    assert ids(ResultFilter.parse(sql="queueId = 1").apply(ORDERS)) == [1]
    assert ids(ResultFilter.parse(sql="storeTimestamp BETWEEN 1500 AND 3000").apply(ORDERS)) == [1, 2]
    assert ids(ResultFilter.parse(sql="missing IS NULL AND bodyLength > 12").apply(ORDERS)) == [0, 1]
    # A property of the same name wins over a record field.
    assert record_fields(rec(topic="mine"))["topic"] == "mine"


def test_body_text_json_paths_and_a_time_range():
    assert ids(ResultFilter.parse(body_text="not json").apply(ORDERS)) == [2]
    assert ids(ResultFilter.parse(json_path="$.order.total > 100").apply(ORDERS)) == [0]
    assert ids(ResultFilter.parse(json_path="order.items[0].sku = 'A-1'").apply(ORDERS)) == [0]
    assert ids(ResultFilter.parse(json_path='$.status != "paid"').apply(ORDERS)) == [1]
    assert ids(ResultFilter.parse(json_path="$.order.items[0]").apply(ORDERS)) == [0]  # exists
    assert ids(ResultFilter.parse(json_path="$.status contains ai").apply(ORDERS)) == [0]
    assert ids(ResultFilter.parse(json_path="$.order.total >= 20").apply(ORDERS)) == [0, 1]
    assert ids(ResultFilter.parse(json_path="$.status > 5").apply(ORDERS)) == []  # str vs number
    assert ids(ResultFilter.parse(since_ms=1500).apply(ORDERS)) == [1, 2]
    assert ids(ResultFilter.parse(since_ms=1000, until_ms=2000).apply(ORDERS)) == [0, 1]
    both = ResultFilter.parse(sql="amount >= 20", json_path="$.order.id = 2", until_ms=2500)
    assert ids(both.apply(ORDERS)) == [1]
    nothing = ResultFilter.parse()
    assert not nothing.active
    assert nothing.apply(ORDERS) == ORDERS


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"sql": "TAGS = "}, "SQL92 filter is not valid"),
    ({"json_path": "$.a..b"}, "not like $.order.items[0].sku"),
    ({"json_path": "$.a ="}, "no value after ="),
    ({"json_path": "$"}, "names nothing"),
    ({"since_ms": 5, "until_ms": 1}, "ends before it begins"),
])
def test_a_filter_that_cannot_be_used_says_why(kwargs, words):
    with pytest.raises(FilterProblem, match=words.replace("[", r"\[").replace("$", r"\$")
                       .replace(".", r"\.")):
        ResultFilter.parse(**kwargs)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text("abc", min_size=1, max_size=3), inner, max_size=3),
                     max_leaves=10)


@given(_json, st.text("abc.[]0$", max_size=12),
       st.sampled_from(["", " = ", " != ", " > ", " >= ", " < ", " <= ", " contains "]),
       _json)
def test_json_conditions_never_raise_on_any_body(document, path, op, value):
    try:
        condition = JsonCondition.parse(path + (op + json.dumps(value) if op else ""))
    except FilterProblem:
        return
    assert condition.holds(json.dumps(document).encode()) in (True, False)
    assert condition.holds(b"\xff not json") is False


def test_operators_inside_values_and_json_equality():
    body = json.dumps({"note": "a>=b", "flag": True, "one": 1, "tags": ["x", {"k": 1}],
                       "obj": {"k": 1}}).encode()
    assert JsonCondition.parse('$.note = "a>=b"').holds(body)
    assert JsonCondition.parse("$.note contains >=").holds(body)
    assert not JsonCondition.parse("$.flag = 1").holds(body)  # true is not 1
    assert JsonCondition.parse("$.flag = true").holds(body)
    assert JsonCondition.parse("$.one = 1.0").holds(body)
    assert JsonCondition.parse('$.tags contains {"k": 1}').holds(body)
    assert JsonCondition.parse("$.obj contains k").holds(body)
    assert not JsonCondition.parse('$.obj contains ["x"]').holds(body)
    with pytest.raises(FilterProblem, match="is not like"):
        JsonCondition.parse("$.a b")
