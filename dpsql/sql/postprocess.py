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
block variances (or the variance of the blocks' sum when the caller gives one per row); AVG,
(1/c)²·var(s) + (s/c²)²·var(c).  An output expression f of aggregates a_i gets
var ≈ Σ (∂f/∂a_i)² var(a_i), with the partials propagated forward through the arithmetic.
The approximation treats the aggregates as independent and f as linear near the estimate;
it is poor when a denominator's standard error is comparable to
the denominator itself.  Quantiles: a 95% interval from the noisy CDF's confidence band,
inverted and widened to whole bins (:func:`quantile_interval`), reported as the standard
error whose ±Z95 holds it.  Group keys carry no standard error (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import Error, InterfaceError, PrivacyViolationError, UnsupportedQueryError
from dpsql.sql.aggregates import is_aggregate
from dpsql.sql.cells import DimRef, columns_in, literal_value, position_literal, snippet
from dpsql.sql.ir import (Agg, Call, Case, Cast, Expr, Key, Lit, Op, Output, SortKey, divide, interval,
                          is_exact_integer, uses)
from dpsql.sql.relation import Evaluator, Relation, V, as_obj, py_value, select_rows, take
from dpsql.sql.scalars import SCALARS, as_case, cast_type, check_arity, check_divisor, check_ordered, operands

__all__ = ["Answers", "AggPlan", "Program", "Restriction", "to_ir", "run_program", "evaluate_program",
           "quantile_from_histogram", "quantile_interval", "quantile_variance"]


@dataclass
class AggPlan:
    """How one aggregate is computed from linear-query answers."""

    kind: str                       # count | sum | avg | variance | stddev | quantile
    label: str
    queries: list[str]
    q: float | None = None
    method: str | None = None
    cell_values: np.ndarray | None = None
    scale: float = 1.0              # SUM(c) of a constant c is c·COUNT(*)
    # quantiles: the range of values in each cell (its bin), which the interval includes
    cell_low: np.ndarray | None = None
    cell_high: np.ndarray | None = None
    # SUM/AVG over wide bins: the linear query Σ rows' half bin widths (bounds the binning
    # error), and the widest half bin of the column (bounds AVG's and STDDEV's)
    bias_query: str | None = None
    halfwidth: float = 0.0
    # SUM/AVG over wide bins: the rows' offsets from their bins' values (kind "offset"),
    # added where they were measured (then no bound: the SUM is unbiased)
    offset_query: str | None = None
    # a time column's quantile: its output type ("date" or "timestamp"; the value is
    # temporal.time_number's, converted when the rows are made) and whether its numbers are days
    time_type: str | None = None
    time_days: bool = False


@dataclass
class Program:
    outputs: list[Expr]
    having: Expr | None
    order: list[SortKey]
    limit: int | None
    offset: int | None
    distinct: bool
    aggs: list[AggPlan]
    keys: list
    grouping: Any
    lq_by_name: dict = field(default_factory=dict)
    restrictions: list = field(default_factory=list)
    # The WHERE clause's disjoint boxes (attribute → cell mask): public, kept for tests that
    # mimic SQL's omission of empty groups.
    where_terms: list = field(default_factory=lambda: [{}])
    # Joined key attributes (joins.JoinedAttribute by name): the grouping and where_terms
    # are over their cells; joins.expand_linear maps a query built on them to the table's.
    joined: dict = field(default_factory=dict)

    def evaluate(self, cq, answers, stderrs, present=None) -> Relation:
        return evaluate_program(self, cq, answers, stderrs, present)


# --- SQL → IR --------------------------------------------------------------------------

_BINARY = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.IntDiv: "/", exp.Mod: "%",
           exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
           exp.And: "and", exp.Or: "or"}


def order_items(tree, columns, ir, pos) -> list[SortKey]:
    """The statement's ORDER BY as sort keys: a position or an output column's name sorts by
    that output (:class:`~dpsql.sql.ir.Output`), anything else by ``ir(node)``.  NULLs sort
    as larger than any value unless NULLS FIRST/LAST says otherwise (PostgreSQL)."""
    order = tree.args.get("order")
    if order is None:
        return []
    names = {c.name.lower(): i for i, c in reversed(list(enumerate(columns)))}
    out = []
    for o in order.expressions:
        node = o.this
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        if nulls_first is None:
            nulls_first = desc
        v = position_literal(node, len(columns), "ORDER BY", pos)
        if v is not None:
            out.append(SortKey(Output(v - 1), desc, bool(nulls_first)))
            continue
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in names:
            out.append(SortKey(Output(names[node.name.lower()]), desc, bool(nulls_first)))
            continue
        out.append(SortKey(ir(node), desc, bool(nulls_first)))
    return out


_CALLS = (exp.Round, exp.Abs, exp.Floor, exp.Ceil, exp.Coalesce, exp.Greatest, exp.Least,
          exp.Sqrt, exp.Ln)


def _constant(e: Expr) -> tuple[bool, Any]:
    """(True, value) for an expression of constants (``1 + 1``), evaluated once; (False, None)
    when it reads an aggregate or a group key."""
    if uses(e, lambda x: isinstance(x, (Agg, Key))):
        return False, None
    v = py_value(as_obj(Evaluator(1, [], [])(e))[0])
    return True, int(v) if v is not None and is_exact_integer(e, lambda i: "") else v


def to_ir(node, low) -> Expr:
    """Translate an output expression; aggregates and group keys become leaves."""
    if isinstance(node, exp.Paren):
        return to_ir(node.this, low)
    if is_aggregate(node):
        return Agg(low.register(node))
    has_cols = bool(columns_in(node))
    if has_cols and not any(is_aggregate(n) for n in node.walk()):
        c = low.canon(node)
        if c in low.key_index:
            return Key(low.key_index[c])
    ok, v = literal_value(node)
    if ok:
        return Lit(v)
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
    if isinstance(node, DimRef):
        # a joined table's column (or a joined key), neither grouped nor aggregated: one value
        # per row of the private table, refused as a bare private column is (not as an
        # unknown function: the rewrite's node is not something the user wrote)
        raise PrivacyViolationError(
            f"column \"{node.shown}\" must appear in GROUP BY or be used in an aggregate function: "
            "a bare column of a joined row would reveal individual rows of the private table",
            position=low.pos(node),
            hint=f"add it to GROUP BY (GROUP BY {node.shown}) or aggregate (e.g. COUNT(*))")
    if type(node) in _BINARY:
        if isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)):
            try:       # one rule with the cells' (cells.CellEvaluator._arith)
                check_divisor(*literal_value(node.expression))
            except Error as err:
                err.position = low.pos(node)
                raise
        args = (to_ir(node.this, low), to_ir(node.expression, low))
        key_type = lambda i: low.keys[i].type  # noqa: E731
        if isinstance(node, exp.Div) and node.args.get("typed") and all(is_exact_integer(a, key_type) for a in args):
            # PostgreSQL divides integers by truncation; only exact (non-noisy) integers qualify.
            return Op("int/", args)
        if _BINARY[type(node)] in ("<", "<=", ">", ">="):
            try:        # before anything is measured; the rule of scalars.compare on each row
                check_ordered(*(low.ir_type(a) for a in args))
            except Error as err:
                err.position = low.pos(node)
                raise
        return Op(_BINARY[type(node)], args)
    if isinstance(node, exp.Neg):
        return Op("neg", (to_ir(node.this, low),))
    if isinstance(node, exp.Not):
        return Op("not", (to_ir(node.this, low),))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        test = Op("isnull", (to_ir(node.this, low),))
        return Op("not", (test,)) if node.args.get("negate") else test
    if isinstance(node, exp.Between):
        x, lo, hi = to_ir(node.this, low), to_ir(node.args["low"], low), to_ir(node.args["high"], low)
        inside = Op("and", (Op(">=", (x, lo)), Op("<=", (x, hi))))
        if node.args.get("symmetric"):
            return Op("or", (inside, Op("and", (Op(">=", (x, hi)), Op("<=", (x, lo))))))
        return inside
    if isinstance(node, exp.Round):
        # the decimal places are checked once, for cells and values alike (the table's check)
        check_arity("round", len(operands(node)))
        digits = node.args.get("decimals")
        if digits is None:
            return Call("round", (to_ir(node.this, low),))
        ok, d = literal_value(digits)
        if not ok:
            ok, d = _constant(to_ir(digits, low))
        try:
            places = SCALARS["round"].checked(ok, d, snippet(node))
        except Error as err:
            err.position = low.pos(digits)
            raise
        return Call("round", (to_ir(node.this, low), Lit(places)))
    if isinstance(node, exp.Cast):
        try:
            cast_type(node.to.this)
        except Error as err:
            err.position = low.pos(node.to)
            raise
        return Cast(to_ir(node.this, low), node.to.this)
    if isinstance(node, _CALLS):
        nodes = operands(node)
        name = type(node).__name__.lower()
        if name in SCALARS:
            check_arity(name, len(nodes))
        return Call(name, tuple(to_ir(a, low) for a in nodes))
    if isinstance(node, exp.TimeToStr):
        # to_char(key, 'YYYY-MM') over a group key (Looker's month: TO_CHAR(DATE_TRUNC(…)))
        fmt = node.args.get("format")
        try:
            ok, v = literal_value(fmt) if fmt is not None else (False, None)
            checked = SCALARS["to_char"].checked(ok, v, snippet(node))
        except Error as err:
            err.position = low.pos(fmt if fmt is not None else node)
            raise
        return Call("to_char", (to_ir(node.this, low), Lit(checked)))
    if as_case(node) is not None:     # NULLIF, IF: the CASE they are (as on cells)
        return to_ir(as_case(node), low)
    if isinstance(node, exp.Case):
        if node.this is not None:
            subject = node.this
            branches = tuple((to_ir(exp.EQ(this=subject.copy(), expression=b.this.copy()), low),
                              to_ir(b.args["true"], low)) for b in node.args.get("ifs") or [])
        else:
            branches = tuple((to_ir(b.this, low), to_ir(b.args["true"], low)) for b in node.args.get("ifs") or [])
        default = node.args.get("default")
        return Case(branches, to_ir(default, low) if default is not None else None)
    label = f"function {low.written(node)}" if isinstance(node, exp.Func) else f"'{snippet(node, 60)}'"
    raise UnsupportedQueryError(f"{label} is not supported in the select list, HAVING or ORDER BY",
                                position=low.call_pos(node) if isinstance(node, exp.Func) else low.pos(node),
                                hint="use arithmetic, comparisons, CASE, ROUND, ABS, COALESCE on aggregates")


# --- evaluation ------------------------------------------------------------------------

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


# The two-sided 95% normal quantile (dpsql.engine.variance.Z95, which front ends multiply a
# standard error by): each end of a quantile's interval fails with at most 2.5%.
Z95 = NormalDist().inv_cdf(0.975)


def _sorted_cells(hist, var, values, low, high):
    keep = ~np.isnan(values)
    v = np.asarray(values, dtype=float)[keep]
    lo = v if low is None else np.asarray(low, dtype=float)[keep]
    hi = v if high is None else np.asarray(high, dtype=float)[keep]
    order = np.argsort(v, kind="stable")
    # unclipped: a noisy count's cumulative sums are unbiased only with their negative
    # values (clipping them to 0, as the point estimate does, inflates the thin tail)
    h = np.asarray(hist, dtype=float)[keep][order]
    w = np.asarray(var, dtype=float)[keep][order]
    return h, w, v[order], lo[order], hi[order]


def quantile_interval(hist: np.ndarray, var: np.ndarray, values: np.ndarray, q: float, *,
                      low: np.ndarray | None = None, high: np.ndarray | None = None,
                      z: float = Z95) -> tuple[float, float]:
    """A 95% confidence interval for the q-quantile of the *unbinned* data, from a noisy
    histogram: the noisy CDF's confidence band inverted, widened to whole cells.

    Cells are ordered by their representative ``values``; cell j holds the values in
    [``low[j]``, ``high[j]``] (its bin; the value itself for a one-value cell).  The true
    quantile lies in the cell j* where the true cumulative count C first reaches q·N, or
    (percentile_cont) between it and a neighbour within one count of that rank.  With the
    cells' errors independent with variances ``var``, D_j = C_j − q·N has standard deviation
    sd_j = sqrt((1 − q)²·Var(C_j) + q²·Var(N − C_j)), and

    * j* reaches q·N, so its band reaches it:      D̂_j + z·sd_j ≥ −1  (fails w.p. ≤ 2.5%);
    * the cell before j* does not, so its band doesn't surely: D̂_{j−1} − z·sd_{j−1} < 1
      (fails w.p. ≤ 2.5%).

    Every cell passing both is plausible (the ±1 is the one count of slack between a rank
    and q·N); the interval is [lowest low, highest high] over them, so the bin width is in
    it and it has width 0 only when a single one-value cell is plausible.  The counts are
    used as released, negative ones included: their sums are unbiased, which the clipped
    histogram the point estimate reads is not (under heavy noise it moves a 90th percentile
    well into the tail; with clipped sums a simulated 95% interval covered 85%).  (−inf, inf) when
    a cell is unsupported (infinite variance), NaNs when a variance is unknown or N ≤ 0.
    """
    h, w, v, lo, hi = _sorted_cells(hist, var, values, low, high)
    if len(v) and np.any(np.isinf(w)):
        return -math.inf, math.inf
    if len(v) == 0 or np.any(np.isnan(w)) or np.clip(h, 0.0, None).sum() <= 0:
        return math.nan, math.nan
    cum, vcum = np.cumsum(h), np.cumsum(w)
    sd = np.sqrt((1 - q) ** 2 * vcum + q ** 2 * np.maximum(vcum[-1] - vcum, 0.0))
    return quantile_band(cum, sd, lo, hi, q, z=z)


def quantile_band(cum: np.ndarray, sd: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: float,
                  *, z: float = Z95) -> tuple[float, float]:
    """:func:`quantile_interval` from the noisy CDF itself: ``cum`` the cumulative counts of
    cells in value order (bins [lo, hi]), ``sd`` the standard deviation of each
    D_j = C_j − q·N (correlated estimates, e.g. a tree's or a factored strategy's, give
    it directly; independent cells as above)."""
    d = cum - q * cum[-1]
    reaches = d + z * sd >= -1.0
    surely = d - z * sd >= 1.0
    before = np.concatenate([[False], surely[:-1]])
    plausible = np.flatnonzero(reaches & ~before)
    if len(plausible) == 0:      # not even the last cell (rounding): the whole range
        return float(np.min(lo)), float(np.max(hi))
    return float(np.min(lo[plausible])), float(np.max(hi[plausible]))


def quantile_variance(hist: np.ndarray, var: np.ndarray, values: np.ndarray, q: float,
                      x: float, *, low: np.ndarray | None = None,
                      high: np.ndarray | None = None) -> float:
    """The squared "standard error" a quantile x reports: (h / Z95)² for the half-width h of
    the symmetric interval around x that holds :func:`quantile_interval` (so that every
    front end's ``± Z95·stderr`` is that 95% interval, bin width included).  Infinite when a
    cell is unsupported, NaN when a variance is unknown."""
    if not math.isfinite(x):
        return math.nan
    a, b = quantile_interval(hist, var, values, q, low=low, high=high)
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        return math.inf
    half = max(x - a, b - x, 0.0)
    return (half / Z95) ** 2


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
        # one error per block and row, or per row: the blocks' sum's (their covariances in
        # it, engine.results._block_sum), which the sums over blocks below take as it is
        var = np.asarray(stderrs[lq.name], dtype=float).reshape(-1, rows) ** 2
    return a.reshape(lq.blocks, rows), var


def _histograms(lq, a: np.ndarray, groups: int) -> np.ndarray:
    layout = lq.layout
    names = [n for n, _ in layout.axes]
    sizes = [k for _, k in layout.axes]
    k = names.index(layout.quantile_attr)
    total = np.zeros(sizes)
    for b in range(lq.blocks):
        total = total + a[b].reshape(sizes) * lq.cell_masks[b].reshape(
            [-1 if i == k else 1 for i in range(len(sizes))])
    t = np.moveaxis(total, k, -1)
    if layout.quantile_group_map is None:
        return t.reshape(groups, sizes[k])
    qmap = np.asarray(layout.quantile_group_map)
    nb = int(qmap.max()) + 1
    parts = [t * (qmap == b) for b in range(nb)]
    h = np.stack(parts, axis=k)
    return h.reshape(groups, sizes[k])


def _aggregate_values(program: Program, answers, stderrs, groups: int):
    vals, vars_, biases = [], [], []
    cache = {}
    for plan in program.aggs:
        got = []
        # measured offsets make a SUM/AVG unbiased: no bound then (its query is not answered)
        offsets = plan.offset_query is not None and plan.offset_query in answers
        bias_query = None if offsets else plan.bias_query
        for name in plan.queries + ([bias_query] if bias_query else []):
            if name not in cache:
                cache[name] = _answers(program.lq_by_name[name], answers, stderrs)
            got.append(cache[name])
        bound = got.pop() if bias_query else None
        if offsets:
            (a, var), (o, vo) = got[0], _answers(program.lq_by_name[plan.offset_query], answers, stderrs)
            # SUM(x) = Σ v_c·n_c + Σ (x − v_c): independent noise, so the variances add
            got[0] = (a + o, None if var is None or vo is None
                      else var.sum(axis=0, keepdims=True) + vo.sum(axis=0, keepdims=True))
            biases.append(np.zeros(groups))
        else:
            biases.append(_binning_bound(plan, got, bound, groups))
        if plan.kind in ("count", "sum"):
            a, var = got[0]
            vals.append(plan.scale * a.sum(axis=0))
            vars_.append(plan.scale ** 2 * var.sum(axis=0) if var is not None else np.full(groups, np.nan))
        elif plan.kind == "null":
            vals.append(np.full(groups, np.nan))
            vars_.append(np.full(groups, np.nan))
        elif plan.kind == "avg_const":
            # AVG(c) = c wherever the (noisy) count is positive; exact, so no error.
            c = got[0][0].sum(axis=0)
            vals.append(np.where(c > 0, plan.scale, np.nan))
            vars_.append(np.where(c > 0, 0.0, np.nan))
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
            # a quantile's plan carries its cells' values, q and method (_plan_aggregate)
            assert plan.cell_values is not None and plan.q is not None and plan.method is not None
            cdf = getattr(answers, "cdfs", {}).get(lq.name)
            if cdf is not None:
                x, v = _quantile_from_cdf(cdf, plan, groups)
                vals.append(x)
                vars_.append(v)
                continue
            hist = _histograms(lq, a, groups)
            out = np.array([np.nan if (r := quantile_from_histogram(hist[g], plan.cell_values, plan.q,
                                                                     plan.method)) is None else r
                            for g in range(groups)])
            # The masks are 0/1, so the same masked sum adds the cells' variances.
            vh = _histograms(lq, var, groups) if var is not None else None
            vals.append(out)
            vars_.append(np.array([np.nan if vh is None or np.isnan(out[g]) else
                                   quantile_variance(hist[g], vh[g], plan.cell_values, plan.q, out[g],
                                                     low=plan.cell_low, high=plan.cell_high)
                                   for g in range(groups)]))
    return vals, vars_, biases


class Answers(dict):
    """Linear query name → answers, plus ``cdfs``: per quantile query answered from an
    estimate with correlated cells (``dpsql.measure.ordered.OrderedEstimate``, issue 35),
    that estimate (or a list, one per group), whose ``quantile(q, values, method, low=, high=)`` gives the point and
    the 95% interval of its noisy CDF's band (the cells' variances alone would treat them
    as independent)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cdfs: dict[str, Any] = {}


def _quantile_from_cdf(cdf, plan, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's quantile and its squared "standard error" (the interval's half-width
    over Z95, as :func:`quantile_variance`) from a correlated CDF estimate (one, or one per
    group in the order of :func:`_histograms`), over the cells with a value (a NULL cell,
    NaN-valued, comes last and is left out); NaN where the values are not one increasing
    value per cell (no interval is claimed then)."""
    cdfs = list(cdf) if isinstance(cdf, (list, tuple)) else [cdf]
    v = np.asarray(plan.cell_values, dtype=float)
    m = int(np.isfinite(v).sum())
    if len(cdfs) != groups or m == 0 or not np.all(np.isfinite(v[:m])) or np.any(np.diff(v[:m]) < 0):
        return np.full(groups, np.nan), np.full(groups, np.nan)
    low = None if plan.cell_low is None else np.asarray(plan.cell_low, dtype=float)[:m]
    high = None if plan.cell_high is None else np.asarray(plan.cell_high, dtype=float)[:m]
    xs, var = np.full(groups, np.nan), np.full(groups, np.nan)
    for g, one in enumerate(cdfs):
        x, (a, b) = one.quantile(plan.q, v[:m], plan.method, low=low, high=high, cells=m)
        if x is not None and math.isfinite(x):
            xs[g], var[g] = x, (max(x - a, b - x, 0.0) / Z95) ** 2
    return xs, var


# A bound computed from a noisy value holds when that value is within this many standard
# errors of its truth: one-sided normal tail 3.2e-5 (dpsql.engine.bounds.Z_BOUND).
Z_BIAS = 4.0


def _upper(got_one, groups: int) -> np.ndarray:
    """Upper confidence bound (Z_BIAS standard errors) of a non-negative linear query's
    groups; infinite where its standard error is unknown or infinite (unsupported)."""
    a, var = got_one
    a = a.sum(axis=0)
    se = np.sqrt(var.sum(axis=0)) if var is not None else np.full(groups, np.inf)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(se), np.maximum(a, 0.0) + Z_BIAS * se, np.inf)


def _binning_bound(plan: AggPlan, got, bound, groups: int) -> np.ndarray:
    """Per group, a bound on |aggregate of the raw values − aggregate of the cells' values|
    (the binning error over wide bins; docs/sql.md, "Binned values").  Zero for exact
    cell values.  With h(x) the half width of x's bin and B = Σ_rows h ≥ 0 (measured with
    the workload, ``plan.bias_query``): |SUM error| ≤ B; |AVG error| ≤ B / COUNT and ≤ the
    widest half bin h_max; |STDDEV_POP error| ≤ RMS(x − cell value) ≤ h_max (the triangle
    inequality for the centred vectors), √(n/(n−1)) times that for STDDEV_SAMP; VARIANCE
    from STDDEV's by |s_x² − s_v²| ≤ β(2 s_v + β).  B and COUNT are noisy, so B is taken at
    its upper and COUNT at its lower confidence bound (``Z_BIAS``)."""
    zero = np.zeros(groups)
    if plan.halfwidth <= 0:
        return zero
    if plan.kind == "sum":
        return plan.scale * _upper(bound, groups) if bound is not None else np.full(groups, np.inf)
    if plan.kind == "avg":
        (_, _), (c, vc) = got
        c = c.sum(axis=0)
        c_low = c - Z_BIAS * (np.sqrt(vc.sum(axis=0)) if vc is not None else np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(c_low > 0, _upper(bound, groups) / np.where(c_low > 0, c_low, 1.0), np.inf) \
                if bound is not None else np.full(groups, np.inf)
        return np.minimum(ratio, plan.halfwidth)
    if plan.kind in ("variance", "stddev"):
        (s2, v2), (s1, v1), (c, vc) = got
        c = c.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.sqrt(c / np.maximum(c - 1, 1e-300)) if plan.method == "samp" else np.ones_like(c)
            beta = np.where(c > 1, plan.halfwidth * scale, np.inf)
            if plan.kind == "stddev":
                return beta
            v, var = _moments(replace(plan, kind="variance"), [(s2, v2), (s1, v1), (c[None], vc)], groups)
            sd_up = np.sqrt(np.maximum(v, 0.0) + Z_BIAS * np.sqrt(np.where(np.isfinite(var), var, np.inf)))
            return beta * (2 * sd_up + beta)
    return zero


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


def run_program(cq, answers, stderrs, present=None, bounds=None, with_bias=False):
    """Rows and standard-error rows of a compiled query; see the module docstring.

    The standard errors include the bound on the binning error of SUM/AVG/VARIANCE/STDDEV
    over wide bins (``Relation.rows``); ``with_bias`` appends, as the last list, that bound
    per output cell (None where there is none).

    With ``bounds`` (linear query name → (lower, upper) per entry), a third list holds,
    per output cell, its ``(lower, upper)`` range by interval arithmetic (None for
    non-numeric cells, where no finite range follows, and for queries over derived tables;
    see :func:`dpsql.sql.ir.interval`).

    Rows are produced for the listed groups (``cq.groups``: those the WHERE allows).
    ``present`` (a boolean mask over ``cq.groups``, or a dict from ``id(program)`` to such a
    mask for queries with subqueries) drops groups before HAVING.  Only the semantic tests
    pass it, to mimic SQL's omission of empty groups from exact counts; the engine never
    does, because which groups are empty is private.
    """
    # (rows, stderr rows or None[, ranges][, bias]): the tuple grows with what was asked
    out: tuple[list | None, ...]
    if cq.is_explain:
        lines = cq.explain().split("\n")
        out = [(line,) for line in lines], ([(None,) for _ in lines] if stderrs is not None else None)
        out = out if bounds is None else out + ([(None,) for _ in lines],)
        return out + ([(None,) for _ in lines],) if with_bias else out
    if cq.is_schema_probe:
        out = [], ([] if stderrs is not None else None)
        out = out if bounds is None else out + ([],)
        return out + ([],) if with_bias else out
    rel = cq.program.evaluate(cq, answers, stderrs, present)
    out = rel.rows(stderrs is not None)
    out = out if bounds is None else out + (_bound_rows(cq, rel, bounds),)
    return out + (rel.bias_rows(),) if with_bias else out


def evaluate_program(program: Program, cq, answers, stderrs, present=None) -> Relation:
    """The Relation of one aggregate SELECT: aggregates per listed group, restrictions (top-N
    semi-joins), HAVING, the select list, DISTINCT, ORDER BY and OFFSET/LIMIT."""
    groups = program.grouping.size
    vals, vars_, biases = _aggregate_values(program, answers, stderrs, groups)
    tuples = cq.groups
    idx = np.asarray(program.grouping.listed)
    pos = np.arange(len(idx))
    keep_groups = np.ones(len(idx), dtype=bool)
    mine = present.get(id(program)) if isinstance(present, dict) else present
    if mine is not None:
        keep_groups &= np.asarray(mine, dtype=bool)
    for r in program.restrictions:
        keep_groups &= r.mask(tuples, answers, stderrs, present if isinstance(present, dict) else None)
    idx, pos = idx[keep_groups], pos[keep_groups]
    vals = [v[idx] for v in vals]
    vars_ = [v[idx] for v in vars_]
    biases = [b[idx] for b in biases]
    n = len(idx)
    key_cols = [V(np.array([tuples[i][j] for i in pos], dtype=object), None, False)
                for j in range(len(program.keys))]
    ev = Evaluator(n, [V(v, {i: np.ones(n)}) for i, v in enumerate(vals)], key_cols)
    keep = np.ones(n, dtype=bool)
    if program.having is not None:
        h = as_obj(ev(program.having))
        keep = np.array([x is True for x in h], dtype=bool)
    outs = [ev(o) for o in program.outputs]
    types = [c.type for c in cq.columns]
    ranks = [program.keys[o.index].sort_rank if isinstance(o, Key) else None for o in program.outputs]
    # a time column's quantile selected as it is: shown as its date or timestamp
    times = [(program.aggs[o.index].time_type, program.aggs[o.index].time_days)
             if isinstance(o, Agg) and program.aggs[o.index].time_type is not None else None
             for o in program.outputs]
    full = Relation(outs, vars_, types, [c.name for c in cq.columns], ranks, times=times)
    rows, _ = full.rows(False)
    order = []
    for spec in program.order:
        by = spec.by
        col = [r[by.index] for r in rows] if isinstance(by, Output) else [py_value(x) for x in as_obj(ev(by))]
        key_ir = program.outputs[by.index] if isinstance(by, Output) else by
        rank = program.keys[key_ir.index].sort_rank if isinstance(key_ir, Key) else None
        if rank is not None:
            col = [None if v is None else rank[v] for v in col]
        order.append((col, spec.desc, spec.nulls_first))
    chosen = np.asarray(select_rows(rows, keep, order, program.distinct, program.offset, program.limit),
                        dtype=np.int64)
    rel = Relation([take(o, chosen) for o in outs], [v[chosen] for v in vars_], types, full.names, ranks,
                   biases=[b[chosen] for b in biases], times=times)
    # which group and which listed key tuple each row came from (for ranges, run_program)
    rel.group_index, rel.key_position = idx[chosen], pos[chosen]
    return rel


@dataclass
class Restriction:
    """A top-N semi-join: keep the outer groups whose key values appear among the rows of
    ``inner`` (a released, post-processed answer).  ``outer_keys`` index the outer GROUP BY
    keys, ``inner_cols`` the inner query's output columns; ``null_safe`` per pair says
    whether NULL matches NULL (``IS NOT DISTINCT FROM``) or nothing (``=``)."""

    inner: Any
    outer_keys: list[int]
    inner_cols: list[int]
    null_safe: list[bool]

    def mask(self, tuples: list[tuple], answers, stderrs, present=None) -> np.ndarray:
        rows = []
        if not self.inner.is_schema_probe:        # a ranking with LIMIT 0 chooses nothing
            rows, _ = self.inner.program.evaluate(self.inner, answers, stderrs, present).rows(False)
        chosen = {tuple(r[j] for j in self.inner_cols) for r in rows}
        out = np.zeros(len(tuples), dtype=bool)
        for i, t in enumerate(tuples):
            key = tuple(t[k] for k in self.outer_keys)
            if any(v is None and not ns for v, ns in zip(key, self.null_safe)):
                continue       # NULL = anything is never true
            out[i] = key in chosen
        return out


# --- ranges (interval arithmetic) -----------------------------------------------------

def _bound_rows(cq, rel, bounds) -> list[tuple]:
    """Per row and output column of ``rel``: (lower, upper) or None."""
    n, ncol = rel.n, len(rel.cols)
    program = cq.program
    # group_index is set only on the rows of a grouped query (_group_rows)
    gi, kp = rel.group_index, rel.key_position
    if not isinstance(program, Program) or gi is None or kp is None:
        return [(None,) * ncol for _ in range(n)]
    groups = program.grouping.size
    agg_iv = [None if iv is None else (iv[0][gi], iv[1][gi])
              for iv in _aggregate_bounds(program, bounds, groups)]
    tuples = cq.groups
    key_cols = [[tuples[i][j] for i in kp] for j in range(len(program.keys))]
    key_num = [np.array([np.nan if x is None else float(x) for x in col]) if all(
        x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in col) else None
        for col in key_cols]
    ivs = [interval(o, agg_iv, key_num, n) for o in program.outputs]
    return [tuple(None if iv is None or not (np.isfinite(iv[0][i]) or np.isfinite(iv[1][i]))
                  else (float(iv[0][i]), float(iv[1][i])) for iv in ivs) for i in range(n)]


def _aggregate_bounds(program: Program, bounds, groups: int) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """(lower, upper) per group for each aggregate, or None where no range follows."""
    def get(name) -> tuple[np.ndarray, np.ndarray] | None:
        lq = program.lq_by_name[name]
        if lq.always_zero:
            z = np.zeros((lq.blocks, lq.layout.rows))
            return z, z
        if name not in bounds:
            return None
        lo, hi = bounds[name]
        shape = (lq.blocks, lq.layout.rows)
        return np.asarray(lo, float).reshape(shape), np.asarray(hi, float).reshape(shape)

    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for plan in program.aggs:
        maybe = [get(n) for n in plan.queries]
        got = [g for g in maybe if g is not None]
        if plan.kind == "avg_const":
            out.append((np.full(groups, plan.scale), np.full(groups, plan.scale)))
        elif plan.kind == "null" or len(got) < len(maybe):
            out.append(None)
        elif plan.kind in ("count", "sum"):
            lo, hi = plan.scale * got[0][0].sum(axis=0), plan.scale * got[0][1].sum(axis=0)
            out.append((np.minimum(lo, hi), np.maximum(lo, hi)))
        elif plan.kind == "avg":
            s = (got[0][0].sum(axis=0), got[0][1].sum(axis=0))
            c = (got[1][0].sum(axis=0), got[1][1].sum(axis=0))
            lo, hi = divide(s, c)
            v = plan.cell_values[~np.isnan(plan.cell_values)] if plan.cell_values is not None else None
            if v is not None and v.size:  # an average lies within its values' range
                lo = np.clip(lo, v.min(), v.max())
                hi = np.clip(hi, v.min(), v.max())
            out.append((lo, hi))
        elif plan.kind == "quantile" and plan.cell_values is not None:
            v = plan.cell_values[~np.isnan(plan.cell_values)]
            out.append((np.full(groups, float(v.min())), np.full(groups, float(v.max())))
                       if v.size else None)
        else:
            out.append(None)
    return out
