"""Fine ordered columns through SQL (issue 35 item 4): quantiles, CDF and range counts over
an integer, date or timestamp column of 10⁴–10⁶ cells, planned by a tree or the Toeplitz
square root of the prefix matrix (``dpsql.plan.ordered``), measured by the engine like any
release (``Engine.measure_strategy``: preview, count, durable charge, noise, release) and
answered here in closed form (``dpsql.measure.ordered.OrderedEstimate``).

Two arrows of the pipeline change for such a column, both from public metadata only:

* **workload**: a quantile over a large ordered attribute is read from the estimated
  CDF, so the workload asks for every prefix (``Prefix``) instead of every cell (an
  identity over 10⁵ cells is a model no planner can fit, and what a quantile's interval
  needs is the CDF's accuracy).  A workload holding such a prefix is planned by
  ``opt_ordered`` (``plan.planner``);
* **answers**: a statement whose every linear query is a thin query on that attribute
  (a COUNT with ``x <= c`` or ``BETWEEN``, a quantile, over the values when the column is
  nullable), its other factors on the release's group attributes (a GROUP BY's identity,
  a WHERE's predicate vector) or summed out, is answered from the ordered release: each
  output row's cells are a combination c of the group cells' estimates
  (``OrderedEstimate.select``), its values have their exact variances, and a quantile's
  95% interval comes from that row's noisy CDF band with the exact variance of C_j − q·N
  (``OrderedEstimate.quantile``), not from cells taken as independent.  Anything else
  takes the model's path (and its refusals).

A quantile per group (``GROUP BY sex``) or under a filter on other columns (``WHERE sex =
'F'``) asks for the prefixes Kron'd with the same group or predicate factor, so the planner
measures the column per cell of those columns (``plan.ordered``, ``MAX_GROUPS``).
"""

from __future__ import annotations

import io
import math
import zipfile
from typing import Any

import numpy as np

from dpsql import linalg
from dpsql.linalg import kron_terms

__all__ = ["workload_matrix", "answer_ordered", "is_ordered_strategy", "is_ordered_payload",
           "ORDERED_KINDS", "MAX_ROWS"]

#: Attribute kinds whose cells are ordered values (a CDF means something over them).
ORDERED_KINDS = ("integer", "date", "timestamp", "time")

#: The most rows one linear query may ask of the ordered release (each is a dense row over
#: the column's cells): a GROUP BY over every cell takes the identity's closed form instead.
MAX_ROWS = 512


def is_ordered_strategy(strategy) -> bool:
    """An ``OrderedStrategy`` (plan/ordered.py), told without importing the planner: a
    process that only answers never imports it (issue 17)."""
    return type(strategy).__name__ == "OrderedStrategy"


def is_ordered_payload(payload: bytes) -> bool:
    """Whether a release payload is an ordered release (``measure.ordered.pack``): read
    from the npz's member names, without importing the planner."""
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        return "__ordered__.npy" in z.namelist()


def _large_cells() -> int:
    from dpsql.plan.gram import LARGE_CELLS    # the planner's threshold, read where used
    return int(LARGE_CELLS)


def _ordered_axis(schema, factors) -> int | None:
    """The one large ordered attribute a Kronecker term asks about (not a Total), when there
    is exactly one; else None.  Its other factors may ask about small attributes."""
    large = _large_cells()
    axes = [i for i, f in enumerate(factors) if not isinstance(f, linalg.Total)
            and schema.attributes[i].kind in ORDERED_KINDS and schema.attributes[i].size > large]
    return axes[0] if len(axes) == 1 else None


def _values_then_null(values: np.ndarray) -> bool:
    """The cells' values are finite, but for a NULL cell (NaN) at the end."""
    m = int(np.isfinite(values).sum())
    return m > 0 and bool(np.all(np.isfinite(values[:m])))


def _mask_range(masks, n: int) -> tuple[int, int] | None:
    """The run of cells ``start..end−1`` a quantile's WHERE on its own column keeps (``x <= c``
    a prefix, ``x >= c`` or ``BETWEEN`` a range: the column's cells are in order), (0, n) when
    it keeps all; None for any other mask (gaps, several masks), which the ordered release
    does not answer."""
    if masks is None:
        return 0, n
    if len(masks) != 1:
        return None
    m = np.asarray(masks[0], dtype=bool)
    kept = np.flatnonzero(m)
    if kept.size == 0 or kept[-1] - kept[0] + 1 != kept.size:
        return None
    return int(kept[0]), int(kept[-1]) + 1


class _CellRun:
    """A quantile estimate over the cells ``start..end−1`` only (a WHERE on the column itself
    that keeps a run of its cells): ``OrderedEstimate.quantile`` over those cells, its band's
    variances exact (the CDF of the run is C_j − C_{start−1}, N = C_{end−1} − C_{start−1};
    ``OrderedEstimate._rank_sd``).  The values, low and high the caller passes are per cell
    from cell 0, as for the whole column."""

    def __init__(self, estimate, start: int, end: int) -> None:
        self.estimate, self.start, self.end = estimate, start, end

    def quantile(self, q, values, method="disc", *, low=None, high=None, cells=None, **kw):
        end = self.end if cells is None else min(self.end, int(cells))
        if end <= self.start:
            return None, (math.nan, math.nan)      # the run holds only the NULL cell: no value

        def cut(a):
            return None if a is None else np.asarray(a)[self.start:end]
        return self.estimate.quantile(q, cut(values), method, low=cut(low), high=cut(high), cells=end,
                                      start=self.start, **kw)


def workload_matrix(schema, lq) -> Any:
    """The matrix the workload plans for linear query ``lq``: a quantile over a large
    ordered attribute (one term, the identity on it, not grouped by its own bins) asks for
    the prefixes of that attribute, Kron'd with its other factors (a GROUP BY's identity, a
    WHERE's predicate); every other query for itself."""
    if lq.kind != "quantile" or lq.layout.quantile_group_map is not None:
        return lq.matrix
    terms = kron_terms(lq.matrix)
    if len(terms) != 1:
        return lq.matrix
    w, factors = terms[0]
    i = _ordered_axis(schema, factors)
    if i is None:
        # under a predicate on another fine column (engine/direct.py: that column merged
        # into the predicate's runs): the one large ordered column the identity is on
        large = _large_cells()
        on = [j for j, f in enumerate(factors) if isinstance(f, linalg.Identity)
              and schema.attributes[j].kind in ORDERED_KINDS and schema.attributes[j].size > large]
        i = on[0] if len(on) == 1 else None
    if i is None or not isinstance(factors[i], linalg.Identity):
        return lq.matrix
    factors = list(factors)
    factors[i] = linalg.Prefix(factors[i].shape[1])
    out = linalg.Kron(factors) if len(factors) > 1 else factors[0]
    return out if w == 1.0 else linalg.Weighted(float(w), out)


def _group_rows(factors, groups: list[int]) -> np.ndarray:
    """The combination of group cells each output row reads: the Kron of the term's factors
    on the group attributes (domain order), a Total one for a group summed out."""
    C: np.ndarray = np.ones((1, 1))
    for j in groups:
        C = np.kron(C, np.atleast_2d(np.asarray(factors[j].dense(), dtype=np.float64)))
    return C


def _arranged(schema, rows: np.ndarray, factors, k: int, groups: list[int]) -> np.ndarray:
    """Output rows × the column's rows (``rows``, group rows row-major in domain order) as
    the Kron term's row order: the column's axis among the groups' in domain order."""
    sizes = [factors[j].shape[0] for j in groups]
    t = rows.reshape(sizes + [rows.shape[1]])
    return np.moveaxis(t, -1, sum(1 for j in groups if j < k)).reshape(-1)


def _bucket_runs(f) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(first cell, last cell, non-empty) of each row of a ``Bucket`` whose rows each sum a
    run of consecutive cells (a GROUP BY of the column, kept to a range by its WHERE), or
    None when some row has a gap.  Public: the query's structure only."""
    mapping = np.asarray(f.mapping)
    r, n = f.shape
    cells = np.flatnonzero(mapping >= 0)
    rows = mapping[cells]
    lo = np.full(r, n, dtype=np.int64)
    hi = np.full(r, -1, dtype=np.int64)
    np.minimum.at(lo, rows, cells)
    np.maximum.at(hi, rows, cells)
    count = np.bincount(rows, minlength=r)
    used = count > 0
    if np.any(count[used] != hi[used] - lo[used] + 1):
        return None
    return np.where(used, lo, 0), np.where(used, hi, 0), used


def _run_sums(group_cells: np.ndarray, unit, lo: np.ndarray, hi: np.ndarray,
              used: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Each group's sum over every run lo..hi (0 for an empty row) and one group's variance
    of it, in closed form: a cell's variance when every run is one cell (a GROUP BY of each
    of 10⁵ values; no dense 10⁵×10⁵ matrix, issue 35), else ``ranges`` for at most
    ``MAX_ROWS`` runs; None beyond."""
    cum = np.concatenate([np.zeros((group_cells.shape[0], 1)), np.cumsum(group_cells, axis=1)], axis=1)
    base = np.where(used[None, :], cum[:, hi + 1] - cum[:, lo], 0.0)
    var = np.zeros(lo.size)
    if np.all(hi[used] == lo[used]):
        var[used] = unit.cell_variance()[lo[used]]
    elif lo.size <= MAX_ROWS:
        var[used] = unit.ranges(lo[used], hi[used])[1]
    else:
        return None
    return base, var


def answer_ordered(schema, estimate, compiled):
    """(answers, stderrs) of every linear query of ``compiled`` from the ordered release's
    ``estimate``, or None when some query is not a thin query on its attribute whose other
    factors lie on the release's groups.  ``answers`` is a ``postprocess.Answers`` whose
    ``cdfs`` name, per quantile query, the estimate of each output group (their intervals
    come from its band)."""
    from dpsql.sql.postprocess import Answers

    if compiled.offset_queries:
        return None
    strategy = estimate.strategy
    names = list(schema.domain.attributes)
    if strategy.attribute not in names or any(a not in names for a in strategy.groups):
        return None
    k = names.index(strategy.attribute)
    groups = [names.index(a) for a in strategy.groups]
    if tuple(schema.domain[a] for a in strategy.groups) != strategy.group_shape:
        return None
    unit = estimate.select(np.eye(strategy.group_cells)[0])    # one group's variances
    answers, stderrs = Answers(), {}
    for lq in compiled.linear_queries:
        terms = kron_terms(lq.matrix)
        if lq.blocks != 1 or len(terms) != 1:
            return None      # rows summed across blocks would add correlated variances
        w, factors = terms[0]
        if any(not isinstance(g, linalg.Total) for j, g in enumerate(factors) if j != k and j not in groups):
            return None
        f = factors[k]
        if not isinstance(f, (linalg.Total, linalg.Identity)) and _ordered_axis(schema, factors) != k:
            return None
        C = _group_rows(factors, groups)
        if C.shape[0] > MAX_ROWS:
            return None
        scale = (C * C).sum(axis=1)                   # Σ c_g² per output row
        if lq.kind == "quantile":
            column = schema.attribute(strategy.attribute)
            # per cell, read only for quantiles; a time column's periods are in order, the
            # NULL cell last, by construction (temporal.Temporal)
            values = column.cell_values() if column.kind == "integer" else None
            run = _mask_range(lq.cell_masks, estimate.n)
            if not isinstance(f, linalg.Identity) or w != 1.0 or lq.layout.quantile_group_map is not None \
                    or run is None or (values is None and column.kind == "integer") \
                    or (values is not None and not _values_then_null(values)):
                return None
            views = [estimate.select(c) for c in C]
            answers[lq.name] = _arranged(schema, np.stack([v.cells for v in views]), factors, k, groups)
            if run != (0, estimate.n):
                views = [_CellRun(v, *run) for v in views]
            stderrs[lq.name] = _arranged(schema, np.sqrt(scale[:, None] * unit.cell_variance()[None, :]),
                                         factors, k, groups)
            answers.cdfs[lq.name] = views[0] if len(views) == 1 else views
            continue
        if isinstance(f, linalg.Identity):
            base, var = estimate.group_cells, unit.cell_variance()
        elif isinstance(f, linalg.Bucket) and (runs := _bucket_runs(f)) is not None:
            got = _run_sums(estimate.group_cells, unit, *runs)
            if got is None:
                return None
            base, var = got
        elif f.shape[0] <= MAX_ROWS:
            F = np.atleast_2d(np.asarray(f.dense(), dtype=np.float64))
            base, var = estimate.group_cells @ F.T, unit.answer(F)[1]
        else:
            return None
        a = w * (C @ base)
        v = w * w * scale[:, None] * np.maximum(var, 0.0)[None, :]
        answers[lq.name] = _arranged(schema, a, factors, k, groups)
        stderrs[lq.name] = _arranged(schema, np.sqrt(v), factors, k, groups)
    return answers, stderrs
