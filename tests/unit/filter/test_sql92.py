"""The SQL92 filter: parser and evaluator against a small reference model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.filter.sql92 import FilterSyntaxError, SqlFilter, evaluate, parse

NAMES = ["a", "b", "region", "TAGS"]
VALUES = ["1", "2", "10", "-3", "2.5", "x", "eu", "it's", "true"]


# -- a reference model: expressions as nested tuples, evaluated the plain way ----------------------
def ref_number(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def ref_compare(op, a, b):
    if a is None or b is None:
        return None
    if any(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b)):
        x, y = ref_number(a), ref_number(b)
        if x is None or y is None:
            return False
        return {"=": x == y, "<>": x != y, ">": x > y, ">=": x >= y, "<": x < y, "<=": x <= y}[op]
    if op not in ("=", "<>"):
        return False
    x, y = str(a).lower() if isinstance(a, bool) else a, str(b).lower() if isinstance(b, bool) else b
    return (x == y) if op == "=" else (x != y)


def ref_not(v):
    return None if v is None else not v


def ref_eval(expr, props):
    kind = expr[0]
    if kind == "cmp":
        _, op, name, lit = expr
        return ref_compare(op, props.get(name), lit)
    if kind == "null":
        _, name, negated = expr
        return (name in props) if negated else (name not in props)
    if kind == "between":
        _, name, low, high, negated = expr
        lo, hi = ref_compare(">=", props.get(name), low), ref_compare("<=", props.get(name), high)
        if lo is None or hi is None:
            return None
        return (not (lo and hi)) if negated else (lo and hi)
    if kind == "in":
        _, name, options, negated = expr
        if name not in props:
            return None
        hit = any(ref_compare("=", props[name], o) for o in options)
        return (not hit) if negated else hit
    if kind == "not":
        return ref_not(ref_eval(expr[1], props))
    values = [ref_eval(e, props) for e in expr[1:]]
    if kind == "and":
        return False if False in values else (None if None in values else True)
    return True if True in values else (None if None in values else False)  # or


def literal_text(v):
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def render(expr):
    kind = expr[0]
    if kind == "cmp":
        return f"{expr[2]} {expr[1]} {literal_text(expr[3])}"
    if kind == "null":
        return f"{expr[1]} IS {'NOT ' if expr[2] else ''}NULL"
    if kind == "between":
        negated = "NOT " if expr[4] else ""
        return f"{expr[1]} {negated}BETWEEN {literal_text(expr[2])} AND {literal_text(expr[3])}"
    if kind == "in":
        return f"{expr[1]} {'NOT ' if expr[3] else ''}IN ({', '.join(literal_text(o) for o in expr[2])})"
    if kind == "not":
        return f"NOT ({render(expr[1])})"
    return "(" + f" {kind.upper()} ".join(render(e) for e in expr[1:]) + ")"


literals = st.one_of(st.integers(-5, 20), st.sampled_from([0.5, 2.5, -1.25]),
                     st.sampled_from(["x", "eu", "it's", "1", "10"]), st.booleans())
numbers = st.one_of(st.integers(-5, 20), st.sampled_from([0.5, 2.5]))
names = st.sampled_from(NAMES)
leaves = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), names, literals),
    st.tuples(st.just("null"), names, st.booleans()),
    st.tuples(st.just("between"), names, numbers, numbers, st.booleans()),
    st.tuples(st.just("in"), names, st.lists(st.sampled_from(["x", "eu", "1"]), min_size=1, max_size=3)
              .map(tuple), st.booleans()),
)
expressions = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(st.just("not"), inner),
    st.tuples(st.just("and"), inner, inner),
    st.tuples(st.just("or"), inner, inner)), max_leaves=8)
properties = st.dictionaries(names, st.sampled_from(VALUES), max_size=4)


@settings(max_examples=400, deadline=None)
@given(expressions, properties)
def test_the_evaluator_agrees_with_the_reference_model(expr, props):
    text = render(expr)
    assert SqlFilter(text).matches(props) == (ref_eval(expr, props) is True), text


@pytest.mark.parametrize(("text", "props", "expected"), [
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "ten"}, False),
    ("a > 5", {}, False),
    ("NOT (a > 5)", {}, False),  # unknown stays unknown under NOT
    ("a IS NULL OR a < 3", {}, True),
    ("region IN ('eu', 'us') AND TAGS = 'paid'", {"region": "eu", "TAGS": "paid"}, True),
    ("region NOT IN ('eu')", {"region": "eu"}, False),
    ("price BETWEEN 1 AND 2.5", {"price": "2.5"}, True),
    ("name = 'it''s'", {"name": "it's"}, True),
    ("flag = TRUE", {"flag": "true"}, True),
])
def test_examples(text, props, expected):
    assert SqlFilter(text).matches(props) is expected


@pytest.mark.parametrize("text", ["", "a >", "a = 'x", "a BETWEEN 1", "a IN ()", "(a = 1", "a = 1 b"])
def test_malformed_expressions_are_refused_with_a_position(text):
    with pytest.raises(FilterSyntaxError):
        parse(text)


@pytest.mark.parametrize("text", [
    "(" * 5000 + "a = 1" + ")" * 5000,
    "NOT " * 5000 + "a = 1",
    " AND ".join(["a = 1"] * 5000),
    " OR ".join(["a = 1"] * 5000),
])
def test_expressions_nested_beyond_the_limit_are_refused_with_a_sentence(text):
    # Any client can send one: it must not overflow the broker's stack while parsing or later
    # while evaluating it against every message.
    with pytest.raises(FilterSyntaxError, match="nests deeper"):
        parse(text)


def test_nesting_within_the_limit_still_parses_and_evaluates():
    tree = parse("(" * 60 + " AND ".join(["a = 1"] * 60) + ")" * 60)
    assert evaluate(tree, {"a": "1"}) is True
