"""A statement's ``Result``: its rows, built from the answers of its linear queries.

``Session.execute`` chooses where a statement is answered from (the ordered release, the
fitted model, an on-demand measurement) and applies the session's policy; this module holds
what follows that choice, the same for every source: each linear query answered from the
model or by least squares with its standard error (``answer_linear``), the ranges of values
the releases do not support (``bound_rows``), the compiled post-processing into rows with
inferred cells flagged (``result_rows``), and the error columns ``SET dpsql.error_columns``
appends (``with_error_columns``).  All of it is post-processing of released measurements:
it reads no data and draws no noise.  It was split out of ``session.py`` (850 lines, over
the ~800 limit) along that seam; the session keeps routing, policy, settings and spending.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpsql.engine.planning import gaussian_sigma2_unit
from dpsql.engine.variance import Z95, cap_stderr, interval_stderr
from dpsql.errors import ProgrammingError
from dpsql.linalg.threads import one_blas_thread

__all__ = ["Column", "Result", "answer_linear", "baseline_stderr", "bound_rows", "error_column_names",
           "model_kind", "result_rows", "type_name", "with_error_columns"]


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "text" | "integer" | "double" | "date" | "timestamp"


@dataclass
class Result:
    """Rows of a private answer with their standard errors.

    ``stderr[i][j]`` is the standard error of ``rows[i][j]`` (None for group keys and exact
    values, NaN for inferred values); ``inferred[i]`` is True when a value of row i came
    from model inference without a supporting measurement, and ``bounds[i][j]`` is then the
    ``(lower, upper)`` range the released measurements imply for that value (None for keys
    and supported values, or where no finite range follows).  ``cost`` is the ρ this
    statement spent."""

    columns: list[Column]
    rows: list[tuple]
    stderr: list[tuple] = field(default_factory=list)
    inferred: list[bool] = field(default_factory=list)
    cost: Fraction = Fraction(0)   # ρ this statement spent, exact
    message: str | None = None   # e.g. "SET" for session commands, EXPLAIN text
    seconds: float = 0.0
    model_version: int = 0
    model: str = ""      # which model answered: "exact junction tree" or "relaxed region graph"
    bounds: list[tuple] = field(default_factory=list)
    # per cell, the bound on the binning error of SUM/AVG/VARIANCE/STDDEV over wide bins that
    # ``stderr`` already includes (stderr = σ + bias/Z95, so ± Z95·stderr is the 95% interval
    # widened by it): such a cell's interval is *bounded*, not a pure 95% CI (None elsewhere)
    bias: list[tuple] = field(default_factory=list)
    # the statement has values whose interval may include a binning bound (``bias``): the
    # wire server announces a ``binned`` flag for it (``CompiledQuery.may_be_binned``)
    binnable: bool = False
    # trailing columns that ``SET dpsql.error_columns`` appended (c_ci95, c_lower, …): derived
    # from stderr and bounds, so their own stderr is None; dpsql.read_sql drops them
    appended: int = 0
    # public remarks printed beside the rows: the rows a people view's bound drops, as
    # released with noise (dpsql/engine/people_truncation.py), when the answer reads such a view
    notes: tuple[str, ...] = ()


def model_kind(model) -> str:
    """Short public description of the fitted model (its structure, never its values)."""
    if model is None:
        return ""
    from dpsql.pgm import RelaxedModel
    return "relaxed region graph" if isinstance(model, RelaxedModel) else "exact junction tree"


def type_name(pg_type: str) -> str:
    """The driver's type code for a PostgreSQL type name from the compiler."""
    t = pg_type.lower()
    if t in ("integer", "bigint", "smallint", "int", "int8", "int4"):
        return "integer"
    if t in ("double precision", "numeric", "real", "float8", "double"):
        return "double"
    if t == "date":
        return "date"
    if t in ("timestamp", "timestamp without time zone"):
        return "timestamp"
    if t in ("time", "time without time zone"):
        return "time"
    return "text"


def baseline_stderr(engine, table: str, matrix) -> float | None:
    """Per row, the standard error of this linear query under the per-query mechanism:
    measured on its own as one of the k linear queries of the table's workload, at the
    workload's budget (the plan report's baseline, ``plan.objective.baseline_variance``).
    None when the table has no workload queries (issue 35 item 6).  Public: the workload,
    the budget and the query's sensitivity."""
    from dpsql.plan.objective import baseline_variance

    state = engine._state(table)
    k = state.workload_rows
    if k is None:
        try:     # the plan's query parts (binning-bound queries the offsets replace are not)
            k = len(engine.workload_for(table)[2]) if engine.config.workload else 0
        except ProgrammingError:
            k = 0                                   # no workload query on this table
        state.workload_rows = k
    rho = engine.workload_rho(table)
    if not k or not rho > 0:
        return None
    laplace = engine.config.noise == "laplace"
    sens = float(matrix.sensitivity(1 if laplace else 2))
    unit_rows = engine.config.sources[table].unit_rows
    return math.sqrt(baseline_variance(sens, k, engine.config.noise)
                     * gaussian_sigma2_unit(float(rho)) * unit_rows ** 2)


# -- linear queries' answers -------------------------------------------------------------------
def answer_linear(engine, compiled, model, variance, least_squares: bool):
    """(answers, stderrs, unsupported) of the statement's linear queries from the graphical
    model (default) or, with ``least_squares`` (``SET dpsql.estimator = 'least_squares'``),
    HDMM's local least squares (thesis §3.9: unbiased, possibly negative and mutually
    inconsistent; unsupported values are NULL).  On one BLAS thread: standard errors take
    pseudo-inverses and eigendecompositions of small factors, which multithreaded OpenBLAS
    made 10-100x slower on a loaded machine (``dpsql.linalg.threads``)."""
    with one_blas_thread():
        return _answer_rows(engine, compiled, model, variance, least_squares)


def _answer_rows(engine, compiled, model, variance, least_squares: bool):
    answers: dict[str, np.ndarray] = {}
    stderrs: dict[str, np.ndarray] = {}
    unsupported: list = []
    replaced = _answer_offsets(engine, compiled, answers, stderrs)
    # the SUM row query each answered offset query completes: its error adds to that row's
    completes = ({pair[1]: off for off, pair in compiled.offset_pairs().items() if off in stderrs}
                 if compiled.offset_queries else {})
    for lq in compiled.linear_queries:
        if lq.name in replaced:
            continue     # a binning bound the measured offsets make unnecessary
        summed = _block_sum(lq, variance, least_squares)
        if least_squares:
            answers[lq.name], _ = variance.least_squares(lq.matrix)
            err, sup = summed[:2] if summed is not None else variance.analyse(lq.matrix)
        else:
            answers[lq.name] = np.asarray(model.answer(lq.matrix), dtype=np.float64)
            err, sup, estimate, nonneg = summed if summed is not None else variance.analyse_estimates(lq.matrix)
            answer = answers[lq.name] if summed is None else answers[lq.name].reshape(lq.blocks, -1).sum(axis=0)
            # the model's interval must contain the unbiased one (issue 29: sparse domains),
            # widened no further than the per-query baseline (issue 35 item 6)
            wide = interval_stderr(answer, estimate, err, nonneg)
            if np.any(sup & (wide > err)):
                # disjoint boxes: their sum has the sensitivity of their union, so its baseline
                base = baseline_stderr(engine, compiled.table, lq.matrix)
                other = stderrs.get(completes.get(lq.name, ""))
                if other is not None and summed is not None:
                    other = np.sqrt(np.square(other).reshape(-1, err.size).sum(axis=0))
                wide = cap_stderr(wide, err, base, other)
            err = np.where(sup, wide, err)
        stderrs[lq.name] = err
        if not sup.all():
            unsupported.append(lq)
    return answers, stderrs, unsupported


def _block_sum(lq, variance, least_squares: bool):
    """The standard errors of a linear query of several blocks as the statement sees it: one
    per group, that of the blocks' sum (``postprocess`` takes an error per group as the sum's).

    A WHERE with an OR, or a NOT over several columns, is a sum of disjoint boxes, one block
    each (``sql/predicates.py``).  Their estimates come from the same releases, so they are
    correlated: adding their variances as if independent reported ``COUNT(*) FROM taxi WHERE
    payment_type = 1 OR tips > 0`` at 27.9, above its per-query baseline 25.6, where the
    least-squares error of the sum is 24.5 (issue 35 item 6, bench/reported_errors.py).
    ``analyse_estimates`` (``analyse`` with ``least_squares``) of the sum; None for one block,
    a quantile's per-cell histogram, or a sum the releases do not support in every group
    (its blocks' own errors then, as before)."""
    from dpsql.linalg import Sum, Union

    if lq.blocks < 2 or lq.layout.quantile_attr is not None or not isinstance(lq.matrix, Union):
        return None
    total = Sum(lq.matrix.blocks)
    got = variance.analyse(total) if least_squares else variance.analyse_estimates(total)
    return got if got[1].all() else None


def _answer_offsets(engine, compiled, answers, stderrs) -> set[str]:
    """Answer the offset queries the released binning offsets support (least squares:
    unbiased, docs/engine.md "Binning offsets") into ``answers``/``stderrs``; returns
    the binning-bound queries they replace.  A SUM whose offsets are not all supported
    keeps its bound (option b) and is marked ``binned``."""
    if not compiled.offset_queries:
        return set()
    models = engine.offset_models(compiled.table)
    pairs = compiled.offset_pairs()
    replaced = set()
    for lq in compiled.offset_queries:
        vm = models.get(lq.offset_column)
        if vm is None or lq.name not in pairs:
            continue
        err, sup, estimate, _ = vm.analyse_estimates(lq.matrix)
        if not (sup.all() and np.all(np.isfinite(estimate)) and np.all(np.isfinite(err))):
            continue
        answers[lq.name], stderrs[lq.name] = estimate, err
        bound = pairs[lq.name][0]   # the bound and the offsets share the predicate and column
        if bound is not None:
            replaced.add(bound)
    return replaced


def bound_rows(engine, compiled, answers, stderrs, unsupported) -> dict | None:
    """(lower, upper) per entry of every linear query: the answer itself where it is
    supported, the range the released measurements imply where it is not (on one BLAS
    thread, as ``answer_linear``)."""
    with one_blas_thread():
        return _bound_rows(engine, compiled, answers, stderrs, unsupported)


def _bound_rows(engine, compiled, answers, stderrs, unsupported) -> dict | None:
    ranges = engine.bounds(compiled.table)
    if ranges is None:
        return None
    out = {}
    unsupported_names = {lq.name for lq in unsupported}
    for lq in compiled.linear_queries:
        if lq.name not in answers and lq.name not in unsupported_names:
            continue     # a binning bound replaced by measured offsets (_answer_offsets)
        value = np.asarray(answers.get(lq.name, np.zeros(0)), dtype=float)
        if lq.name not in unsupported_names:
            out[lq.name] = (value, value)
            continue
        lo, hi = ranges.rows(lq.matrix, lq.attributes)
        sup = ~np.isnan(stderrs.get(lq.name, np.full(value.shape, np.nan)))
        if lq.name in answers and value.shape == lo.shape:
            # a guess outside what the releases imply moves to the range's nearest end: the
            # model never saw a fine column's ordered release (a count over a range of it by
            # sex spread evenly over the column), the range did (post-processing only)
            clip = ~sup & (lo <= hi)
            value = np.where(clip, np.clip(value, lo, np.where(clip, hi, lo)), value)
            answers[lq.name] = value
        lo = np.where(sup, value, np.minimum(lo, value))
        hi = np.where(sup, value, np.maximum(hi, value))
        out[lq.name] = (lo, hi)
    return out


# -- rows --------------------------------------------------------------------------------------
def result_rows(engine, compiled, columns, answered, unsupported, t0, cost, version, model_kind,
                notes: tuple[str, ...]) -> Result:
    """The rows of a statement from its linear queries' answers and standard errors."""
    answers, stderrs = answered[0], answered[1]
    bounds = bound_rows(engine, compiled, answers, stderrs, unsupported) if unsupported else None
    # Unsupported rows carry an infinite variance through the post-processing (the
    # delta method keeps inf where it would turn NaN into "no stderr"); a value is
    # inferred exactly when its standard error comes out infinite, and is reported NaN.
    processed = compiled.postprocess(
        answers, {k: np.where(np.isnan(v), np.inf, v) for k, v in stderrs.items()},
        **({"bounds": bounds} if bounds is not None else {}), with_bias=True)
    rows, stderr_rows = processed[0], processed[1]
    bound_cells = processed[2] if bounds is not None else None
    bias_rows = processed[-1]
    quantile_inferred = any(lq.kind == "quantile" for lq in unsupported)
    inferred, cleaned, ranges = [], [], []
    for i, r in enumerate(stderr_rows):
        if not quantile_inferred and not any(isinstance(v, float) and not math.isfinite(v) for v in r):
            # no inferred cell: the row's errors as they are, no ranges (the loop below
            # gives the same, cell by cell: 3 ms on a 1,459-row answer, issue 35)
            cleaned.append(tuple(r))
            inferred.append(False)
            ranges.append((None,) * len(r))
            continue
        flag = quantile_inferred
        out, rng = [], []
        for j, v in enumerate(r):
            cell_inferred = isinstance(v, float) and (math.isinf(v) or math.isnan(v))
            out.append(math.nan if cell_inferred else v)
            flag = flag or cell_inferred
            b = bound_cells[i][j] if bound_cells is not None else None
            rng.append(b if (cell_inferred or (quantile_inferred and v is not None)) else None)
        cleaned.append(tuple(out))
        inferred.append(flag)
        ranges.append(tuple(rng))
    return Result(columns, list(rows), cleaned, inferred,
                  cost=Fraction(0) if cost is None else cost, seconds=time.perf_counter() - t0,
                  model_version=version, model=model_kind, bounds=ranges,
                  binnable=compiled.may_be_binned(), notes=notes,
                  bias=[row if all(b is None for b in row) else
                        tuple(None if b is None or not math.isfinite(b) or ranges[i][j] is not None else b
                              for j, b in enumerate(row)) for i, row in enumerate(bias_rows)])


# -- error columns -----------------------------------------------------------------------------
def with_error_columns(result: Result, mode: str, values: Sequence[int] | None = None) -> Result:
    """``result`` with the columns ``mode`` (``dpsql.error_columns``) asks for, after the value
    columns (``values``: their indices; by default those with a standard error in some row)."""
    if mode == "off":
        return result
    cols = list(result.columns)
    value_idx = list(values) if values is not None else [
        j for j, c in enumerate(result.columns)
        if any(r[j] is not None for r in result.stderr)] if result.stderr else []
    for name in error_column_names([result.columns[j].name for j in value_idx], mode):
        cols.append(Column(name, "double"))
    rows, stderr, bounds = [], [], []
    for i, row in enumerate(result.rows):
        extra: list[float | None] = []
        for j in value_idx:
            se = result.stderr[i][j] if i < len(result.stderr) else None
            if se is None or (isinstance(se, float) and math.isnan(se)):
                extra.append(None)
            else:
                extra.append(float(se) * (1.0 if mode == "stderr" else Z95))
            if mode == "bounds":   # the range of an inferred value (NULL where unbounded)
                b = result.bounds[i][j] if i < len(result.bounds) and result.bounds[i] else None
                extra += [_finite(b[0]), _finite(b[1])] if b is not None else [None, None]
        rows.append(tuple(row) + tuple(extra))
        # keep stderr and bounds aligned with the longer rows (stderr[i][j] for rows[i][j])
        pad = (None,) * len(extra)
        if i < len(result.stderr):
            stderr.append(tuple(result.stderr[i]) + pad)
        if i < len(result.bounds):
            bounds.append(tuple(result.bounds[i]) + pad if result.bounds[i] else result.bounds[i])
    return replace(result, columns=cols, rows=rows, stderr=stderr, bounds=bounds,
                   appended=len(cols) - len(result.columns))


def error_column_names(value_columns: Sequence[str], mode: str) -> list[str]:
    """The columns ``SET dpsql.error_columns`` appends, in order, for these value columns:
    ``c_stderr`` or ``c_ci95``; with "bounds", ``c_ci95``, ``c_lower``, ``c_upper`` (the range
    the released measurements allow for an inferred value, NULL for a supported one)."""
    if mode == "off":
        return []
    if mode == "bounds":
        return [f"{c}_{s}" for c in value_columns for s in ("ci95", "lower", "upper")]
    return [f"{c}_{mode}" for c in value_columns]


def _finite(x):
    return float(x) if x is not None and math.isfinite(float(x)) else None
