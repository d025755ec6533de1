"""RocketMQ's SQL92 property filter: a parser and an evaluator, sans I/O.

The grammar is RocketMQ's subset of SQL92: ``AND``, ``OR``, ``NOT``; comparisons ``=``,
``<>``, ``>``, ``>=``, ``<``, ``<=``; ``[NOT] BETWEEN a AND b``; ``[NOT] IN ('x', 'y')``;
``IS [NOT] NULL``; string literals in single quotes (``''`` for a quote), integer and decimal
numbers, ``TRUE`` and ``FALSE``; identifiers name message properties (plus ``TAGS``).

Evaluation is three-valued, as in SQL: a missing property makes a comparison unknown (None),
and only a TRUE result selects a message. Property values are strings; compared with a number
they are read as numbers (a value that is not one makes the comparison false), and ordering
comparisons apply to numbers only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.errors import RocketDeskError


class FilterSyntaxError(RocketDeskError, ValueError):
    """An expression that is not RocketMQ SQL92; the message says where."""


# -- the syntax tree ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Literal:
    value: object  # str, int, float or bool


@dataclass(frozen=True, slots=True)
class Property:
    name: str


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = <> > >= < <=
    left: object
    right: object


@dataclass(frozen=True, slots=True)
class Between:
    value: object
    low: object
    high: object
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    value: object
    options: tuple
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    value: object
    negated: bool = False


@dataclass(frozen=True, slots=True)
class And:
    left: object
    right: object


@dataclass(frozen=True, slots=True)
class Or:
    left: object
    right: object


@dataclass(frozen=True, slots=True)
class Not:
    operand: object


# -- tokens ----------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>'(?:[^']|'')*')
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![A-Za-z_])
    | (?P<op><>|>=|<=|=|>|<|\(|\)|,)
    | (?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)
    )""", re.VERBOSE)
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"}


def _tokens(text: str) -> list[tuple[str, object, int]]:
    tokens = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise FilterSyntaxError(f"unexpected {text[pos:].strip()[:20]!r} at position {pos}")
        kind = match.lastgroup
        raw = match.group(kind)
        start = match.start(kind)
        if kind == "string":
            tokens.append(("literal", raw[1:-1].replace("''", "'"), start))
        elif kind == "number":
            try:
                number = float(raw) if any(c in raw for c in ".eE") else int(raw)
            except ValueError:  # over Python's 4,300 digits (Java's parse fails long before)
                raise FilterSyntaxError(f"the number at position {start} is too long") from None
            tokens.append(("literal", number, start))
        elif kind == "word" and raw.upper() in _KEYWORDS:
            upper = raw.upper()
            if upper in ("TRUE", "FALSE"):
                tokens.append(("literal", upper == "TRUE", start))
            else:
                tokens.append(("kw", upper, start))
        elif kind == "word":
            tokens.append(("name", raw, start))
        else:
            tokens.append(("op", raw, start))
        pos = match.end()
    tokens.append(("end", None, len(text)))
    return tokens


# -- the parser (recursive descent: OR < AND < NOT < predicate) -------------------------------------
# How deep an expression may nest (parentheses, NOT, chains of AND/OR). Parsing and evaluation
# recurse, and an expression comes from any client: "((((…" 5,000 deep must be refused with a
# sentence, not overflow the interpreter's stack on the broker.
MAX_DEPTH = 128


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterSyntaxError(f"the expression nests deeper than {MAX_DEPTH} levels")

    def peek(self, kind: str, value=None) -> bool:
        token = self.tokens[self.i]
        return token[0] == kind and (value is None or token[1] == value)

    def take(self, kind: str, value=None):
        token = self.tokens[self.i]
        if not self.peek(kind, value):
            want = value or kind
            got = token[1] if token[0] != "end" else "the end"
            raise FilterSyntaxError(f"expected {want} at position {token[2]}, found {got!r}")
        self.i += 1
        return token[1]

    def parse(self):
        tree = self.or_expr()
        self.take("end")
        return tree

    def or_expr(self):
        left = self.and_expr()
        depth = self.depth
        while self.peek("kw", "OR"):
            self.take("kw")
            self.deeper()  # each OR nests the tree one level deeper on the left
            left = Or(left, self.and_expr())
        self.depth = depth
        return left

    def and_expr(self):
        left = self.not_expr()
        depth = self.depth
        while self.peek("kw", "AND"):
            self.take("kw")
            self.deeper()
            left = And(left, self.not_expr())
        self.depth = depth
        return left

    def not_expr(self):
        if self.peek("kw", "NOT"):
            self.take("kw")
            self.deeper()
            inner = Not(self.not_expr())
            self.depth -= 1
            return inner
        return self.predicate()

    def operand(self):
        if self.peek("literal"):
            return Literal(self.take("literal"))
        if self.peek("name"):
            return Property(self.take("name"))
        token = self.tokens[self.i]
        raise FilterSyntaxError(f"expected a property or a literal at position {token[2]}")

    def predicate(self):
        if self.peek("op", "("):
            self.take("op")
            self.deeper()
            inner = self.or_expr()
            self.take("op", ")")
            self.depth -= 1
            return inner
        left = self.operand()
        if self.peek("op") and self.tokens[self.i][1] in ("=", "<>", ">", ">=", "<", "<="):
            op = self.take("op")
            return Compare(op, left, self.operand())
        negated = False
        if self.peek("kw", "IS"):
            self.take("kw")
            if self.peek("kw", "NOT"):
                self.take("kw")
                negated = True
            self.take("kw", "NULL")
            return IsNull(left, negated)
        if self.peek("kw", "NOT"):
            self.take("kw")
            negated = True
        if self.peek("kw", "BETWEEN"):
            self.take("kw")
            low = self.operand()
            self.take("kw", "AND")
            return Between(left, low, self.operand(), negated)
        if self.peek("kw", "IN"):
            self.take("kw")
            self.take("op", "(")
            options = [self.take("literal")]
            while self.peek("op", ","):
                self.take("op")
                options.append(self.take("literal"))
            self.take("op", ")")
            return In(left, tuple(options), negated)
        token = self.tokens[self.i]
        if isinstance(left, Literal) and isinstance(left.value, bool):
            return Compare("=", left, Literal(True))
        raise FilterSyntaxError(f"expected a comparison at position {token[2]}")


def parse(text: str):
    """The syntax tree of ``text``; FilterSyntaxError says what is wrong and where."""
    if not text or not text.strip():
        raise FilterSyntaxError("the expression is empty")
    return _Parser(text).parse()


# -- evaluation -------------------------------------------------------------------------------------
def _value(node, props: dict[str, str]):
    if isinstance(node, Literal):
        return node.value
    return props.get(node.name)


def _as_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None


def _compare(op: str, left, right):
    if left is None or right is None:
        return None
    numeric = (isinstance(left, int | float) and not isinstance(left, bool)) or \
        (isinstance(right, int | float) and not isinstance(right, bool))
    if numeric:
        a, b = _as_number(left), _as_number(right)
        if a is None or b is None:
            return False
    else:
        a, b = (str(left).lower(), str(right).lower()) if isinstance(left, bool) or isinstance(right, bool) \
            else (left, right)
        if op not in ("=", "<>"):
            return False  # strings and booleans are only equal or not
    return {"=": a == b, "<>": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]


def evaluate(tree, props: dict[str, str]):
    """True, False or None (unknown) for a message with these properties."""
    if isinstance(tree, And):
        left = evaluate(tree.left, props)
        if left is False:
            return False
        right = evaluate(tree.right, props)
        if right is False:
            return False
        return None if left is None or right is None else True
    if isinstance(tree, Or):
        left = evaluate(tree.left, props)
        if left is True:
            return True
        right = evaluate(tree.right, props)
        if right is True:
            return True
        return None if left is None or right is None else False
    if isinstance(tree, Not):
        inner = evaluate(tree.operand, props)
        return None if inner is None else not inner
    if isinstance(tree, Compare):
        return _compare(tree.op, _value(tree.left, props), _value(tree.right, props))
    if isinstance(tree, IsNull):
        missing = _value(tree.value, props) is None
        return not missing if tree.negated else missing
    if isinstance(tree, Between):
        value = _value(tree.value, props)
        low = _compare(">=", value, _value(tree.low, props))
        high = _compare("<=", value, _value(tree.high, props))
        if low is None or high is None:
            return None
        inside = low and high
        return not inside if tree.negated else inside
    if isinstance(tree, In):
        value = _value(tree.value, props)
        if value is None:
            return None
        inside = any(_compare("=", value, option) for option in tree.options)
        return not inside if tree.negated else inside
    if isinstance(tree, Literal):
        return tree.value if isinstance(tree.value, bool) else None
    raise TypeError(f"not a filter expression: {tree!r}")


class SqlFilter:
    """A compiled expression: ``matches(props)`` is True only when the expression is TRUE."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = parse(text)

    def matches(self, props: dict[str, str]) -> bool:
        return evaluate(self.tree, props) is True
