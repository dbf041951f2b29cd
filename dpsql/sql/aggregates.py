"""Aggregate calls → measured quantities (ICML 2019 appendix Table 2 factors).

* ``COUNT(*)``: the predicate's indicator (e_S / 1 factors).
* ``COUNT(x)``: the same with ``x IS NOT NULL`` added.
* ``SUM(x)``: an E factor, ``Values(n, v)`` with v the per-cell value of ``x``.  For a bare
  numeric column that is ``Attribute.cell_values()``: exact for unit bins, the bin midpoint
  for wide bins (the binning error is at most half a bin width per row); for an
  expression of one column (``SUM(CASE WHEN … THEN 1 ELSE 0 END)``) the expression's
  per-cell value.  NULL cells weigh 0, as SQL's SUM skips NULLs.
* ``AVG(x)`` = ``SUM(x) / COUNT(x)`` (two linear queries, a ratio in post-processing).
* ``VARIANCE``/``VAR_SAMP``/``VAR_POP``/``STDDEV``/``STDDEV_SAMP``/``STDDEV_POP``: from the
  first two moments (the E_k factor with k = 2: ``SUM(x²)``, ``SUM(x)``, ``COUNT(x)``).
  On wide bins the midpoints drop the spread inside each bin, so the variance is that of
  the binned data (exact for unit bins).
* ``MEDIAN``, ``percentile_cont``/``percentile_disc … WITHIN GROUP``, ``quantile_cont``,
  ``quantile_disc``, ``quantile``: the per-group histogram of x (an identity factor on x);
  post-processing reads the quantile off the cumulative counts (the P factor).

MIN and MAX are refused: on a noisy histogram the extreme non-empty cell is decided by
noise in near-empty cells, so the answer would look precise and be meaningless.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import DomainViolationError, UnsupportedQueryError
from dpsql.sql.cells import columns_in, literal_value, snippet

__all__ = ["AggCall", "is_aggregate", "parse_aggregate", "QUANTILE_NAMES"]

QUANTILE_NAMES = {"quantile_cont": "cont", "quantile_disc": "disc", "quantile": "disc",
                  "percentile_cont": "cont", "percentile_disc": "disc", "median": "cont"}


@dataclass
class AggCall:
    """One aggregate as written: function, argument, FILTER predicate, quantile level."""

    func: str                       # count | sum | avg | variance | stddev | quantile
    arg: exp.Expr | None      # None for COUNT(*)
    filter: exp.Expr | None
    q: float | None = None
    method: str | None = None       # cont | disc (quantiles); samp | pop (variance)
    node: exp.Expr | None = None
    name: str = ""


def _anon_name(node) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return None


def is_aggregate(node: exp.Expr) -> bool:
    """True for a node that is itself an aggregate call (incl. FILTER / WITHIN GROUP)."""
    if isinstance(node, (exp.Filter, exp.WithinGroup)):
        return True
    if isinstance(node, exp.AggFunc):
        return True
    name = _anon_name(node)
    return name in QUANTILE_NAMES or name in {"count_star", "stddev", "variance", "mode"}


def _quantile_level(node, value_node, pos) -> float:
    ok, q = literal_value(value_node) if value_node is not None else (False, None)
    if not ok or isinstance(q, bool) or not isinstance(q, (int, float)):
        raise UnsupportedQueryError("the quantile level must be a constant number",
                                    position=pos(node), hint="e.g. percentile_cont(0.5)")
    if not 0.0 <= float(q) <= 1.0:
        raise DomainViolationError(f"quantile level {q} is outside [0, 1]", position=pos(node),
                                   hint="use a fraction between 0 and 1")
    return float(q)


def parse_aggregate(node: exp.Expr, pos, words=None, call_pos=None) -> AggCall:
    """Recognise a supported aggregate or raise UnsupportedQueryError naming it (as the user
    wrote it: ``words(node)`` reads the function's name back from the SQL text)."""
    filt = None
    outer = node
    if isinstance(node, exp.Filter):
        filt = node.expression.this if isinstance(node.expression, exp.Where) else node.expression
        node = node.this
    if isinstance(node, exp.WithinGroup):
        fn = node.this
        order = node.expression
        keys = order.expressions if isinstance(order, exp.Order) else [order]
        if len(keys) != 1:
            raise UnsupportedQueryError("WITHIN GROUP needs exactly one ORDER BY expression",
                                        position=pos(node), hint="e.g. WITHIN GROUP (ORDER BY age)")
        arg = keys[0].this if isinstance(keys[0], exp.Ordered) else keys[0]
        if isinstance(keys[0], exp.Ordered) and keys[0].args.get("desc"):
            raise UnsupportedQueryError("descending WITHIN GROUP order is not supported",
                                        position=pos(node), hint="use 1 - q with ascending order")
        if isinstance(fn, (exp.PercentileCont, exp.PercentileDisc)):
            q = _quantile_level(fn, fn.this, pos)
            method = "cont" if isinstance(fn, exp.PercentileCont) else "disc"
            return AggCall("quantile", arg, filt, q, method, outer)
        raise UnsupportedQueryError(f"{snippet(fn)} WITHIN GROUP is not supported", position=pos(node),
                                    hint="use percentile_cont or percentile_disc")
    if isinstance(node, exp.Count):
        arg = node.this
        if arg is None or isinstance(arg, exp.Star):
            return AggCall("count", None, filt, node=outer)
        if node.expressions:
            raise UnsupportedQueryError("COUNT takes one argument", position=pos(node), hint="COUNT(col)")
        ok, v = literal_value(arg)
        if ok:
            # COUNT(1) counts every row; COUNT(NULL) counts none.
            never = exp.Boolean(this=False)
            return AggCall("count", None, filt if v is not None else never if filt is None
                           else exp.And(this=exp.Paren(this=filt), expression=never), node=outer)
        return AggCall("count", arg, filt, node=outer)
    if _anon_name(node) == "count_star":
        return AggCall("count", None, filt, node=outer)
    if isinstance(node, exp.Sum):
        return AggCall("sum", node.this, filt, node=outer)
    if isinstance(node, exp.Avg):
        return AggCall("avg", node.this, filt, node=outer)
    if isinstance(node, (exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop, exp.StddevSamp)):
        method = "pop" if isinstance(node, (exp.VariancePop, exp.StddevPop)) else "samp"
        root = isinstance(node, (exp.Stddev, exp.StddevPop, exp.StddevSamp))
        return AggCall("stddev" if root else "variance", node.this, filt, method=method, node=outer)
    if isinstance(node, exp.Median):
        return AggCall("quantile", node.this, filt, 0.5, "cont", outer)
    if isinstance(node, (exp.PercentileCont, exp.PercentileDisc, exp.Quantile)):
        # DuckDB's quantile_cont(x, q) / quantile_disc(x, q) / quantile(x, q).
        method = "cont" if isinstance(node, exp.PercentileCont) else "disc"
        level = node.args.get("expression") or node.args.get("quantile")
        q = _quantile_level(node, level, pos)
        return AggCall("quantile", node.this, filt, q, method, outer)
    name = _anon_name(node)
    if name in QUANTILE_NAMES:
        args = node.expressions
        if name == "median":
            if len(args) != 1:
                raise UnsupportedQueryError("median takes one argument", position=pos(node), hint="median(col)")
            return AggCall("quantile", args[0], filt, 0.5, "cont", outer)
        if len(args) != 2:
            raise UnsupportedQueryError(f"{name} takes a column and a level", position=pos(node),
                                        hint=f"{name}(col, 0.5)")
        return AggCall("quantile", args[0], filt, _quantile_level(node, args[1], pos),
                       QUANTILE_NAMES[name], outer)
    if isinstance(node, (exp.Min, exp.Max)):
        word = "MIN" if isinstance(node, exp.Min) else "MAX"
        raise UnsupportedQueryError(
            f"{word} is not supported: the extreme value of a noisy histogram is decided by noise",
            position=pos(node),
            hint="use a quantile instead, e.g. percentile_disc(0.99) WITHIN GROUP (ORDER BY col)")
    label = words(node) if words is not None and isinstance(node, exp.Func) else \
        node.sql_name().lower() if isinstance(node, exp.Func) else snippet(node)
    raise UnsupportedQueryError(f"aggregate {label} is not supported",
                                position=(call_pos or pos)(node),
                                hint="supported: COUNT, SUM, AVG, VARIANCE, STDDEV, MEDIAN, "
                                     "percentile_cont/disc, quantile_cont/disc")


def check_argument(call: AggCall, pos) -> None:
    """Aggregates over constants or several columns cannot be expressed per cell."""
    if call.arg is None:
        return
    cols = columns_in(call.arg)
    names = {c.name.lower() for c in cols}
    if not cols:
        raise UnsupportedQueryError(f"{snippet(call.node)} aggregates a constant", position=pos(call.node),
                                    hint="aggregate a column, or use COUNT(*)")
    if len(names) > 1:
        raise UnsupportedQueryError(f"{snippet(call.node)} combines several columns inside an aggregate",
                                    position=pos(call.node),
                                    hint="aggregate one column at a time; move conditions to FILTER/WHERE")
    for sub in call.arg.walk():
        if sub is not call.arg and is_aggregate(sub):
            raise UnsupportedQueryError("aggregates cannot be nested", position=pos(sub),
                                        hint="compute the inner aggregate in a separate query")
