"""Relations of post-processed values: columns with partial derivatives, and the SQL steps
that act on whole rows (HAVING, ORDER BY, DISTINCT, OFFSET/LIMIT).

A :class:`V` is one column of per-row values; numeric columns carry their partial
derivatives with respect to the independent noisy quantities (the aggregates of the
query, or sums formed by an outer stage), so standard errors follow by the delta method
(``postprocess.py``).  A :class:`Relation` is the result of one SELECT level: its output
columns in final row order and the variances of the quantities their derivatives refer
to.  An outer stage (``stage.py``) reads a Relation as its input.  Everything here is
post-processing of released answers and public metadata.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

import numpy as np

from dpsql.errors import DataError, UnsupportedQueryError
from dpsql.sql.ir import COMPARISON, Agg, Call, Cast, Expr, Key, Lit, Op
from dpsql.temporal import number_time
from dpsql.sql.scalars import SCALARS, cast_type, cast_value, compare, first_present, first_true

# The two-sided 95% normal quantile (dpsql.engine.variance.Z95): a binning bound β is
# reported inside the standard error as β/Z95, so ``± Z95·se`` widens by exactly β.
Z95_REL = 1.959963984540054

__all__ = ["V", "Evaluator", "Relation", "as_num", "as_obj", "py_value", "select_rows", "stderr_of",
           "take"]


class V:
    """A column of per-group values with partial derivatives w.r.t. aggregates."""

    __slots__ = ("val", "grad", "num")

    def __init__(self, val, grad=None, num=True):
        self.val = val
        self.grad = grad or {}
        self.num = num


def _as_num(v: V) -> V:
    if v.num:
        return v
    out = np.empty(len(v.val))
    for i, x in enumerate(v.val):
        if x is None:
            out[i] = np.nan
        elif isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise DataError(f"cannot use {x!r} as a number", hint="cast text to a number first")
        else:
            out[i] = float(x)
    return V(out, {}, True)


def _as_obj(v: V) -> np.ndarray:
    if not v.num:
        return v.val
    return np.array([None if math.isnan(x) else x for x in v.val], dtype=object)


def _combine(a: V, b: V, da, db) -> dict:
    g = {}
    for k, d in a.grad.items():
        g[k] = d * da
    for k, d in b.grad.items():
        g[k] = g.get(k, 0) + d * db
    return g


def _arith(op: str, a: V, b: V) -> V:
    a, b = _as_num(a), _as_num(b)
    x, y = a.val, b.val
    with np.errstate(divide="ignore", invalid="ignore"):
        if op == "+":
            return V(x + y, _combine(a, b, 1.0, 1.0))
        if op == "-":
            return V(x - y, _combine(a, b, 1.0, -1.0))
        if op == "*":
            return V(x * y, _combine(a, b, y, x))
        if op == "/":
            safe = np.where(y == 0, np.nan, y)
            return V(x / safe, _combine(a, b, 1.0 / safe, -x / safe ** 2))
        if op == "int/":
            safe = np.where(y == 0, np.nan, y)
            return V(np.trunc(x / safe), {})
        if op == "%":
            safe = np.where(y == 0, np.nan, y)
            return V(np.fmod(x, safe), {k: d for k, d in a.grad.items()})
    raise AssertionError(op)


def _compare(op: str, a: V, b: V) -> V:
    xa, xb = _as_obj(a), _as_obj(b)
    return V(np.array([compare(op, p, q) for p, q in zip(xa, xb)], dtype=object), None, False)


def _kleene(op: str, a: V, b: V | None = None) -> V:
    xa = _as_obj(a)
    xb = _as_obj(b) if b is not None else None
    out = np.empty(len(xa), dtype=object)
    for i in range(len(xa)):
        p = xa[i]
        if op == "not":
            out[i] = None if p is None else not p
            continue
        assert xb is not None  # "and" and "or" are binary
        q = xb[i]
        if op == "and":
            out[i] = False if (p is False or q is False) else None if (p is None or q is None) else True
        else:
            out[i] = True if (p is True or q is True) else None if (p is None or q is None) else False
    return V(out, None, False)


def _scalar(name: str, args: list[V]) -> V:
    """A function of ``scalars.SCALARS`` on each row of its first argument; the rest are
    constants (ROUND's places, a checked :class:`~dpsql.sql.ir.Lit`)."""
    fn = SCALARS[name]
    constants = [_as_int(_as_obj(a)[0]) for a in args[1:]]
    if not fn.numeric:
        return V(fn.apply(_as_obj(args[0]), *constants), None, False)
    x = _as_num(args[0])
    if any(c is None for c in constants):
        return V(np.full(len(x.val), np.nan), {})          # round(x, NULL) is NULL
    val = fn.apply(x.val, *constants)
    chain = fn.chain
    assert chain is not None        # numeric
    with np.errstate(invalid="ignore", divide="ignore"):
        return V(val, {k: chain(d, x.val, val) for k, d in x.grad.items()})


def _cast(x: V, to) -> V:
    """CAST of each row (``scalars.cast_value``, as on cells).  A number cast to a number keeps
    its derivatives: rounding to an integer does not make an estimate more certain."""
    kind = cast_type(to)
    if x.num and kind == "double precision":
        return x
    if x.num and kind == "integer":
        # cast_value's int(round(v)) on each finite value, for the whole column: np.rint rounds
        # half to even like round() and exactly (+ 0.0: round(-0.3) is the int 0, not -0.0)
        a = np.asarray(x.val, dtype=float)
        with np.errstate(invalid="ignore"):
            val = np.where(np.isfinite(a), np.rint(a) + 0.0, a)
        return V(val, dict(x.grad))
    out = np.array([cast_value(v, to) for v in _as_obj(x)], dtype=object)
    return _as_num(V(out, None, False)) if kind in ("integer", "double precision") else V(out, None, False)


def _fn(name: str, args: list[V], n: int) -> V:
    if name in SCALARS:
        return _scalar(name, args)
    if name == "coalesce":
        vals = [_as_obj(a) for a in args]
        picks = [first_present([v[i] for v in vals]) for i in range(n)]      # one rule with the cells'
        out = np.array([None if j is None else vals[j][i] for i, j in enumerate(picks)], dtype=object)
        if not all(a.num for a in args):
            return V(out, None, False)
        res = _as_num(V(out, None, False))
        res.grad = {k: np.zeros(n) for k in set().union(*[a.grad for a in args])}
        for i, j in enumerate(picks):
            for k, d in ([] if j is None else args[j].grad.items()):
                res.grad[k][i] = d[i] if np.ndim(d) else d
        return res
    if name in ("greatest", "least"):
        nums = [_as_num(a) for a in args]
        stack = np.vstack([a.val for a in nums])
        with np.errstate(invalid="ignore"):
            pick = np.nanargmax(np.where(np.isnan(stack), -np.inf, stack), axis=0) if name == "greatest" \
                else np.nanargmin(np.where(np.isnan(stack), np.inf, stack), axis=0)
        val = stack[pick, np.arange(n)]
        grad: dict[int, np.ndarray] = {}
        for j, a in enumerate(nums):
            for k, d in a.grad.items():
                grad[k] = grad.get(k, 0) + np.where(pick == j, d, 0.0)
        return V(val, grad)
    raise UnsupportedQueryError(f"function {name} is not supported in output expressions")


class Evaluator:
    """Evaluates the IR (``dpsql.sql.ir``) over all rows at once; numeric values carry their
    partial derivatives.  Leaves: :class:`~dpsql.sql.ir.Agg` reads ``aggs``,
    :class:`~dpsql.sql.ir.Key` reads ``keys`` (columns, as :class:`V`; an outer stage's
    input columns are its keys)."""

    def __init__(self, n: int, aggs: list, keys: list) -> None:
        self.aggs = aggs
        self.keys = keys
        self.n = n

    def __call__(self, e: Expr) -> V:
        n = self.n
        if isinstance(e, Agg):
            a = self.aggs[e.index]
            return V(a.val.copy(), dict(a.grad), a.num)
        if isinstance(e, Key):
            return self.keys[e.index]
        if isinstance(e, Lit):
            v = e.value
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return V(np.full(n, float(v)), {})
            return V(np.array([v] * n, dtype=object), None, False)
        if isinstance(e, Op):
            op, args = e.op, [self(a) for a in e.args]
            if op in ("+", "-", "*", "/", "%", "int/"):
                return _arith(op, *args)
            if op == "neg":
                a = _as_num(args[0])
                return V(-a.val, {k: -d for k, d in a.grad.items()})
            if op in COMPARISON:
                return _compare(op, *args)
            if op in ("and", "or", "not"):
                return _kleene(op, *args)
            if op == "isnull":
                return V(np.array([x is None for x in _as_obj(args[0])], dtype=object), None, False)
            raise AssertionError(op)
        if isinstance(e, Call):
            return _fn(e.name, [self(a) for a in e.args], n)
        if isinstance(e, Cast):
            return _cast(self(e.arg), e.to)
        conds = [_as_obj(self(c)) for c, _ in e.branches]
        vals = [self(v) for _, v in e.branches] + ([self(e.default)] if e.default is not None else [])
        # a NULL branch (NULLIF's THEN NULL) does not make a numeric CASE text
        numeric = any(v.num for v in vals) and all(v.num or all(x is None for x in v.val) for v in vals)
        vals = [_as_num(v) for v in vals] if numeric else vals
        pick = np.array([first_true([c[i] for c in conds]) for i in range(n)], dtype=int)  # as on cells
        if numeric:
            val = np.full(n, np.nan)
            grad: dict[int, np.ndarray] = {}
            for j, v in enumerate(vals):
                sel = pick == j
                val = np.where(sel, v.val, val)
                for k, d in v.grad.items():
                    grad[k] = grad.get(k, 0) + np.where(sel, d, 0.0)
            return V(val, grad)
        objs = [_as_obj(v) for v in vals]
        return V(np.array([objs[p][i] if p < len(objs) else None for i, p in enumerate(pick)],
                          dtype=object), None, False)


def _as_int(x):
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _py(x):
    if isinstance(x, (np.floating, float)):
        return None if math.isnan(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x




def py_value(x):
    return _py(x)


def _as_time(x, time):
    """A time quantile's number (days, or seconds) as its date or timestamp (None stays)."""
    if x is None or isinstance(x, (dt.date, dt.datetime, dt.time)):
        return x
    kind, days = time
    return number_time(float(x) * (86400.0 if days and kind == "timestamp" else 1.0), kind)


def _py_column(val, integer: bool) -> list:
    """``[_py(x) for x in val]`` (with ``_as_int`` for an integer column), a whole numeric
    column at once: ``tolist`` gives the same Python floats, ints and bools; a 1,459-row
    answer spent 5 ms here value by value (issue 35)."""
    arr = val if isinstance(val, np.ndarray) else None
    if arr is None or arr.dtype.kind not in "fiub":
        if integer:
            return [_as_int(_py(x)) for x in val]
        return [_py(x) for x in val]
    out = arr.tolist()
    if arr.dtype.kind != "f":
        return out
    if integer:
        return [None if x != x else int(x) if x.is_integer() else x for x in out]
    return [None if x != x else x for x in out]


def as_num(v: V) -> V:
    return _as_num(v)


def as_obj(v: V) -> np.ndarray:
    return _as_obj(v)


def full_grad(v: V, n: int) -> dict:
    """The derivatives of ``v`` as per-row arrays (scalars broadcast)."""
    return {k: np.broadcast_to(np.asarray(d, dtype=float), (n,)).copy() for k, d in v.grad.items()}


def take(v: V, idx: np.ndarray) -> V:
    """Rows ``idx`` of column ``v`` (in that order)."""
    n = len(v.val)
    if not v.num:
        return V(np.asarray(v.val, dtype=object)[idx], None, False)
    return V(np.asarray(v.val, dtype=float)[idx], {k: d[idx] for k, d in full_grad(v, n).items()})


def stderr_of(v: V, variances: list, n: int) -> np.ndarray:
    """Delta-method standard error of each row of ``v`` (None where unknown or not numeric)."""
    if not v.num:
        return np.full(n, None, dtype=object)
    total = np.zeros(n)
    for k, d in v.grad.items():
        total = total + (d * np.ones(n)) ** 2 * variances[k]
    # np.sqrt is math.sqrt to the bit (both correctly rounded); a total is never negative
    out = np.empty(n, dtype=object)
    out[:] = [None if x != x else x for x in np.sqrt(total).tolist()]
    return out


def bias_of(v: V, biases: list, n: int) -> np.ndarray:
    """First-order bound Σ_k |∂v/∂a_k|·β_k on the binning error of each row of ``v`` (exact for
    an aggregate itself and for linear expressions of aggregates), None where no aggregate it
    depends on has one."""
    if not v.num:
        return np.full(n, None, dtype=object)
    total, any_bias = np.zeros(n), np.zeros(n, dtype=bool)
    for k, d in v.grad.items():
        b = biases[k]
        has = b > 0
        with np.errstate(invalid="ignore"):
            total = total + np.where(has, np.abs(d * np.ones(n)) * b, 0.0)
        any_bias |= has
    out = np.empty(n, dtype=object)
    out[:] = [t if f and t == t else None for t, f in zip(total.tolist(), any_bias.tolist())]
    return out


def select_rows(rows: list[tuple], keep: np.ndarray, order: list, distinct: bool,
                offset: int | None, limit: int | None) -> list[int]:
    """Row indices after HAVING (``keep``), ORDER BY, DISTINCT and OFFSET/LIMIT.

    ``order`` lists (values, descending, nulls_first) per sort key, most significant first;
    values are already mapped to their sort rank where labels do not sort as text."""
    idx = [i for i in range(len(rows)) if keep[i]]
    for col, desc, nulls_first in reversed(order):
        flag_null = int(nulls_first == desc)
        idx.sort(key=lambda i: (flag_null, 0) if col[i] is None else (1 - flag_null, col[i]), reverse=desc)
    if distinct:
        seen, uniq = set(), []
        for i in idx:
            if rows[i] not in seen:
                seen.add(rows[i])
                uniq.append(i)
        idx = uniq
    start = offset or 0
    end = None if limit is None else start + limit
    return idx[start:end]


@dataclass
class Relation:
    """One SELECT level's result: output columns (rows in final order) and the variances of
    the independent quantities their derivatives refer to (per row)."""

    cols: list[V]
    variances: list[np.ndarray]
    types: list[str]
    names: list[str]
    ranks: list = field(default_factory=list)   # per column: label → sort rank, or None
    # per independent quantity (as ``variances``): a bound on its binning error, or empty
    biases: list = field(default_factory=list)
    # a grouped query's rows (postprocess._group_rows): the group and the listed key tuple
    # each row came from, for the rows' ranges; None elsewhere
    group_index: np.ndarray | None = field(default=None, compare=False, repr=False)
    key_position: np.ndarray | None = field(default=None, compare=False, repr=False)
    # per column: (type, days) where it is a time column's quantile (a number of days or
    # seconds, postprocess.AggPlan.time_type) to be shown as a date or timestamp; else None
    times: list = field(default_factory=list, compare=False, repr=False)

    @property
    def n(self) -> int:
        return len(self.cols[0].val) if self.cols else 0

    def rows(self, with_errors: bool) -> tuple[list[tuple], list[tuple] | None]:
        """Rows, and per cell the standard error *including the binning bound*: a cell with
        bound β reports se + β/Z95, so that every front end's ``± Z95·se`` is the 95%
        interval widened by β (``bias_rows`` says which cells carry one)."""
        n = self.n
        rows = list(zip(*[_py_column(c.val, t == "integer") for c, t in zip(self.cols, self.types)])) \
            if self.cols else [() for _ in range(n)]
        if any(self.times):
            rows = [tuple(_as_time(v, self.times[j]) if j < len(self.times) and self.times[j] else v
                          for j, v in enumerate(r)) for r in rows]
        if not with_errors:
            return rows, None
        errs = [stderr_of(c, self.variances, n).tolist() for c in self.cols]
        if self.biases:
            for j, c in enumerate(self.cols):
                b = bias_of(c, self.biases, n).tolist()
                errs[j] = [e if e is None or b[i] is None else e + b[i] / Z95_REL
                           for i, e in enumerate(errs[j])]
        return rows, list(zip(*errs)) if errs else [() for _ in range(n)]

    def bias_rows(self) -> list[tuple]:
        """Per row and column: the bound on the binning error already inside its standard
        error (None where there is none)."""
        n = self.n
        if not self.cols:
            return [() for _ in range(n)]
        if not self.biases:
            return [(None,) * len(self.cols)] * n
        return list(zip(*[bias_of(c, self.biases, n).tolist() for c in self.cols]))
