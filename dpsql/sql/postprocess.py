"""Post-processing: answers of the linear queries → result rows (and standard errors).

Everything here is a function of the (noisy) answers and public metadata, so it costs no
privacy budget (post-processing, thesis §2).  The steps follow SQL's logical order:
aggregate values per group → HAVING → select list → DISTINCT → ORDER BY → OFFSET/LIMIT.

Aggregates from answers:

* COUNT/SUM: the sum of the query's blocks for each group.
* AVG = SUM / COUNT; NULL when the (noisy) count is not positive.
* Quantiles from the per-group histogram h of the argument's cells, ordered by the cells'
  values v (the bin's representative value: exact for unit bins, the midpoint otherwise).
  Negative estimates are clipped to 0; N = Σh.  ``disc``: the smallest v whose cumulative
  count reaches q·N (PostgreSQL's percentile_disc).  ``cont``: the interpolated order
  statistic at 0-based rank q·(N−1), where rank r lies in the first cell whose cumulative
  count exceeds r; this equals percentile_cont on the binned data when h holds exact
  counts.  NULL when N ≤ 0.

Standard errors (delta method).  Each aggregate gets a variance: COUNT/SUM the sum of the
block variances; AVG, (1/c)²·var(s) + (s/c²)²·var(c).  An output expression f of
aggregates a_i gets var ≈ Σ (∂f/∂a_i)² var(a_i), with the partials propagated forward
through the arithmetic.  The approximation treats the aggregates as independent and f as
linear near the estimate; it is poor when a denominator's standard error is comparable to
the denominator itself.  Quantiles: the delta method through the CDF
(:func:`quantile_variance`).  Group keys carry no standard error (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import DataError, InterfaceError, PrivacyViolationError, UnsupportedQueryError
from dpsql.sql.aggregates import is_aggregate
from dpsql.sql.cells import columns_in, literal_value, snippet

__all__ = ["AggPlan", "Program", "to_ir", "int_ir", "run_program", "quantile_from_histogram",
           "quantile_variance"]


@dataclass
class AggPlan:
    """How one aggregate is computed from linear-query answers."""

    kind: str                       # count | sum | avg | variance | stddev | quantile
    label: str
    queries: list[str]
    q: float | None = None
    method: str | None = None
    cell_values: np.ndarray | None = None


@dataclass
class Program:
    outputs: list
    having: Any
    order: list
    limit: int | None
    offset: int | None
    distinct: bool
    aggs: list[AggPlan]
    keys: list
    grouping: Any
    lq_by_name: dict = field(default_factory=dict)


# --- SQL → IR --------------------------------------------------------------------------

_BINARY = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.IntDiv: "/", exp.Mod: "%",
           exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
           exp.And: "and", exp.Or: "or"}


def to_ir(node, low):
    """Translate an output expression; aggregates and group keys become leaves."""
    if isinstance(node, exp.Paren):
        return to_ir(node.this, low)
    if is_aggregate(node):
        return ("agg", low.register(node))
    has_cols = bool(columns_in(node))
    if has_cols and not any(is_aggregate(n) for n in node.walk()):
        c = low.canon(node)
        if c in low.key_index:
            return ("key", low.key_index[c])
    ok, v = literal_value(node)
    if ok:
        return ("lit", v)
    if isinstance(node, exp.Column):
        body = low.output_alias(node)
        if body is not None:  # DuckDB lets HAVING and ORDER BY expressions name output aliases
            return to_ir(body, low)
        attr = low.resolve(node)
        raise PrivacyViolationError(
            f"column \"{attr.name}\" must appear in GROUP BY or be used in an aggregate function: "
            "a bare private column would reveal individual rows",
            position=low.pos(node, node.name),
            hint=f"aggregate it (e.g. COUNT(*), AVG({attr.name})) or add it to GROUP BY")
    if type(node) in _BINARY:
        args = [to_ir(node.this, low), to_ir(node.expression, low)]
        if isinstance(node, exp.Div) and node.args.get("typed") and all(int_ir(a, low) for a in args):
            # PostgreSQL divides integers by truncation; only exact (non-noisy) integers qualify.
            return ("op", "int/", args)
        return ("op", _BINARY[type(node)], args)
    if isinstance(node, exp.Neg):
        return ("op", "neg", [to_ir(node.this, low)])
    if isinstance(node, exp.Not):
        return ("op", "not", [to_ir(node.this, low)])
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        test = ("op", "isnull", [to_ir(node.this, low)])
        return ("op", "not", [test]) if node.args.get("negate") else test
    if isinstance(node, exp.Between):
        x, lo, hi = to_ir(node.this, low), to_ir(node.args["low"], low), to_ir(node.args["high"], low)
        inside = ("op", "and", [("op", ">=", [x, lo]), ("op", "<=", [x, hi])])
        if node.args.get("symmetric"):
            return ("op", "or", [inside, ("op", "and", [("op", ">=", [x, hi]), ("op", "<=", [x, lo])])])
        return inside
    if isinstance(node, (exp.Round, exp.Abs, exp.Floor, exp.Ceil, exp.Coalesce, exp.Nullif,
                         exp.Greatest, exp.Least, exp.Sqrt, exp.Ln, exp.Cast)):
        args = [node.this] + [a for k in ("decimals", "expression") if (a := node.args.get(k)) is not None] \
            + list(node.expressions)
        name = "cast" if isinstance(node, exp.Cast) else type(node).__name__.lower()
        if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
            ok, d = literal_value(node.args["decimals"])
            if ok and d is not None and (not isinstance(d, int) or isinstance(d, bool) or abs(d) > 2 ** 31 - 1):
                raise DataError(f"round: {str(d)[:20]} is not a valid number of decimal places",
                                position=low.pos(node.args["decimals"]),
                                hint="use an integer between -2147483647 and 2147483647")
        return ("fn", name, [to_ir(a, low) for a in args])
    if isinstance(node, exp.Case):
        if node.this is not None:
            subject = node.this
            branches = [(to_ir(exp.EQ(this=subject.copy(), expression=b.this.copy()), low),
                         to_ir(b.args["true"], low)) for b in node.args.get("ifs") or []]
        else:
            branches = [(to_ir(b.this, low), to_ir(b.args["true"], low)) for b in node.args.get("ifs") or []]
        default = node.args.get("default")
        return ("case", branches, to_ir(default, low) if default is not None else None)
    label = f"function {low.written(node)}" if isinstance(node, exp.Func) else f"'{snippet(node, 60)}'"
    raise UnsupportedQueryError(f"{label} is not supported in the select list, HAVING or ORDER BY",
                                position=low.call_pos(node) if isinstance(node, exp.Func) else low.pos(node),
                                hint="use arithmetic, comparisons, CASE, ROUND, ABS, COALESCE on aggregates")


def int_ir(ir, low) -> bool:
    """Is this IR an exact integer (group key or literal, never an aggregate)?"""
    if ir[0] == "key":
        return low.keys[ir[1]].type == "integer"
    if ir[0] == "lit":
        return isinstance(ir[1], int) and not isinstance(ir[1], bool)
    if ir[0] == "op" and ir[1] in ("+", "-", "*", "%", "int/", "neg"):
        return all(int_ir(a, low) for a in ir[2])
    return False


# --- evaluation ------------------------------------------------------------------------

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
    out = np.empty(len(xa), dtype=object)
    fn = {"=": lambda p, q: p == q, "!=": lambda p, q: p != q, "<": lambda p, q: p < q,
          "<=": lambda p, q: p <= q, ">": lambda p, q: p > q, ">=": lambda p, q: p >= q}[op]
    for i, (p, q) in enumerate(zip(xa, xb)):
        if p is None or q is None:
            out[i] = None
        else:
            try:
                out[i] = bool(fn(p, q))
            except TypeError:
                raise DataError(f"cannot compare {p!r} with {q!r}", hint="compare values of one type") from None
    return V(out, None, False)


def _kleene(op: str, a: V, b: V | None = None) -> V:
    xa = _as_obj(a)
    xb = _as_obj(b) if b is not None else None
    out = np.empty(len(xa), dtype=object)
    for i in range(len(xa)):
        p = xa[i]
        if op == "not":
            out[i] = None if p is None else not p
            continue
        q = xb[i]
        if op == "and":
            out[i] = False if (p is False or q is False) else None if (p is None or q is None) else True
        else:
            out[i] = True if (p is True or q is True) else None if (p is None or q is None) else False
    return V(out, None, False)


def _fn(name: str, args: list[V], n: int) -> V:
    if name == "coalesce":
        vals = [_as_obj(a) for a in args]
        out = np.array([next((v[i] for v in vals if v[i] is not None), None) for i in range(n)], dtype=object)
        if all(a.num for a in args):
            res = _as_num(V(out, None, False))
            res.grad = {}
            for k in set().union(*[a.grad for a in args]):
                res.grad[k] = np.zeros(n)
            for i in range(n):
                for a in args:
                    if not math.isnan(a.val[i]):
                        for k, d in a.grad.items():
                            res.grad[k][i] = d[i] if np.ndim(d) else d
                        break
            return res
        return V(out, None, False)
    if name == "nullif":
        a, b = args
        eq = _compare("=", a, b).val
        if a.num:
            val = np.where([e is True for e in eq], np.nan, a.val)
            return V(val, dict(a.grad))
        return V(np.array([None if e is True else x for x, e in zip(a.val, eq)], dtype=object), None, False)
    if name == "cast":
        return args[0]
    x = _as_num(args[0])
    if name == "round":
        d = _as_num(args[1]).val[0] if len(args) > 1 else 0.0
        if math.isnan(d):
            return V(np.full(n, np.nan), {})          # round(x, NULL) is NULL
        if d != int(d) or abs(d) > 2 ** 31 - 1:
            raise DataError(f"round: {d:g} is not a valid number of decimal places",
                            hint="use an integer between -2147483647 and 2147483647")
        d = int(d)
        # Rounding does not make an estimate more certain: its error passes through unchanged.
        if d > 308:
            return V(x.val.copy(), dict(x.grad))
        if d < -308:
            return V(np.where(np.isnan(x.val), np.nan, 0.0), dict(x.grad))
        scale = 10.0 ** d
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = np.abs(x.val) * scale
            r = np.sign(x.val) * np.floor(scaled + 0.5) / scale
        return V(np.where(np.isfinite(scaled), r, x.val), dict(x.grad))
    if name == "abs":
        return V(np.abs(x.val), {k: d * np.sign(x.val) for k, d in x.grad.items()})
    if name in ("floor", "ceil"):
        f = np.floor if name == "floor" else np.ceil
        return V(f(x.val), dict(x.grad))
    if name == "sqrt":
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.sqrt(np.where(x.val < 0, np.nan, x.val))
            return V(r, {k: d / (2 * r) for k, d in x.grad.items()})
    if name == "ln":
        with np.errstate(invalid="ignore", divide="ignore"):
            return V(np.log(np.where(x.val <= 0, np.nan, x.val)), {k: d / x.val for k, d in x.grad.items()})
    if name in ("greatest", "least"):
        nums = [_as_num(a) for a in args]
        stack = np.vstack([a.val for a in nums])
        with np.errstate(invalid="ignore"):
            pick = np.nanargmax(np.where(np.isnan(stack), -np.inf, stack), axis=0) if name == "greatest" \
                else np.nanargmin(np.where(np.isnan(stack), np.inf, stack), axis=0)
        val = stack[pick, np.arange(n)]
        grad = {}
        for j, a in enumerate(nums):
            for k, d in a.grad.items():
                grad[k] = grad.get(k, 0) + np.where(pick == j, d, 0.0)
        return V(val, grad)
    raise UnsupportedQueryError(f"function {name} is not supported in output expressions")


class _Eval:
    """Evaluates IR over all groups at once; numeric values carry their partial derivatives."""

    def __init__(self, agg_vals, key_cols, n):
        self.agg_vals = agg_vals
        self.key_cols = key_cols
        self.n = n

    def __call__(self, ir) -> V:
        tag = ir[0]
        n = self.n
        if tag == "agg":
            return V(self.agg_vals[ir[1]].copy(), {ir[1]: np.ones(n)})
        if tag == "key":
            return V(self.key_cols[ir[1]], None, False)
        if tag == "lit":
            v = ir[1]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return V(np.full(n, float(v)), {})
            return V(np.array([v] * n, dtype=object), None, False)
        if tag == "op":
            op, args = ir[1], [self(a) for a in ir[2]]
            if op in ("+", "-", "*", "/", "%", "int/"):
                return _arith(op, *args)
            if op == "neg":
                a = _as_num(args[0])
                return V(-a.val, {k: -d for k, d in a.grad.items()})
            if op in ("=", "!=", "<", "<=", ">", ">="):
                return _compare(op, *args)
            if op in ("and", "or", "not"):
                return _kleene(op, *args)
            if op == "isnull":
                return V(np.array([x is None for x in _as_obj(args[0])], dtype=object), None, False)
        if tag == "fn":
            return _fn(ir[1], [self(a) for a in ir[2]], n)
        if tag == "case":
            branches, default = ir[1], ir[2]
            conds = [_as_obj(self(c)) for c, _ in branches]
            vals = [self(v) for _, v in branches] + ([self(default)] if default is not None else [])
            numeric = all(v.num for v in vals)
            pick = np.full(n, len(branches))
            for j in range(len(branches) - 1, -1, -1):
                pick = np.where([c is True for c in conds[j]], j, pick)
            if numeric:
                val = np.full(n, np.nan)
                grad = {}
                for j, v in enumerate(vals):
                    sel = pick == j
                    val = np.where(sel, v.val, val)
                    for k, d in v.grad.items():
                        grad[k] = grad.get(k, 0) + np.where(sel, d, 0.0)
                return V(val, grad)
            objs = [_as_obj(v) for v in vals]
            return V(np.array([objs[p][i] if p < len(objs) else None for i, p in enumerate(pick)],
                              dtype=object), None, False)
        raise AssertionError(tag)


# --- aggregates from answers ----------------------------------------------------------

def quantile_from_histogram(hist: np.ndarray, values: np.ndarray, q: float, method: str) -> float | None:
    """One quantile from a (noisy) histogram over cells with representative ``values``."""
    keep = ~np.isnan(values)
    h = np.clip(np.asarray(hist, dtype=float)[keep], 0.0, None)
    v = values[keep]
    order = np.argsort(v, kind="stable")
    h, v = h[order], v[order]
    total = float(h.sum())
    if total <= 0:
        return None
    cum = np.cumsum(h)
    if method == "disc":
        # The first non-empty cell whose cumulative count reaches q·N (tolerance for float sums).
        hit = np.flatnonzero((cum >= q * total - 1e-9 * total) & (h > 0))
        return float(v[hit[0]])
    rank = q * (total - 1) if total >= 1 else 0.0
    lo = math.floor(rank)
    frac = rank - lo

    def at(r):
        i = int(np.searchsorted(cum, r + 1e-9 * max(1.0, total), side="right"))
        return float(v[min(i, len(v) - 1)])

    a = at(lo)
    return a if frac == 0 else a + frac * (at(lo + 1) - a)


def quantile_variance(hist: np.ndarray, var: np.ndarray, values: np.ndarray, q: float,
                      x: float) -> float:
    """Variance of a quantile x read off a noisy histogram (an approximation, documented
    in docs/engine.md), from the distribution of the cell where the CDF crosses q.

    The estimate is the value of the first cell j whose cumulative count C_j reaches q·N,
    so it is discrete: a plain delta method through a density would miss the jumps between
    cells.  With the cells' errors independent with variances ``var``, the crossing
    statistic D_j = C_j − q·N has variance (1 − q)²·Var(C_j) + q²·Var(N − C_j); with D_j
    normal around its estimate, P(crossing at or before j) = Φ(D_j / sd_j) (made monotone),
    its increments give P(estimate = v_j), and the variance is Σ_j P_j (v_j − x)².
    Infinite when a cell is unsupported (infinite variance), NaN when a variance is unknown.
    """
    keep = ~np.isnan(values)
    h = np.clip(np.asarray(hist, dtype=float)[keep], 0.0, None)
    w = np.asarray(var, dtype=float)[keep]
    v = values[keep]
    order = np.argsort(v, kind="stable")
    h, w, v = h[order], w[order], v[order]
    if np.any(np.isinf(w)):
        return math.inf          # an unsupported cell: the engine marks the value inferred
    if len(v) == 0 or np.any(np.isnan(w)) or not math.isfinite(x):
        return math.nan
    cum, vcum = np.cumsum(h), np.cumsum(w)
    total, vtotal = float(cum[-1]), float(vcum[-1])
    d = cum - q * total
    sd = np.sqrt((1 - q) ** 2 * vcum + q ** 2 * np.maximum(vtotal - vcum, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, d / sd, np.where(d >= 0, np.inf, -np.inf))
    le = np.maximum.accumulate([0.5 * math.erfc(-float(t) / math.sqrt(2.0)) for t in z])
    le[-1] = 1.0                 # the last cell always reaches q·N
    p = np.diff(np.concatenate([[0.0], le]))
    return float(np.sum(p * (v - x) ** 2))


def _answers(lq, answers, stderrs):
    if lq.always_zero:
        zero = np.zeros((lq.blocks, lq.layout.rows))
        return zero, (zero.copy() if stderrs is not None else None)
    if lq.name not in answers:
        raise InterfaceError(f"no answer for linear query {lq.name!r}", hint="answer every linear query")
    a = np.asarray(answers[lq.name], dtype=float).reshape(-1)
    rows = lq.layout.rows
    if a.size != rows * lq.blocks:
        raise InterfaceError(f"answer for {lq.name!r} has {a.size} entries, expected {rows * lq.blocks}",
                             hint="pass matrix @ x for the query's matrix")
    var = None
    if stderrs is not None and lq.name in stderrs:
        var = np.asarray(stderrs[lq.name], dtype=float).reshape(lq.blocks, rows) ** 2
    return a.reshape(lq.blocks, rows), var


def _histograms(lq, a: np.ndarray, groups: int) -> np.ndarray:
    layout = lq.layout
    names = [n for n, _ in layout.axes]
    sizes = [k for _, k in layout.axes]
    k = names.index(layout.quantile_attr)
    total = None
    for b in range(lq.blocks):
        t = a[b].reshape(sizes) * lq.cell_masks[b].reshape([-1 if i == k else 1 for i in range(len(sizes))])
        total = t if total is None else total + t
    t = np.moveaxis(total, k, -1)
    if layout.quantile_group_map is None:
        return t.reshape(groups, sizes[k])
    qmap = np.asarray(layout.quantile_group_map)
    nb = int(qmap.max()) + 1
    parts = [t * (qmap == b) for b in range(nb)]
    h = np.stack(parts, axis=k)
    return h.reshape(groups, sizes[k])


def _aggregate_values(program: Program, answers, stderrs, groups: int):
    vals, vars_ = [], []
    cache = {}
    for plan in program.aggs:
        got = []
        for name in plan.queries:
            if name not in cache:
                cache[name] = _answers(program.lq_by_name[name], answers, stderrs)
            got.append(cache[name])
        if plan.kind in ("count", "sum"):
            a, var = got[0]
            vals.append(a.sum(axis=0))
            vars_.append(var.sum(axis=0) if var is not None else np.full(groups, np.nan))
        elif plan.kind == "avg":
            (s, vs), (c, vc) = got
            s, c = s.sum(axis=0), c.sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                ok = c > 0
                avg = np.where(ok, s / np.where(ok, c, 1.0), np.nan)
                if vs is not None and vc is not None:
                    var = (1 / c) ** 2 * vs.sum(axis=0) + (s / c ** 2) ** 2 * vc.sum(axis=0)
                    var = np.where(ok, var, np.nan)
                else:
                    var = np.full(groups, np.nan)
            vals.append(avg)
            vars_.append(var)
        elif plan.kind in ("variance", "stddev"):
            v, var = _moments(plan, got, groups)
            vals.append(v)
            vars_.append(var)
        else:
            lq = program.lq_by_name[plan.queries[0]]
            a, var = got[0]
            hist = _histograms(lq, a, groups)
            out = np.array([np.nan if (r := quantile_from_histogram(hist[g], plan.cell_values, plan.q,
                                                                     plan.method)) is None else r
                            for g in range(groups)])
            # The masks are 0/1, so the same masked sum adds the cells' variances.
            vh = _histograms(lq, var, groups) if var is not None else None
            vals.append(out)
            vars_.append(np.array([np.nan if vh is None or np.isnan(out[g]) else
                                   quantile_variance(hist[g], vh[g], plan.cell_values, plan.q, out[g])
                                   for g in range(groups)]))
    return vals, vars_


def _moments(plan: AggPlan, got, groups: int):
    """Variance (or standard deviation) from SUM(x²), SUM(x), COUNT(x), with its delta-method variance.

    Noise can make the estimate negative; it is clipped to 0 (a variance is never negative).
    """
    (s2, v2), (s1, v1), (c, vc) = got
    s2, s1, c = s2.sum(axis=0), s1.sum(axis=0), c.sum(axis=0)
    samp = plan.method == "samp"
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = c > (1 if samp else 0)
        c_ = np.where(ok, c, 2.0)
        if samp:
            f = (s2 - s1 ** 2 / c_) / (c_ - 1)
            d2 = 1 / (c_ - 1)
            d1 = -2 * s1 / (c_ * (c_ - 1))
            dc = ((s1 / c_) ** 2 * (c_ - 1) - (s2 - s1 ** 2 / c_)) / (c_ - 1) ** 2
        else:
            f = s2 / c_ - (s1 / c_) ** 2
            d2 = 1 / c_
            d1 = -2 * s1 / c_ ** 2
            dc = -s2 / c_ ** 2 + 2 * s1 ** 2 / c_ ** 3
        f = np.clip(f, 0.0, None)
        if plan.kind == "stddev":
            g = np.sqrt(f)
            scale = np.where(g > 0, 1 / (2 * g), np.nan)
            f, d2, d1, dc = g, d2 * scale, d1 * scale, dc * scale
        if v2 is not None and v1 is not None and vc is not None:
            var = d2 ** 2 * v2.sum(axis=0) + d1 ** 2 * v1.sum(axis=0) + dc ** 2 * vc.sum(axis=0)
        else:
            var = np.full(groups, np.nan)
    return np.where(ok, f, np.nan), np.where(ok, var, np.nan)


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


def run_program(cq, answers, stderrs, present=None):
    """Rows and standard-error rows of a compiled query; see the module docstring.

    Rows are produced for the listed groups (``cq.groups``: those the WHERE allows).
    ``present`` (a boolean mask over ``cq.groups``) drops groups before HAVING.  Only the
    semantic tests pass it, to mimic SQL's omission of empty groups from exact counts; the
    engine never does, because which groups are empty is private.
    """
    if cq.is_explain:
        lines = cq.explain().split("\n")
        return [(line,) for line in lines], ([(None,) for _ in lines] if stderrs is not None else None)
    if cq.is_schema_probe:
        return [], ([] if stderrs is not None else None)
    program: Program = cq.program
    groups = program.grouping.size
    vals, vars_ = _aggregate_values(program, answers, stderrs, groups)
    tuples = cq.groups
    idx = np.asarray(program.grouping.listed)
    pos = np.arange(len(idx))
    if present is not None:
        keep_present = np.asarray(present, dtype=bool)
        idx, pos = idx[keep_present], pos[keep_present]
    vals = [v[idx] for v in vals]
    vars_ = [v[idx] for v in vars_]
    n = len(idx)
    key_cols = [np.array([tuples[i][j] for i in pos], dtype=object) for j in range(len(program.keys))]
    ev = _Eval(vals, key_cols, n)
    keep = np.ones(n, dtype=bool)
    if program.having is not None:
        h = _as_obj(ev(program.having))
        keep = np.array([x is True for x in h], dtype=bool)
    outs = [ev(o) for o in program.outputs]

    def stderr_of(v: V):
        if not v.num:
            return np.full(n, None, dtype=object)
        total = np.zeros(n)
        for k, d in v.grad.items():
            total = total + (d * np.ones(n)) ** 2 * vars_[k]
        return np.array([None if math.isnan(x) else math.sqrt(x) for x in total], dtype=object)

    integer = [c.type == "integer" for c in cq.columns]
    rows = [tuple(_as_int(_py(o.val[i])) if integer[j] else _py(o.val[i]) for j, o in enumerate(outs))
            for i in range(n)]
    errs = None
    if stderrs is not None:
        cols = [stderr_of(o) for o in outs]
        errs = [tuple(c[i] for c in cols) for i in range(n)]
    order_idx = [i for i in range(n) if keep[i]]
    if program.order:
        for spec, desc, nulls_first in reversed(program.order):
            col = [rows[i][spec[1]] for i in range(n)] if spec[0] == "out" else \
                [_py(x) for x in _as_obj(ev(spec))]
            key_ir = program.outputs[spec[1]] if spec[0] == "out" else spec
            rank = program.keys[key_ir[1]].sort_rank if key_ir[0] == "key" else None
            if rank is not None:
                col = [None if v is None else rank[v] for v in col]
            flag_null = int(nulls_first == desc)
            order_idx.sort(key=lambda i: (flag_null, 0) if col[i] is None else (1 - flag_null, col[i]),
                           reverse=desc)
    if program.distinct:
        seen, uniq = set(), []
        for i in order_idx:
            if rows[i] not in seen:
                seen.add(rows[i])
                uniq.append(i)
        order_idx = uniq
    start = program.offset or 0
    end = None if program.limit is None else start + program.limit
    order_idx = order_idx[start:end]
    return [rows[i] for i in order_idx], ([errs[i] for i in order_idx] if errs is not None else None)
