"""The post-processing IR: what a select list, HAVING, ORDER BY (and an outer stage's WHERE
and GROUP BY) compute from a query's aggregates and group keys, as small frozen values.

``postprocess.to_ir`` lowers SQL to it.  Each meaning has one evaluator:

* values, with partial derivatives for standard errors: ``relation.Evaluator``;
* ranges by interval arithmetic: :func:`interval`;
* the output column's type (a PostgreSQL type name): :func:`type_of`;
* whether a value carries a standard error (gets an error column): :func:`noisy`.

The scalar functions they apply are one table, ``scalars.SCALARS``, shared with the
evaluation of expressions on a column's cells (``cells.py``).  Everything here is a
function of released answers and public metadata (post-processing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsql.sql.scalars import SCALARS, cast_type, cast_value, common_type

__all__ = ["Agg", "Key", "Lit", "Op", "Call", "Cast", "Case", "Expr", "Output", "SortKey", "COMPARISON",
           "BOOLEAN", "children", "uses", "noisy", "is_exact_integer", "type_of", "interval", "divide"]


@dataclass(frozen=True)
class Agg:
    """The query's ``index``-th aggregate."""

    index: int


@dataclass(frozen=True)
class Key:
    """The ``index``-th group key (in an outer stage over rows: the ``index``-th input column)."""

    index: int


@dataclass(frozen=True)
class Lit:
    """A constant: None (NULL), a bool, a number, a string, a date or timestamp."""

    value: Any


@dataclass(frozen=True)
class Op:
    """An operator: arithmetic (``+ - * / %``, ``int/`` PostgreSQL's truncating division of
    exact integers, ``neg``), a comparison (``= != < <= > >=``), Kleene logic (``and or not``)
    or ``isnull``."""

    op: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Call:
    """A function: a scalar of ``scalars.SCALARS`` (``round``'s second argument a :class:`Lit`
    of its checked decimal places, ``to_char``'s its format) or one of ``coalesce greatest
    least`` (NULLIF and IF are lowered to :class:`Case`, as on cells: ``scalars.as_case``)."""

    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Cast:
    """``CAST(arg AS to)``: ``to`` is sqlglot's target type (checked by ``scalars.cast_type``)."""

    arg: Expr
    to: Any


@dataclass(frozen=True)
class Case:
    """``CASE WHEN c THEN v … ELSE default END`` (default None: NULL)."""

    branches: tuple[tuple[Expr, Expr], ...]
    default: Expr | None


Expr = Agg | Key | Lit | Op | Call | Cast | Case


@dataclass(frozen=True)
class Output:
    """ORDER BY an output column: a position or an output column's name."""

    index: int


@dataclass(frozen=True)
class SortKey:
    """One ORDER BY item; NULLs sort as larger than any value unless ``nulls_first`` says."""

    by: Expr | Output
    desc: bool
    nulls_first: bool


COMPARISON = frozenset({"=", "!=", "<", "<=", ">", ">="})
BOOLEAN = COMPARISON | {"and", "or", "not", "isnull"}
_INTEGER_OPS = frozenset({"+", "-", "*", "%", "int/", "neg"})


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Op, Call)):
        return e.args
    if isinstance(e, Cast):
        return (e.arg,)
    if isinstance(e, Case):
        return tuple(x for pair in e.branches for x in pair) + ((e.default,) if e.default is not None else ())
    return ()


def uses(e: Expr, leaf: Callable[[Expr], bool]) -> bool:
    """Does ``e`` contain a node for which ``leaf`` holds?"""
    return leaf(e) or any(uses(c, leaf) for c in children(e))


def noisy(e: Expr, key_noisy: Callable[[int], bool]) -> bool:
    """Does ``e``'s value carry a standard error: is it a number computed from an aggregate
    (or, over an outer stage's rows, from a noisy input column: ``key_noisy``)?  As
    ``relation.Evaluator`` carries derivatives: comparisons, logic, text and a CASE's
    conditions carry none, a CASE its values'; ``x % y`` carries x's."""
    if isinstance(e, Agg):
        return True
    if isinstance(e, Key):
        return key_noisy(e.index)
    if isinstance(e, Op):
        args = e.args[:1] if e.op == "%" else e.args
        return e.op not in BOOLEAN and any(noisy(a, key_noisy) for a in args)
    if isinstance(e, Cast):
        return cast_type(e.to) in ("integer", "double precision") and noisy(e.arg, key_noisy)
    if isinstance(e, Call):
        return (e.name not in SCALARS or SCALARS[e.name].numeric) and any(noisy(a, key_noisy) for a in e.args)
    if isinstance(e, Case):
        return any(noisy(v, key_noisy) for _, v in e.branches) or \
            (e.default is not None and noisy(e.default, key_noisy))
    return False


# --- types ---------------------------------------------------------------------------------

def is_exact_integer(e: Expr, key_type: Callable[[int], str]) -> bool:
    """Is ``e`` an exact integer: integer group keys and literals under + - * % int/ neg,
    never an aggregate (a noisy value is not an integer)?"""
    if isinstance(e, Key):
        return key_type(e.index) == "integer"
    if isinstance(e, Lit):
        return isinstance(e.value, int) and not isinstance(e.value, bool)
    if isinstance(e, Op) and e.op in _INTEGER_OPS:
        return all(is_exact_integer(a, key_type) for a in e.args)
    return False


def literal_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    return "text" if isinstance(v, str) else "double precision"


def type_of(e: Expr, key_type: Callable[[int], str], agg_type: Callable[[int], str]) -> str:
    """The PostgreSQL type name of ``e``'s values; ``key_type(i)`` and ``agg_type(i)`` type the
    leaves."""
    if isinstance(e, Key):
        return key_type(e.index)
    if isinstance(e, Agg):
        return agg_type(e.index)
    if isinstance(e, Lit):
        return literal_type(e.value)
    if isinstance(e, Op):
        if is_exact_integer(e, key_type):
            return "integer"
        return "boolean" if e.op in BOOLEAN else "double precision"
    if isinstance(e, Cast):
        return cast_type(e.to)
    if isinstance(e, Call):
        if e.name == "coalesce":
            return _common(e.args, key_type, agg_type)
        if e.name in SCALARS:
            return SCALARS[e.name].result
    if isinstance(e, Case):
        return _common(tuple(v for _, v in e.branches) + ((e.default,) if e.default is not None else ()),
                       key_type, agg_type)
    return "double precision"


def _common(values: tuple[Expr, ...], key_type: Callable[[int], str], agg_type: Callable[[int], str]) -> str:
    """The type of one of ``values`` (a CASE's, COALESCE's): one rule with a grouped
    expression's type on the cells (``scalars.common_type``); NULL has none."""
    return common_type(None if isinstance(v, Lit) and v.value is None else type_of(v, key_type, agg_type)
                       for v in values)


# --- ranges --------------------------------------------------------------------------------

Range = tuple[np.ndarray, np.ndarray]


def divide(a: Range, b: Range) -> Range:
    """[a] / [b] where the divisor's range excludes 0 (else unbounded)."""
    lo_b, hi_b = b
    ok = (lo_b > 0) | (hi_b < 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        corners = np.stack([a[0] / lo_b, a[0] / hi_b, a[1] / lo_b, a[1] / hi_b])
        return (np.where(ok, np.nanmin(corners, axis=0), -np.inf),
                np.where(ok, np.nanmax(corners, axis=0), np.inf))


def interval(e: Expr, aggs: list[Range | None], keys: list[np.ndarray | None], n: int) -> Range | None:
    """Interval evaluation of ``e`` over ``n`` rows: (lower, upper) arrays, or None where no
    range follows (text, booleans, CASE, …).  ``aggs[i]`` is the range of aggregate i, ``keys[i]``
    the numeric values of group key i (None when not numeric)."""
    if isinstance(e, Agg):
        return aggs[e.index]
    if isinstance(e, Key):
        v = keys[e.index]
        return None if v is None else (v, v)
    if isinstance(e, Lit):
        if isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
            return np.full(n, float(e.value)), np.full(n, float(e.value))
        return None
    if isinstance(e, Op) and e.op in ("+", "-", "*", "/", "neg"):
        args = [interval(a, aggs, keys, n) for a in e.args]
        if any(a is None for a in args):
            return None
        if e.op == "neg":
            lo, hi = args[0]  # type: ignore[misc]
            return -hi, -lo
        (a0, a1), (b0, b1) = args  # type: ignore[misc]
        if e.op == "+":
            return a0 + b0, a1 + b1
        if e.op == "-":
            return a0 - b1, a1 - b0
        if e.op == "*":
            with np.errstate(invalid="ignore"):
                corners = np.stack([a0 * b0, a0 * b1, a1 * b0, a1 * b1])
            return np.nanmin(corners, axis=0), np.nanmax(corners, axis=0)
        return divide((a0, a1), (b0, b1))
    if isinstance(e, Cast) and cast_type(e.to) in ("integer", "double precision"):
        arg = interval(e.arg, aggs, keys, n)
        if arg is None or cast_type(e.to) == "double precision":
            return arg
        return tuple(np.array([v if not np.isfinite(v) else cast_value(v, e.to) for v in end.tolist()])
                     for end in arg)  # type: ignore[return-value]  # rounding is monotone
    if isinstance(e, Call) and e.args and (e.name in SCALARS or e.name in ("greatest", "least")):
        args = [interval(a, aggs, keys, n) for a in e.args]
        if any(a is None for a in args):
            return None
        lo, hi = args[0]  # type: ignore[misc]
        if e.name in ("greatest", "least"):
            pick = np.maximum if e.name == "greatest" else np.minimum
            for a in args[1:]:
                lo, hi = pick(lo, a[0]), pick(hi, a[1])  # type: ignore[index]
            return lo, hi
        fn = SCALARS[e.name]
        if fn.partial or not fn.numeric:
            return None
        extra = [a.value for a in e.args[1:] if isinstance(a, Lit)]
        return fn.range(lo, hi, *extra)
    return None
