"""Evaluate one-column SQL expressions and predicates on the cells of a declared domain.

Everything the compiler knows about a column is its declared cells (public).  A scalar
expression of one column (``age / 10``, ``CASE WHEN sex = 'Male' THEN 1 ELSE 0 END``,
``width_bucket(hours_per_week, 0, 100, 10)``) is evaluated once per cell; a predicate of
one column becomes two cell masks, TRUE and FALSE (SQL three-valued logic: a cell in
neither is UNKNOWN, e.g. the NULL cell under ``col <> 'x'``).

Binning.  A unit-bin cell holds one value, so evaluation is exact.  A wide bin holds a
range: a bare comparison ``col < v`` is exact only when ``v`` is a bin edge, and a derived
expression is accepted only when it takes the same value at both ends of every bin
(bucketing functions are monotone, so equal ends mean constant on the bin; ``%`` is not,
and is refused on wide bins).  Otherwise the query is refused with the bin edges in the
message: a silently wrong answer is worse than a refusal.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
from sqlglot import exp

from dpsql import labels as wording
from dpsql.errors import DomainViolationError, Error, StatementTooComplexError, UnsupportedQueryError
from dpsql.sql import timefuncs
from dpsql.sql.scalars import (SCALARS, Scalar, as_case, cast_value, check_arity, check_divisor, compare, first_present,
                               first_true, operands)

__all__ = ["OTHER", "DimRef", "Evaluated", "CellEvaluator", "columns_in", "literal_value", "NEGATE",
           "position_literal", "snippet"]


class _Other:
    """The value of a categorical's "other" cell: some undeclared non-NULL value."""

    def __repr__(self) -> str:
        return "(other)"

    def __str__(self) -> str:
        return "(other)"


OTHER = _Other()
_EMPTY = object()     # the empty string compared with a closed categorical that has no '' label

#: Per-cell evaluations one statement may spend (each ~1-2 µs of Python: about a second).
WORK_LIMIT = 1_000_000
NEGATE = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_OPS: dict[type, str] = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_MIRROR = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class DimRef(exp.Expression, exp.Func):
    """A column reached through a join with public tables (``dpsql.sql.joins``): the value
    of ``shown`` (``a.state``, as written) on each cell of the joined key attribute named by
    ``this`` (a column of the private table).  Built only by the join rewrite, never by the
    parser (its name is not a registered function: ``__dpsql_dim(…)`` in SQL text parses
    as an unknown function and is refused like any other)."""

    arg_types = {"this": True, "expression": True}
    _sql_names = ["__dpsql_dim"]

    @property
    def shown(self) -> str:
        return self.expression.this


def _as_written(node: exp.Expr) -> exp.Expr:
    """``node`` with every :class:`DimRef` printed as the column the user wrote."""
    if not any(isinstance(n, DimRef) for n in node.walk()):
        return node
    return node.copy().transform(lambda n: exp.to_column(n.shown) if isinstance(n, DimRef) else n)


_PREDICATES = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.And, exp.Or, exp.Not, exp.Is,
               exp.In, exp.Between, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Like, exp.ILike)


def snippet(node: exp.Expr | None, limit: int = 120) -> str:
    """A node's SQL for messages, bounded: generating SQL copies the whole subtree, so a
    100,000-item IN list is summarised instead of printed."""
    if node is None:
        return ""
    node = _as_written(node)
    count = 0
    for _ in node.walk():
        count += 1
        if count > 200:
            break
    if count > 200:
        if isinstance(node, exp.In):
            items = ", ".join(snippet(e, 20) for e in node.expressions[:3])
            text = f"{snippet(node.this, 40)} IN ({items}, … {len(node.expressions):,} items)"
        else:
            text = f"{type(node).__name__.upper()} expression of {count}+ terms"
    else:
        text = node.sql(dialect="postgres")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def columns_in(node: exp.Expr) -> list[exp.Column]:
    return [c for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)]


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The terms of a top-level AND chain, parentheses removed, left to right (iteratively:
    a chain of thousands of ANDs must not recurse)."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        if isinstance(n, exp.Paren):
            todo.append(n.this)
        elif isinstance(n, exp.And):
            todo.extend([n.expression, n.this])
        else:
            out.append(n)
    return out


def canonical(node, column):
    """Structural key of an expression, equal for expressions that are written alike up to
    parentheses (how a select item is matched with a GROUP BY key or an aggregate found
    twice); ``column(col)`` gives a column reference's key."""
    if isinstance(node, exp.Paren):
        return canonical(node.this, column)
    if isinstance(node, exp.Literal):
        return ("Literal", node.this, node.is_string)
    if isinstance(node, exp.Column):
        return column(node)
    if isinstance(node, exp.Expression):
        items = []
        for k in sorted(node.args):
            v = node.args[k]
            if v is None or v is False or (isinstance(v, list) and not v):
                continue
            items.append((k, tuple(canonical(x, column) for x in v) if isinstance(v, list) else canonical(v, column)))
        return (type(node).__name__, tuple(items))
    return node


def literal_value(node: exp.Expr) -> tuple[bool, Any]:
    """(is_constant, value) for literals, NULL, booleans, signed numbers and casts of them."""
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, node.this
        text = node.this
        try:
            return True, int(text)
        except ValueError:
            return True, float(text)
    if isinstance(node, exp.Neg):
        ok, v = literal_value(node.this)
        if ok and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True, -v
    if isinstance(node, exp.Cast):
        ok, v = literal_value(node.this)
        if ok:
            return True, cast_value(v, node.to.this)
    return timefuncs.time_literal(node)



def position_literal(node: exp.Expr, n: int, clause: str, pos: Callable) -> int | None:
    """The select-list position an integer literal names in ``clause`` (``ORDER BY 2``,
    ``GROUP BY 1``: 1-based, as written), or None when ``node`` is not an integer literal
    (a column, an expression, or a constant such as ``1.5`` or ``'a'``, which the caller
    treats as an expression).  A position outside 1..``n`` is refused, as PostgreSQL does;
    ``pos(node)`` gives the error's character position."""
    ok, v = literal_value(node)
    if not (ok and isinstance(v, int) and not isinstance(v, bool)):
        return None
    if not 1 <= v <= n:
        raise UnsupportedQueryError(f"{clause} position {v} is not in select list",
                                    position=pos(node), hint=f"use 1..{n}")
    return v

@dataclass
class Evaluated:
    """Per cell: the value at the bottom and top of the cell's range, and NULL-ness."""

    lo: list
    hi: list
    null: np.ndarray


def _int_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class CellEvaluator:
    """Evaluates expressions of a single attribute; ``pos`` maps nodes to SQL positions."""

    def __init__(self, attr, pos: Callable[[exp.Expr], int | None], words=None, meter=None,
                 table: str | None = None) -> None:
        self.attr = attr
        self.table = table   # only to tell the user where to see every label
        self.pos = pos
        self.words = words   # node → the function name as the user wrote it
        # Cell evaluations left for the whole statement (shared by its evaluators): bounds the
        # per-cell Python work of a long expression over a large domain (issue 21).
        self.meter = meter if meter is not None else [WORK_LIMIT]
        n = attr.size
        self.n = n
        null = np.zeros(n, dtype=bool)
        if attr.null_index is not None:
            null[attr.null_index] = True
        self.null = null
        self._memo: dict = {}
        self.wide = False
        if attr.kind == "categorical":
            labels = attr.labels()
            vals = [OTHER if i == attr.other_index else labels[i] for i in range(n)]
            self._lo, self._hi = vals, list(vals)
        elif attr.kind == "joined":
            # the cells of a join (dpsql.sql.joins.JoinedAttribute): every column of it is
            # read through a DimRef, each cell holds one value of each
            self._lo, self._hi = [None] * n, [None] * n
        else:
            bounds = attr.bin_bounds()
            lo: list = []
            hi: list = []
            last = max(i for i in range(n) if bounds[i] is not None)
            for i, b in enumerate(bounds):
                if b is None:
                    lo.append(None)
                    hi.append(None)
                    continue
                a, z = b
                if attr.kind == "numeric" and i != last:
                    z = math.nextafter(float(z), -math.inf)
                lo.append(a)
                hi.append(z)
                self.wide |= a != z
            self._lo, self._hi = lo, hi

    # --- errors ------------------------------------------------------------------------
    def _fail(self, cls, node, message: str, hint: str, detail: str | None = None) -> NoReturn:
        raise cls(message, position=self.pos(node), hint=hint, detail=detail)

    def _not_a_label(self, node, v) -> NoReturn:
        """A literal that is not a declared label: say where such a value is counted (an
        open column's (other) cell) and which labels there are, summarised when long."""
        attr = self.attr
        message = f"{v!r} is not a declared value of column '{attr.name}'"
        if wording.is_open(attr):
            message += f"; {wording.other_cell(attr, v)}"
        else:
            message += " (the column is closed: its labels are all its values)"
        items, more = wording.label_items(attr, wording.REFUSAL_LIMIT)
        if not more:
            self._fail(DomainViolationError, node, message, f"allowed values: {', '.join(items)}")
        close = wording.close_labels(attr, v)
        hint = (f"compare with a declared label{' (close ones: ' + ', '.join(close) + ')' if close else ''}; "
                f"{wording.how_to_list(self.table, attr.name)}")
        self._fail(DomainViolationError, node, message, hint,
                   detail=f"column '{attr.name}' has {wording.summary(attr, wording.REFUSAL_LIMIT)}")

    def _split_error(self, node, cells) -> None:
        bounds = self.attr.bin_bounds()
        shown = [bounds[i] for i in sorted(cells)][:3]
        if self.attr.kind in ("date", "timestamp", "time"):
            self._fail(UnsupportedQueryError, node, *timefuncs.split_message(self.attr, cells, snippet(node)))
        if self.attr.kind == "integer":
            text = ", ".join(f"{a}..{b}" for a, b in shown)
            edges = sorted({a for a, _ in shown} | {b + 1 for _, b in shown})
        else:
            text = ", ".join(f"[{a}, {b})" for a, b in shown)
            edges = sorted({a for a, _ in shown} | {b for _, b in shown})
        self._fail(UnsupportedQueryError, node,
                   f"'{snippet(node)}' splits bin(s) {text} of column '{self.attr.name}': the declared "
                   "domain cannot tell the values inside a bin apart, so the answer would be wrong",
                   f"use a bin edge instead, e.g. one of {', '.join(str(e) for e in edges[:6])}")

    # --- scalar values -----------------------------------------------------------------
    def _charge(self, node) -> None:
        self.meter[0] -= self.n
        if self.meter[0] < 0:
            raise StatementTooComplexError(
                f"statement too complex: its expressions need more than {WORK_LIMIT:,} evaluations on the cells "
                f"of the declared domain (column '{self.attr.name}' has {self.n:,})", position=self.pos(node),
                hint="simplify the expressions, or bucket the column more coarsely in the domain declaration")

    def value(self, node: exp.Expr) -> Evaluated:
        """Per-cell values of a scalar expression (ends of each bin)."""
        if not isinstance(node, (exp.Column, exp.Literal, exp.Paren, exp.Null, exp.Boolean)):
            self._charge(node)      # columns and literals are list copies, not per-cell work
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            return Evaluated(list(self._lo), list(self._hi), self.null.copy())
        if isinstance(node, DimRef):
            vals = self.attr.column(node.shown)
            return Evaluated(list(vals), list(vals), np.array([v is None for v in vals], dtype=bool))
        ok, v = literal_value(node)
        if ok:
            return Evaluated([v] * self.n, [v] * self.n, np.full(self.n, v is None))
        if isinstance(node, exp.Neg):
            return self._map(node, [self.value(node.this)], lambda a: -a)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod)):
            return self._arith(node)
        fn = SCALARS.get(type(node).__name__.lower()) if isinstance(node, exp.Func) else None
        if fn is not None and not fn.partial:
            # (a partial function is NULL outside its domain where engines raise: not on cells)
            return self._scalar(node, fn)
        if isinstance(node, exp.Cast):
            return self._map(node, [self.value(node.this)], lambda a: cast_value(a, node.to.this), text_ok=True)
        if isinstance(node, exp.WidthBucket):
            return self._width_bucket(node)
        if isinstance(node, timefuncs.TRUNC_NODES):
            unit = timefuncs.trunc_unit(node)
            try:
                return self._map(node, [self.value(node.this)], lambda a: timefuncs.truncated(a, unit))
            except TypeError as err:
                self._fail(UnsupportedQueryError, node, f"{snippet(node)} cannot be computed: {err}",
                           "truncate a time of day to its second, minute or hour, a date or timestamp to any unit")
        if isinstance(node, (exp.Date, exp.TsOrDsToDate)):       # DATE(col): Looker's date timeframe
            return self._map(node, [self.value(node.this)], lambda a: cast_value(a, exp.DataType.Type.DATE),
                             text_ok=True)
        if isinstance(node, exp.TimeToStr):
            # to_char/strftime need not be monotone ('%w'): only of a value constant on each cell
            fmt = self._checked(SCALARS["to_char"], node.args.get("format"), node)
            vals, null = self.constant_values(node.this)
            return self._map(node, [Evaluated(vals, list(vals), null)], lambda a: SCALARS["to_char"].value(a, fmt),
                             text_ok=True)
        if isinstance(node, exp.Extract) or type(node) in timefuncs.EXTRACT_NODES:
            arg = self.value(node.expression if isinstance(node, exp.Extract) else node.this)
            try:
                lo, hi = timefuncs.extract_cells(timefuncs.extract_field(node), arg.lo, arg.hi, arg.null)
            except TypeError:
                self._fail(UnsupportedQueryError, node, f"{snippet(node)} needs a date or timestamp",
                           "extract fields of date and timestamp columns")
            return Evaluated(lo, hi, arg.null | np.array([v is None for v in lo]))
        if isinstance(node, (exp.Upper, exp.Lower, exp.Length, exp.Substring, exp.Left, exp.DPipe, exp.Concat)):
            return self._text(node)
        if isinstance(node, exp.Coalesce):
            return self._coalesce(node)
        case = as_case(node)        # NULLIF, IF: the CASE they are (as over values)
        if case is not None or isinstance(node, exp.Case):
            return self._case(case or node)
        if isinstance(node, _PREDICATES):
            # A predicate used as a value: TRUE/FALSE per cell, NULL where UNKNOWN.
            t, f = self.truth(node)
            vals = [True if t[i] else False if f[i] else None for i in range(self.n)]
            return Evaluated(vals, list(vals), ~(t | f))
        if isinstance(node, exp.Func):
            name = f"function {self.words(node) if self.words else node.sql_name().lower()}"
        else:
            name = f"'{snippet(node, 60)}'"
        self._fail(UnsupportedQueryError, node, f"{name} is not supported in dpsql expressions",
                   "use arithmetic, floor/ceil/round, width_bucket, COALESCE or CASE WHEN")

    def _scalar(self, node, fn: Scalar) -> Evaluated:
        """A function of ``scalars.SCALARS`` on each cell, its constants checked as for values."""
        args = operands(node)
        check_arity(fn.name, len(args))
        constants = [self._checked(fn, a, node) for a in args[1:]]
        value = (lambda a: None) if None in constants else (lambda a: fn.value(a, *constants))
        return self._map(node, [self.value(node.this)], value, monotone=fn.monotone)

    def _checked(self, fn: Scalar, arg, node):
        """``fn``'s check of its constant argument ``arg`` (shared with values), the error at ``arg``."""
        ok, v = self._constant(arg) if arg is not None else (False, None)
        try:
            return fn.checked(ok, v, snippet(node))
        except Error as err:
            err.position = self.pos(arg) if arg is not None else None
            raise

    def _map(self, node, args: list[Evaluated], fn, monotone: bool = True, text_ok: bool = False) -> Evaluated:
        if not monotone and self.wide and self.attr.kind != "categorical":
            self._fail(UnsupportedQueryError, node,
                       f"{snippet(node)} is not monotone, so it cannot be evaluated on the wide bins "
                       f"of column '{self.attr.name}'", "group or filter on the column's bins directly")
        null = np.zeros(self.n, dtype=bool)
        for a in args:
            null |= a.null
        out = []
        for side in ("lo", "hi"):
            col: list = []
            for i in range(self.n):
                vs = [getattr(a, side)[i] for a in args]
                if null[i] or any(v is None for v in vs):
                    col.append(None)
                    continue
                if any(v is OTHER for v in vs):
                    self._fail(UnsupportedQueryError, node,
                               f"{snippet(node)} needs the value of undeclared labels of '{self.attr.name}'",
                               "compare the column with its declared labels instead")
                if any(isinstance(v, str) for v in vs) and not text_ok:
                    self._fail(UnsupportedQueryError, node,
                               f"{snippet(node)} applies arithmetic to text column '{self.attr.name}'",
                               "use CASE WHEN to map labels to numbers")
                col.append(fn(*vs))
            out.append(col)
        lo, hi = out
        null = null | np.array([v is None for v in lo])
        return Evaluated(lo, hi, null)

    def _arith(self, node) -> Evaluated:
        a, b = self.value(node.this), self.value(node.expression)
        if isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)):
            try:
                check_divisor(*literal_value(node.expression))
            except Error as err:
                err.position = self.pos(node)
                raise
        typed = bool(node.args.get("typed"))

        def div(x, y):
            if y == 0:
                return None
            if typed and isinstance(x, int) and isinstance(y, int):
                return _int_div(x, y)
            return x / y

        fns = {exp.Add: timefuncs.add, exp.Sub: timefuncs.sub, exp.Mul: operator.mul, exp.Div: div,
               exp.IntDiv: lambda x, y: None if y == 0 else math.floor(x / y) if isinstance(x, float)
               or isinstance(y, float) else _int_div(x, y),
               exp.Mod: lambda x, y: None if y == 0 else math.fmod(x, y) if isinstance(x, float)
               or isinstance(y, float) else int(math.fmod(x, y))}
        fn = fns[type(node)]

        def checked(x, y):
            try:
                return fn(x, y)
            except TypeError:   # a date times a number, a timestamp plus an integer, …
                self._fail(UnsupportedQueryError, node, f"operator does not exist for {snippet(node)}",
                           "add or subtract an INTERVAL (or an integer number of days to a date)")
        return self._map(node, [a, b], checked, monotone=not isinstance(node, exp.Mod))

    def _text(self, node) -> Evaluated:
        """String functions, applied to each declared label (refused on undeclared ones)."""
        def const(key, default=None):
            arg = node.args.get(key)
            if arg is None:
                return default
            ok, v = literal_value(arg)
            if not ok or not isinstance(v, int) or isinstance(v, bool):
                self._fail(UnsupportedQueryError, node, f"{snippet(node)} needs constant integer arguments",
                           "e.g. substring(col, 1, 3)")
            return v

        if isinstance(node, (exp.DPipe, exp.Concat)):
            parts = [node.this, node.expression] if isinstance(node, exp.DPipe) else list(node.expressions)
            args = [self.value(p) for p in parts]
            if isinstance(node, exp.Concat):
                # concat() skips NULL arguments; || yields NULL if any side is NULL.
                args = [Evaluated(["" if v is None else v for v in a.lo], ["" if v is None else v for v in a.hi],
                                  np.zeros(self.n, bool)) for a in args]
            return self._map(node, args, lambda *vs: "".join(str(v) for v in vs), text_ok=True)
        fn: Callable[[str], object]
        if isinstance(node, exp.Upper):
            fn = str.upper
        elif isinstance(node, exp.Lower):
            fn = str.lower
        elif isinstance(node, exp.Length):
            fn = len
        elif isinstance(node, exp.Left):
            k = literal_value(node.expression)[1]
            fn = lambda v: v[:k]  # noqa: E731
        else:
            start, length = const("start", 1), const("length")
            # SQL positions are 1-based and a start before 1 eats into the length.
            lo = max(start, 1) - 1
            hi = None if length is None else max(start + length - 1, 0)
            fn = lambda v: v[lo:hi] if hi is None or hi > lo else ""  # noqa: E731
        arg = self.value(node.this)
        for v in arg.lo:
            if v is not None and v is not OTHER and not isinstance(v, str):
                self._fail(UnsupportedQueryError, node, f"{snippet(node)} needs text; '{self.attr.name}' is numeric",
                           "cast it first: CAST(col AS TEXT)")
        return self._map(node, [arg], fn, text_ok=True)

    def _width_bucket(self, node) -> Evaluated:
        parts = [node.args.get(k) for k in ("min_value", "max_value", "num_buckets")]
        (lo_ok, lo), (hi_ok, hi), (n_ok, nb) = [literal_value(p) if p is not None else (False, None)
                                                for p in parts]
        if not (lo_ok and hi_ok and n_ok) or lo is None or hi is None or not isinstance(nb, int) \
                or nb < 1 or lo == hi:
            self._fail(UnsupportedQueryError, node, "width_bucket needs constant bounds and a positive "
                       "bucket count", "e.g. width_bucket(age, 0, 100, 10)")

        def wb(x):
            # PostgreSQL's definition: 0 below the range, n + 1 at or above its top.
            if lo < hi:
                if x < lo:
                    return 0
                if x >= hi:
                    return nb + 1
                return int(math.floor((x - lo) / (hi - lo) * nb)) + 1
            if x > lo:
                return 0
            if x <= hi:
                return nb + 1
            return int(math.floor((lo - x) / (lo - hi) * nb)) + 1

        return self._map(node, [self.value(node.this)], wb)

    def _coalesce(self, node) -> Evaluated:
        args = [self.value(node.this)] + [self.value(e) for e in node.expressions]
        picks = [first_present([None if a.null[i] else a.lo[i] for a in args]) for i in range(self.n)]
        lo = [None if j is None else args[j].lo[i] for i, j in enumerate(picks)]
        hi = [None if j is None else args[j].hi[i] for i, j in enumerate(picks)]
        return Evaluated(lo, hi, np.array([j is None for j in picks], dtype=bool))

    def _case(self, node) -> Evaluated:
        """Per cell, the value of the first branch whose condition is TRUE (scalars.first_true)."""
        subject, conds, vals = node.this, [], []
        for branch in node.args.get("ifs") or []:
            cond = branch.this
            if subject is not None:
                cond = exp.EQ(this=subject.copy(), expression=cond.copy())
            conds.append(self.truth(cond)[0])
            vals.append(self.value(branch.args["true"]))
        if node.args.get("default") is not None:
            vals.append(self.value(node.args["default"]))
        picks = [first_true([c[i] for c in conds]) for i in range(self.n)]
        lo = [vals[j].lo[i] if j < len(vals) else None for i, j in enumerate(picks)]
        hi = [vals[j].hi[i] if j < len(vals) else None for i, j in enumerate(picks)]
        return Evaluated(lo, hi, np.array([v is None for v in lo], dtype=bool))

    def constant_values(self, node) -> tuple[list, np.ndarray]:
        """Per-cell value of ``node``, refusing bins on which it is not constant."""
        ev = self.value(node)
        split = [i for i in range(self.n) if not ev.null[i] and ev.lo[i] != ev.hi[i]]
        if split:
            self._split_error(node, split)
        return ev.lo, ev.null

    # --- predicates ----------------------------------------------------------------------
    def truth(self, node: exp.Expr) -> tuple[np.ndarray, np.ndarray]:
        """(TRUE mask, FALSE mask) of a predicate of this attribute over its cells."""
        self._charge(node)
        if isinstance(node, exp.Paren):
            return self.truth(node.this)
        if isinstance(node, exp.Not):
            t, f = self.truth(node.this)
            return f, t
        if isinstance(node, exp.And):
            t1, f1 = self.truth(node.this)
            t2, f2 = self.truth(node.expression)
            return t1 & t2, f1 | f2
        if isinstance(node, exp.Or):
            t1, f1 = self.truth(node.this)
            t2, f2 = self.truth(node.expression)
            return t1 | t2, f1 & f2
        ok, v = literal_value(node)
        if ok:
            if v is None:
                return np.zeros(self.n, bool), np.zeros(self.n, bool)
            if isinstance(v, bool):
                return np.full(self.n, v), np.full(self.n, not v)
        if isinstance(node, exp.Is):
            target = node.expression
            if isinstance(target, exp.Boolean):     # never UNKNOWN (joined.guard reads it)
                t, f = self.truth(node.this)
                hit = t if target.this else f
                return (~hit, hit) if node.args.get("negate") else (hit, ~hit)
            if not isinstance(target, exp.Null):
                self._fail(UnsupportedQueryError, node, "only IS [NOT] NULL, TRUE or FALSE is supported",
                           "use = or <>")
            null = self.null.copy() if isinstance(node.this, exp.Column) else self.value(node.this).null
            # PostgreSQL's parser spells IS NOT NULL as Is(negate=True), not NOT(Is).
            return (~null, null) if node.args.get("negate") else (null, ~null)
        if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            # IS [NOT] DISTINCT FROM never yields UNKNOWN: NULL is a comparable value here.
            ok, v = literal_value(node.expression)
            if not ok:
                self._fail(UnsupportedQueryError, node, f"'{snippet(node)}' compares two expressions of columns",
                           "compare with a constant")
            if v is None:
                t, f = self.null.copy(), ~self.null
            else:
                t, f = self._compare(node, "=", node.this, node.expression)
                t, f = t & ~self.null, f | self.null
            return (t, f) if isinstance(node, exp.NullSafeEQ) else (f, t)
        if type(node) in _OPS:
            return self._compare(node, _OPS[type(node)], node.this, node.expression)
        if isinstance(node, exp.Between):
            low, high = node.args["low"], node.args["high"]
            t1, f1 = self._compare(node, ">=", node.this, low)
            t2, f2 = self._compare(node, "<=", node.this, high)
            t, f = t1 & t2, f1 | f2
            if node.args.get("symmetric"):
                # BETWEEN SYMMETRIC a AND b: either order of the bounds (PostgreSQL).
                t3, f3 = self._compare(node, ">=", node.this, high)
                t4, f4 = self._compare(node, "<=", node.this, low)
                t, f = t | (t3 & t4), f & (f3 | f4)
            return t, f
        if isinstance(node, exp.In):
            if node.args.get("query") is not None:
                self._fail(UnsupportedQueryError, node, "IN (SELECT ...) is not supported", "list the values")
            t = np.zeros(self.n, bool)
            f = np.ones(self.n, bool)
            for item in node.expressions:
                ti, fi = self._compare(node, "=", node.this, item)
                t |= ti
                f &= fi
            return t, f
        if isinstance(node, exp.Escape) and isinstance(node.this, (exp.Like, exp.ILike)):
            ok, esc = literal_value(node.expression)
            return self._like(node.this, esc if ok else None, node)
        if isinstance(node, (exp.Like, exp.ILike)):
            return self._like(node, "\\", node)
        if isinstance(node, exp.Column):
            self._fail(UnsupportedQueryError, node, f"column '{self.attr.name}' is not a boolean",
                       "compare it with a value")
        self._fail(UnsupportedQueryError, node, f"{snippet(node)} is not a supported predicate",
                   "use comparisons, BETWEEN, IN, IS NULL, AND, OR and NOT")

    def _like(self, node, escape, where) -> tuple[np.ndarray, np.ndarray]:
        """[I]LIKE on a text expression: matched against each declared label."""
        ok, pattern = literal_value(node.expression)
        if not ok or not isinstance(pattern, str) or not isinstance(escape, (str, type(None))) \
                or (escape is not None and len(escape) > 1):
            self._fail(UnsupportedQueryError, where, f"'{snippet(where)}' needs a constant text pattern",
                       "e.g. education LIKE '%th'")
        regex = re.compile(_like_regex(pattern, escape or None),
                           re.DOTALL | (re.IGNORECASE if isinstance(node, exp.ILike) else 0))
        vals, null = self.constant_values(node.this)
        t = np.zeros(self.n, bool)
        f = np.zeros(self.n, bool)
        for i, v in enumerate(vals):
            if null[i]:
                continue
            if v is OTHER:
                # An undeclared label might or might not match: the answer would be a guess.
                self._fail(UnsupportedQueryError, where, f"'{snippet(where)}' depends on undeclared labels of "
                           f"'{self.attr.name}'", "compare with declared labels, or declare the column closed")
            if not isinstance(v, str):
                self._fail(UnsupportedQueryError, where, f"LIKE needs text; '{self.attr.name}' is numeric",
                           "compare numbers with <, >, BETWEEN")
            t[i] = regex.fullmatch(v) is not None
            f[i] = not t[i]
        return (f, t) if node.args.get("negate") else (t, f)

    def _compare(self, node, op: str, left, right) -> tuple[np.ndarray, np.ndarray]:
        if self.attr.kind == "categorical" and op not in ("=", "!=") and columns_in(left) + columns_in(right):
            self._fail(UnsupportedQueryError, node,
                       f"ordering comparison '{snippet(node)}' on categorical column '{self.attr.name}'",
                       "compare categorical columns with =, <>, IN or CASE WHEN")
        if not columns_in(left) and columns_in(right):
            # constant on the left: mirror so the column is always on the left
            left, right, op = right, left, _MIRROR[op]
        ok, v = self._constant(right)
        if not ok:
            self._fail(UnsupportedQueryError, node, f"'{snippet(node)}' compares two expressions of columns",
                       "compare a column (or an expression of one column) with a constant")
        if v is None:  # comparison with NULL is never true, never false
            return np.zeros(self.n, bool), np.zeros(self.n, bool)
        if isinstance(left, exp.Paren):
            left = left.this
        if isinstance(left, exp.Column):
            return self._compare_column(node, op, v)
        if isinstance(left, DimRef) and self.attr.is_key(left.shown):
            # the private key itself, reached through a join: compared as the bare column is
            # (declared labels only), on the key's cells, then read per joined cell
            key = CellEvaluator(self.attr.key_attr(left.shown), self.pos, self.words, self.meter, self.table)
            t, f = key._compare_column(node, op, v)
            cells = self.attr.key_cells(left.shown)
            return t[cells], f[cells]
        vals, null = self.constant_values(left)
        t = np.zeros(self.n, bool)
        f = np.zeros(self.n, bool)
        for i in range(self.n):
            if null[i]:
                continue
            x = vals[i]
            if x is OTHER:
                if op in ("=", "!=") and isinstance(v, str):
                    t[i], f[i] = op == "!=", op == "="
                    continue
                self._fail(UnsupportedQueryError, node, f"'{snippet(node)}' depends on undeclared labels",
                           "compare with declared labels only")
            try:
                r = compare(op, x, v)
            except Error as err:
                err.position = self.pos(node)
                raise
            t[i], f[i] = r, not r
        return t, f

    def _constant(self, node) -> tuple[bool, Any]:
        """(True, value) for a literal or any expression without columns (``1 + 1``,
        ``CAST('30' AS int)``), evaluated once; (False, None) if it reads a column."""
        ok, v = literal_value(node)
        if ok:
            return True, v
        if columns_in(node):
            return False, None
        ev = self.value(node)
        return True, None if ev.null[0] else ev.lo[0]

    def _coerce(self, node, v):
        attr = self.attr
        if attr.kind in ("date", "timestamp", "time"):
            try:
                return attr.literal(v)
            except Error as err:
                err.position = self.pos(node)
                raise
        if attr.kind == "categorical":
            labels = [x for x in attr.labels() if x is not None and x is not OTHER and x != "(other)"]
            want_str = isinstance(labels[0], str)
            if want_str and not isinstance(v, str) or not want_str and isinstance(v, str):
                try:
                    v = str(v) if want_str else int(v)
                except ValueError:
                    pass
            if v == "" and not attr.contains_value(v):
                if attr.other_index is not None:
                    self._fail(DomainViolationError, node,
                               f"'' is not a declared value of column '{attr.name}', and the column is not "
                               "closed: empty strings would share the cell of undeclared values",
                               f"compare with declared labels, or declare '{attr.name}' closed")
                return _EMPTY
            if not attr.contains_value(v):
                self._not_a_label(node, v)
            return v
        if isinstance(v, str):
            try:
                v = float(v) if any(c in v for c in ".eE") else int(v)
            except ValueError:
                self._fail(DomainViolationError, node, f"column '{attr.name}' is numeric; cannot compare it "
                           f"with the string {v!r}", "compare with a number")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self._fail(DomainViolationError, node, f"column '{attr.name}' is numeric; cannot compare it "
                       f"with {v!r}", "compare with a number")
        return v

    def _compare_column(self, node, op: str, v) -> tuple[np.ndarray, np.ndarray]:
        v = self._coerce(node, v)
        if v is _EMPTY and op in ("=", "!="):
            # '' on a closed categorical: no declared label is empty, so = is FALSE on every
            # non-NULL cell (Metabase's "is empty" filter is col IS NULL OR col = '').
            t, f = np.zeros(self.n, bool), ~self.null
            return (t, f) if op == "=" else (f.copy(), t)
        # Long IN lists and OR chains repeat values: each (op, value) is evaluated once.
        memo_key = (op, type(v).__name__, v)
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit[0].copy(), hit[1].copy()
        try:
            yes = self.attr.cells_for_predicate(op, v)[0]
            no = self.attr.cells_for_predicate(NEGATE[op], v)[0]
        except Error as err:
            if err.position is None:
                err.position = self.pos(node)
            raise
        t = np.zeros(self.n, bool)
        f = np.zeros(self.n, bool)
        t[list(yes)] = True
        f[list(no)] = True
        split = np.flatnonzero(~(t | f | self.null))
        if split.size:
            self._split_error(node, split)
        self._memo[memo_key] = (t.copy(), f.copy())
        return t, f


def _like_regex(pattern: str, escape: str | None) -> str:
    """SQL LIKE pattern → Python regex: % any run, _ one character, ``escape`` quotes."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return "".join(out)
