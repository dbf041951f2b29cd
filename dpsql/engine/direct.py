"""Thin statements over two fine columns, measured directly (issue 35 item 4).

A statement such as ``SELECT COUNT(*) FROM adult WHERE capital_gain > 5000 AND
capital_loss > 0`` or ``… WHERE capital_gain BETWEEN 1 AND 9999 AND capital_loss < 1000
GROUP BY sex`` asks about two columns of more than ``gram.LARGE_CELLS`` cells at once.  No
strategy over both can be planned (a marginal of 10⁵ × 5·10³ cells; the ordered strategy
measures one column), and no model over both can be fitted.  But such a statement is
*thin*: each of its linear queries is one Kronecker term whose factors on the fine columns
are a few predicate rows and whose rows are a few group cells.  Its per-query baseline is
the query measured on its own (``plan.objective``), so that is what is done:

* the fine columns' cells are merged into the runs on which every such statement's rows
  are constant (``direct_split``: public, from the workload's SQL and the declared domain),
  a column of 10⁵ cells becoming a handful of bins (``coarse_schema``: an ``IntegerRange``
  or ``Numeric`` with those bins' starts as edges); the counts of the statements' rows are
  unchanged by the merge, so a marginal over the merged columns is counted instead;
* the statements form a **direct part** of a mixed plan: the per-query mechanism
  (``plan.operators.opt_per_query``) on the merged domain, at the least share of the
  budget that keeps each of its queries within its per-query baseline (k/m of ρ for k of
  the workload's m queries: exactly their baseline), the other statements planned as a
  workload of their own at the rest (``mixed`` and ``Planner.strategy_for`` as before);
  every part is measured in the same ``measure_parts`` (one preview, every charge durable
  before any noise);
* a statement is answered from its own released block (``answer_direct``): each linear
  query's rows are the block's noisy values, its variance the block's noise variance.

Nothing else is measured this way: a CDF, quantile or GROUP BY of every value of one fine
column together with a predicate on another is refused (``direct_split``) with a hint.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql import linalg
from dpsql.errors import UnsupportedQueryError
from dpsql.sql.predicates import MAX_JOINT_CELLS

__all__ = ["DirectStrategy", "DirectRelease", "direct_split", "coarse_schema", "answer_direct",
           "answers_block", "is_direct_strategy", "is_direct_payload", "pack", "unpack", "plan_with_direct",
           "plan_merged_ordered", "Found"]

#: The most rows one linear query measured directly may have (a few group cells).
MAX_ROWS = 512

#: The most cells of the merged marginal one directly measured query is counted over (the
#: predicates' joint-domain limit).
MAX_CELLS = MAX_JOINT_CELLS


def is_direct_strategy(strategy) -> bool:
    """A ``DirectStrategy``, told by class name (as the ordered and mixed ones are)."""
    return type(strategy).__name__ == "DirectStrategy"


def is_direct_payload(payload: bytes) -> bool:
    """Whether a release payload is a direct release (``pack``), from its member names."""
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        return "__direct__.npy" in z.namelist()


@dataclass(frozen=True, eq=False)
class DirectStrategy:
    """The per-query strategy ``inner`` (a ``plan.Strategy``) over ``schema``: the table's
    schema with the fine columns of ``starts`` merged into runs (``coarse_schema``);
    ``starts[name]`` the first fine cell of each run (the NULL cell its own run).  The
    views the planner and the measurement read are ``inner``'s."""

    inner: Any
    schema: Any
    starts: dict[str, tuple[int, ...]]
    explanation: str = ""
    operator: str = "direct"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)


@dataclass(eq=False)
class DirectRelease:
    """A released direct part: the merge of each fine column (``DirectStrategy.starts``) and
    the noisy blocks (``release.LatticeBlock``, values, noise standard deviation)."""

    starts: dict[str, tuple[int, ...]]
    released: list
    # an ordered part over the merged domain: its ``measure.ordered.OrderedRelease`` (and the
    # closed-form estimate of it, built on first use)
    ordered: Any = None

    @functools.cached_property
    def estimate(self):
        from dpsql.measure.ordered import OrderedEstimate
        return OrderedEstimate(self.ordered)


def _large_cells() -> int:
    from dpsql.plan.gram import LARGE_CELLS
    return int(LARGE_CELLS)


def _thin_factor(f) -> np.ndarray | None:
    """The dense rows of a factor on a fine column when it is a few integer rows (a WHERE's
    predicate, a BETWEEN), else None (a GROUP BY of every value, a CDF, real values)."""
    from dpsql.plan.workload import THIN_ROWS

    if isinstance(f, (linalg.Identity, linalg.Prefix, linalg.Suffix, linalg.AllRange)) or f.shape[0] > THIN_ROWS:
        return None
    F = np.atleast_2d(np.asarray(f.dense(), dtype=np.float64))
    return F if bool(np.all(F == np.round(F))) else None


def _rows_of(f) -> np.ndarray:
    """``_thin_factor`` of a factor ``direct_split`` found thin."""
    F = _thin_factor(f)
    assert F is not None, "a direct statement's factors on the fine columns are thin"
    return F


def _runs(rows: list[np.ndarray], attr) -> tuple[int, ...]:
    """The first cell of each run of cells on which every row of ``rows`` is constant; a
    nullable column's NULL cell (the last) is a run of its own."""
    n = attr.size
    values = n - 1 if attr.nullable else n
    R = np.vstack(rows)[:, :values]
    breaks = np.flatnonzero(np.any(R[:, 1:] != R[:, :-1], axis=0)) + 1
    out = [0, *(int(b) for b in breaks)]
    return tuple(out + ([n - 1] if attr.nullable else []))


def coarse_attribute(attr, starts: tuple[int, ...]):
    """``attr`` with its cells merged into the runs starting at ``starts``, or None for a
    kind that cannot be merged (only integer and numeric bins are).  A value lands in the
    run holding the cell it lands in: the merged bins' starts are cells' starts, and values
    outside the domain clamp (or are invalid) as before."""
    from dpsql.domain import IntegerRange, Numeric

    values = [s for s in starts if not (attr.nullable and s == attr.size - 1)]
    if isinstance(attr, IntegerRange):
        cell_starts = [lo for lo, _ in attr.bin_bounds()[:attr.size - (1 if attr.nullable else 0)]]
        return IntegerRange(attr.name, attr.lo, attr.hi, edges=[int(cell_starts[s]) for s in values],
                            nullable=attr.nullable, clamp=attr.clamp)
    if isinstance(attr, Numeric):
        return Numeric(attr.name, [attr.edges[s] for s in values] + [attr.edges[-1]], nullable=attr.nullable)
    return None


def coarse_schema(schema, starts: dict[str, tuple[int, ...]]):
    """``schema`` with each column of ``starts`` merged (``coarse_attribute``)."""
    from dpsql.domain import TableSchema

    attrs = [coarse_attribute(a, starts[a.name]) if a.name in starts else a for a in schema.attributes]
    if any(a is None for a in attrs):
        return None
    return TableSchema(schema.name, tuple(attrs), schema.source)


def _class_of(starts: tuple[int, ...], n: int) -> np.ndarray:
    """Each fine cell's run (``starts`` in order, the last run to the end)."""
    out = np.zeros(n, dtype=np.int64)
    out[list(starts[1:])] = 1
    return np.cumsum(out)


def _coarse(F: np.ndarray, starts: tuple[int, ...]) -> np.ndarray | None:
    """F's columns per run, or None when F is not constant on each run."""
    Fc = F[:, list(starts)]
    return Fc if np.array_equal(Fc[:, _class_of(starts, F.shape[1])], F) else None


@dataclass(frozen=True)
class Found:
    """What ``direct_split`` found: the thin statements' query parts with the runs of the
    fine columns they touch and the merged schema (``thin``: None when there are none), and
    per fine column A whose CDF, range or quantile some statement restricts by a predicate
    on another fine column, those statements' parts, the runs of the other columns and
    their merged schema (``ordered``: (A's index, parts, runs, schema))."""

    thin: tuple[list[int], dict[str, tuple[int, ...]], Any] | None
    ordered: list[tuple[int, list[int], dict[str, tuple[int, ...]], Any]]


_ORDERED_FACTORS = (linalg.Prefix, linalg.Suffix, linalg.AllRange, linalg.Identity)


def direct_split(workload, labels, offsets, schema) -> Found | None:
    """The workload's statements that ask about two or more fine columns (more than
    ``LARGE_CELLS`` cells), or None when there are none (``Found``):

    * **thin** ones (every linear query one Kronecker term of integer factors, a few rows on
      each fine column, at most ``MAX_ROWS`` rows), measured directly;
    * **ordered** ones: a CDF, range, quantile or GROUP BY of every value of one fine
      column A (an integer, date or timestamp column) whose other fine columns carry thin
      predicate rows (``quantile_cont(gain, 0.5) … WHERE loss > 0``): planned by the
      ordered strategy over A with the other columns merged into the runs of those
      predicates, which makes them few-celled group columns (``plan.ordered``).

    Any other such statement, or one whose columns cannot be merged (only integer and
    numeric bins can), is refused with a hint.  A statement with binning offsets is
    neither.  Public: workload SQL and domains."""
    from dpsql.engine.ordered import ORDERED_KINDS

    large = _large_cells()
    names = list(workload.domain.attributes)
    fine = {i for i, n in enumerate(workload.domain.shape) if n > large}
    if len(fine) < 2:
        return None
    with_offsets = {labels[j][0] for _, j in offsets}
    asks: dict[str, set[int]] = {}
    for j, part in enumerate(workload.parts):
        on = {i for t in part.terms for i in workload.terms.terms[t].support if i in fine}
        asks[labels[j][0]] = asks.get(labels[j][0], set()) | on
    chosen = {sql for sql, on in asks.items() if len(on) >= 2}
    if not chosen:
        return None
    # only those statements' factors are read densely (a workload of many others pays nothing)
    thin: dict[str, bool] = {}
    column: dict[str, set[int] | None] = {}     # the fine columns asked other than thinly
    for j, part in enumerate(workload.parts):
        sql = labels[j][0]
        if sql not in chosen:
            continue
        terms = [workload.terms.terms[t] for t in part.terms]
        ok = sql not in with_offsets and len(terms) == 1 and bool(terms[0].factors)
        wide: set[int] | None = set() if ok else None
        if ok:
            for i, f in enumerate(terms[0].factors):
                if isinstance(f, linalg.Total):
                    continue
                F = _thin_factor(f) if i in fine else np.atleast_2d(np.asarray(f.dense(), dtype=np.float64))
                if F is not None and bool(np.all(F == np.round(F))):
                    continue
                ok = False
                if wide is not None and i in fine and isinstance(f, _ORDERED_FACTORS) \
                        and schema.attributes[i].kind in ORDERED_KINDS:
                    wide.add(i)
                elif i not in fine and wide is not None:
                    pass            # a small column's factor: the ordered strategy's groups
                else:
                    wide = None
        ok = ok and part.rows <= MAX_ROWS
        thin[sql] = thin.get(sql, True) and ok
        had = column.get(sql, set())
        column[sql] = None if had is None or wide is None else had | wide
    ordered: dict[int, list[str]] = {}
    for sql in sorted(chosen):
        if thin[sql]:
            continue
        wide = column[sql]
        if wide is not None and len(wide) == 1 and sql not in with_offsets:
            ordered.setdefault(next(iter(wide)), []).append(sql)
            continue
        cols = " and ".join(repr(names[i]) for i in sorted(asks[sql]))
        raise UnsupportedQueryError(
            f"statement {sql!r} asks about {cols}, columns of more than {large:,} cells, together, and "
            "neither as a few counts nor as a CDF, range or quantile of one of them under predicates on the "
            "others: no strategy over two such columns is planned (counts and integer sums whose rows are at "
            f"most {MAX_ROWS} cells are measured directly, one integer, date or timestamp column's CDF per "
            "merged predicate cell by the ordered strategy)",
            hint=f"declare all but one of {cols} in coarser bins (bin_width or edges in the domain), "
                 "or ask for counts with range predicates (WHERE x > c AND y BETWEEN a AND b) instead")
    found_thin = None
    indices = [j for j in range(len(workload.parts)) if thin.get(labels[j][0], False) and labels[j][0] in chosen]
    if indices:
        found_thin = (indices, *_merged(workload, labels, indices, fine, None, schema, asks))
    found_ordered = []
    for a, statements in sorted(ordered.items()):
        idx = [j for j in range(len(workload.parts)) if labels[j][0] in statements]
        found_ordered.append((a, idx, *_merged(workload, labels, idx, fine - {a}, a, schema, asks)))
    return Found(found_thin, found_ordered)


def _merged(workload, labels, indices, fine, keep, schema, asks) -> tuple[dict[str, tuple[int, ...]], Any]:
    """(runs per fine column, merged schema) of the query parts ``indices``: each fine column
    their rows touch (but ``keep``, the ordered column) cut where any of their rows changes."""
    large = _large_cells()
    names = list(workload.domain.attributes)
    used = {i for j in indices for t in workload.parts[j].terms for i in workload.terms.terms[t].support
            if i in fine}
    mine: dict[int, list[np.ndarray]] = {i: [] for i in used}
    for j in indices:
        for i, f in enumerate(workload.terms.terms[workload.parts[j].terms[0]].factors):
            if i in used and not isinstance(f, linalg.Total):
                mine[i].append(_rows_of(f))
    runs = {names[i]: _runs(mine[i], schema.attributes[i]) for i in used}
    # only integer and numeric bins merge (a date or timestamp column's cells are computed
    # by its own arithmetic in SQL): such a column stays as it is, its cells counted densely
    # (thin counts, within MAX_CELLS below), never a group column of an ordered part
    starts = {a: r for a, r in runs.items() if coarse_attribute(schema.attribute(a), r) is not None}
    coarse = coarse_schema(schema, starts)
    assert coarse is not None, "only the columns that merge are merged"
    if keep is not None:
        bad = sorted(set(runs) - set(starts))
        if bad:
            raise UnsupportedQueryError(
                f"the CDF or quantile of {names[keep]!r} is restricted by a predicate on "
                f"{' and '.join(map(repr, bad))}, a date or timestamp column of more than {large:,} cells: only "
                "integer and numeric columns are "
                "merged into the predicate's ranges for that",
                hint=f"declare {bad[0]!r} in coarser bins (bin = \"hour\" or \"day\"), or ask for counts with "
                     "range predicates on both columns instead")
        return starts, coarse
    # each block is counted as a marginal over its merged columns: the runs are shared by all
    # the statements, so a SUM over every value of one column beside a SUM over every value
    # of the other would ask for 10⁵ × 5·10³ cells (counted densely)
    for j in indices:
        term = workload.terms.terms[workload.parts[j].terms[0]]
        cells = 1
        for i, f in enumerate(term.factors):
            if not isinstance(f, linalg.Total):
                cells *= coarse.attributes[i].size
        if cells > MAX_CELLS:
            sql = labels[j][0]
            raise UnsupportedQueryError(
                f"statement {sql!r} would be counted over {cells:,} merged cells of "
                f"{' and '.join(repr(names[i]) for i in sorted(asks[sql]))} (at most {MAX_CELLS:,}): the "
                "workload's other statements over these columns cut them into that many runs (a SUM over "
                "every value of one of them beside one over the other)",
                hint="plan the SUMs over each fine column in a workload of its own, or declare the columns "
                     "in coarser bins")
    return starts, coarse


def _coarse_workload(workload, indices, starts, coarse, fraction: Fraction):
    """The query parts ``indices`` of ``workload`` over the merged domain of ``coarse``: each
    term's factors on the merged columns taken per run (equal on every cell of it), the
    parts' scales and per-query baselines the whole workload's (the latter at ``fraction``,
    as ``mixed.sub_workload``), so that errors add up with the other parts'."""
    from dataclasses import replace

    from dpsql.plan import Workload

    names = list(workload.domain.attributes)
    mats, parts, first = [], [], 0
    for j in indices:
        p = workload.parts[j]
        term = workload.terms.terms[p.terms[0]]
        factors = []
        for i, f in enumerate(term.factors):
            name = names[i]
            if name not in starts:
                factors.append(f)
            elif isinstance(f, linalg.Total):
                factors.append(linalg.Total(len(starts[name])))
            else:
                Fc = _coarse(_rows_of(f), starts[name])
                assert Fc is not None, "the runs are cut where any row changes"
                factors.append(linalg.Explicit(Fc))
        k = linalg.Kron(factors) if len(factors) > 1 else factors[0]
        mats.append(k if term.weight == 1.0 else linalg.Weighted(float(term.weight), k))
        parts.append(replace(p, first_term=first, baseline=p.baseline * float(fraction)))
        first += 1
    return Workload(coarse.domain, linalg.Union(mats), tuple(parts))


def plan_direct(workload, indices, starts, coarse, noise: str, fraction: Fraction) -> DirectStrategy:
    """The per-query mechanism for the parts ``indices`` over the merged domain: each query
    measured on its own, its rows' noise that of the query alone at the part's share."""
    from dpsql.plan.operators import opt_per_query

    sub = _coarse_workload(workload, indices, starts, coarse, fraction)
    inner = opt_per_query(sub, noise)
    cells = ", ".join(f"{a!r} {workload.domain[a]:,} → {len(s)}" for a, s in starts.items())
    return DirectStrategy(inner, coarse, starts,
                          f"{len(indices)} thin quer{'y' if len(indices) == 1 else 'ies'} over two fine columns "
                          f"measured directly on merged cells ({cells})")


def plan_merged_ordered(planner, table: str, workload, indices, starts, coarse, rho: Fraction, fraction: Fraction,
                        unit_rows: int = 1) -> DirectStrategy:
    """The ordered strategy (``plan.ordered``, through ``planner.optimize``) for the parts
    ``indices``, CDFs or quantiles of one fine column under predicates on other fine columns,
    over the merged domain of ``coarse``, where those columns are a few cells each: the
    column measured per merged predicate cell (a group column of the ordered strategy)."""
    from dpsql.engine.ordered import is_ordered_strategy

    sub = _coarse_workload(workload, indices, starts, coarse, fraction)
    inner = planner.optimize(sub, rho * fraction, unit_rows, table=table)
    if not is_ordered_strategy(inner):
        raise UnsupportedQueryError(
            "the CDF/quantile queries under predicates on another fine column were not planned by the "
            f"ordered strategy ({inner.operator})",
            hint="declare all but one of the fine columns in coarser bins")
    cells = ", ".join(f"{a!r} {workload.domain[a]:,} → {len(s)}" for a, s in starts.items())
    return DirectStrategy(inner, coarse, starts,
                          f"{len(indices)} CDF/quantile quer{'y' if len(indices) == 1 else 'ies'} over "
                          f"{inner.attribute!r} under predicates on merged cells ({cells}) by the ordered "
                          f"strategy ({inner.operator}) per merged cell")


def _check_runs(catalog, statements, column: str, n: int) -> None:
    """Refuse (before any spending) a quantile under a predicate on another fine column whose
    WHERE keeps values of its own column with gaps (``x < a OR x > b``): the ordered release
    answers a quantile over one run of the column's cells (``ordered._mask_range``), and no
    model can hold two fine columns, so it could never be answered.  Public: the SQL."""
    from dpsql.engine.ordered import _mask_range
    from dpsql.sql import compile as compile_sql

    for sql in sorted(statements):
        for lq in compile_sql(sql, catalog).linear_queries:
            if lq.kind == "quantile" and _mask_range(lq.cell_masks, n) is None:
                raise UnsupportedQueryError(
                    f"statement {sql!r} asks for a quantile of {column!r} over values with gaps, under a predicate "
                    "on another column of more than 4,096 cells: the ordered strategy answers a quantile over one "
                    "range of its column's values",
                    hint=f"keep one range of {column!r} (BETWEEN a AND b, or >= a AND <= b) in its WHERE, or ask "
                         "for each range in a statement of its own")


def plan_with_direct(planner, table: str, workload, labels, offsets, rho: Fraction, unit_rows: int = 1,
                     index: Sequence[int] | None = None):
    """The strategy of a workload some of whose statements ask about two fine columns
    (``direct_split``), or None when none do.  The thin ones form a direct part at the least
    share keeping each within its per-query baseline (``mixed.least_fraction``: k/m of ρ for
    k of m queries); each fine column whose CDF/quantile is restricted by predicates on
    another gets an ordered part over the merged domain (``plan_merged_ordered``); the other
    statements are planned by ``planner.strategy_for``, their per-query baselines still the
    whole workload's (``mixed.sub_workload``).  What the direct part leaves is split between
    the merged ordered parts and the others as any parts are (``mixed.split_fractions``:
    ρ_v ∝ √(k_v²·E_v), raised to the least shares keeping their queries within their
    baselines), from their errors planned at an even split, and every part is then planned
    at its share.  One ``MixedStrategy`` (the other plan's parts scaled to their share).
    ``index``: the whole workload's index of each of ``workload``'s query parts, passed on to
    the other statements' plan (``Planner.strategy_for``)."""
    from dpsql.engine.mixed import (MixedStrategy, StrategyPart, is_mixed_strategy, least_fraction, rest_parts,
                                    split_fractions, sub_workload)

    schema = planner._state(table).schema
    whole = list(range(len(workload.parts))) if index is None else list(index)
    found = direct_split(workload, labels, offsets, schema)
    if found is None:
        return None
    if planner.config.sources[table].id_column is not None:
        # a privacy unit's rows are kept by a keyed hash of the row's cells (sqlgen.bounded):
        # counted over merged cells, another selection of its rows would be kept than the
        # table's other releases count (private either way, but the answers would disagree)
        raise UnsupportedQueryError(
            f"table {table!r} keeps at most {planner.config.sources[table].unit_rows} rows per privacy unit, "
            "chosen by a hash of each row's cells: statements over two of its columns of more than "
            f"{_large_cells():,} cells, counted over merged cells, would keep other rows than its other releases",
            hint="declare all but one of the fine columns in coarser bins, or ask about one fine column per statement")
    noise = planner.config.noise
    k2 = float(unit_rows ** 2)
    names = list(workload.domain.attributes)
    parts: list[StrategyPart] = []
    texts: list[str] = []
    f_d = Fraction(0)
    peeled: set[int] = set()
    if found.thin is not None:
        indices, starts, coarse = found.thin
        direct = plan_direct(workload, indices, starts, coarse, noise, Fraction(1))
        # the per-query mechanism's variances scale as 1/f: its least share, planned once more
        # there so that its sub-workload's baselines are those of the share it is measured at
        least = least_fraction(direct, Fraction(1), planner.rows_sq(table, direct) / k2)
        f_d = Fraction(least) if least > 0 else Fraction(len(indices), len(workload.parts))
        peeled |= set(indices)
    keep = [j for j in range(len(workload.parts)) if j not in peeled
            and not any(j in idx for _, idx, _, _ in found.ordered)]
    merged = {f"ordered {names[a]} (merged)": (idx, starts, coarse) for a, idx, starts, coarse in found.ordered}
    for a, idx, _, _ in found.ordered:
        _check_runs(planner.catalog, {labels[j][0] for j in idx}, names[a], workload.domain[names[a]])
    left = 1 - f_d
    if (keep or merged) and left <= 0:
        raise UnsupportedQueryError(
            "the thin statements over two fine columns would need the whole budget to keep their "
            "per-query baselines", hint="measure them in a workload of their own")
    at = {j: k for k, j in enumerate(keep)}

    def plan_rest(fraction: Fraction):
        sub = sub_workload(workload, keep, fraction)
        return sub, planner.strategy_for(table, sub, [labels[j] for j in keep],
                                         [(q, at[j]) for q, j in offsets if j in at], rho * fraction, unit_rows,
                                         [whole[j] for j in keep])

    def cost(s) -> float:
        if is_mixed_strategy(s):
            return sum(planner.rows_sq(table, p.strategy) * float(p.strategy.expected_error) / float(p.fraction)
                       for p in s.parts)
        return planner.rows_sq(table, s) * float(s.expected_error)

    names_v = list(merged) + (["rest"] if keep else [])
    shares = {v: left / len(names_v) for v in names_v}
    plans: dict[str, Any] = {}
    rest_sub = other = None
    for round_ in range(2):
        # round 0 at an even split for the parts' errors; round 1 at the shares they give
        for v, (idx, starts, coarse) in merged.items():
            plans[v] = plan_merged_ordered(planner, table, workload, idx, starts, coarse, rho, shares[v], unit_rows)
        if keep:
            rest_sub, other = plan_rest(shares["rest"])
        if round_ or len(names_v) < 2:
            break
        costs = {v: cost(plans[v].inner) for v in merged}
        if keep:
            costs["rest"] = cost(other)
        # least shares of what is left keeping every query within its baseline (variances
        # scale as 1/f; the other plan's parts scale with its share)
        lows = {v: least_fraction(plans[v].inner, shares[v], planner.rows_sq(table, plans[v].inner) / k2)
                / float(left) for v in merged}
        if keep:
            assert other is not None
            inner = [(p.strategy, shares["rest"] * p.fraction, p.fraction) for p in other.parts] \
                if is_mixed_strategy(other) else [(other, shares["rest"], Fraction(1))]
            lows["rest"] = max(least_fraction(s, at_, planner.rows_sq(table, s) / k2) / float(f)
                               for s, at_, f in inner) / float(left)
        shares = {v: left * x for v, x in split_fractions(costs, lows).items()}
    for v, (idx, _, _) in merged.items():
        parts.append(StrategyPart(v, plans[v], shares[v], tuple(idx), sub_workload(workload, idx, shares[v]),
                                  direct=True))
        texts.append(f"{plans[v].explanation}, at {float(shares[v]):.4g} of the budget")
    if keep:
        assert other is not None and rest_sub is not None
        r = shares["rest"]
        parts += rest_parts(other, keep, r, rest_sub)
        why = getattr(other, "explanation", "")
        texts.append(f"the other statements at {float(r):.4g}: {why}" if why else
                     f"the other statements at {float(r):.4g}")
    if found.thin is not None:
        indices, starts, coarse = found.thin
        if not keep and not merged:
            f_d = Fraction(1)
        direct = plan_direct(workload, indices, starts, coarse, noise, f_d)
        parts.append(StrategyPart("direct", direct, f_d, tuple(indices), sub_workload(workload, indices, f_d),
                                  direct=True))
        texts.insert(0, f"{direct.explanation}, at {float(f_d):.4g} of the budget (each within its per-query "
                        "baseline)")
    return MixedStrategy(tuple(parts), explanation="; ".join(texts) + ".")


DIRECT_FORMAT = "dpsql-direct-release"
DIRECT_VERSION = 1


def pack(release: DirectRelease) -> bytes:
    """A direct release's payload: the released blocks (``release.pack``) and the runs."""
    from dpsql.measure import release as rel

    from dpsql.measure import ordered

    buf = io.BytesIO()
    inner = ordered.pack(release.ordered) if release.ordered is not None else rel.pack(release.released)
    # Any: numpy's annotation of savez would read a key as allow_pickle
    name = "ordered" if release.ordered is not None else "blocks"
    arrays: dict[str, Any] = {name: np.frombuffer(inner, dtype=np.uint8)}
    # its own format version beside the inner payload's (a newer one is refused, release.check_stamp)
    arrays["__version__"] = rel.version_stamp(DIRECT_FORMAT, DIRECT_VERSION)
    np.savez(buf, __direct__=np.frombuffer(json.dumps({k: list(v) for k, v in release.starts.items()}).encode(),
                                           dtype=np.uint8), **arrays)
    return buf.getvalue()


def unpack(payload: bytes) -> DirectRelease:
    from dpsql.measure import release as rel

    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        rel.check_stamp(z, DIRECT_FORMAT, DIRECT_VERSION)
        starts = {k: tuple(int(s) for s in v) for k, v in json.loads(bytes(z["__direct__"]).decode()).items()}
        if "ordered" in z.files:
            from dpsql.measure import ordered
            return DirectRelease(starts, [], ordered.unpack(bytes(z["ordered"])))
        blocks = bytes(z["blocks"])
    return DirectRelease(starts, rel.unpack(blocks))


def answer_direct(schema, release: DirectRelease, compiled):
    """(answers, stderrs) of every linear query of ``compiled`` from the direct ``release``:
    each query's rows are one released block's noisy values when the block measured
    exactly those rows (its factors, per run on the merged columns, equal the query's), its
    standard errors the block's noise; None when some query was not measured so."""
    from dpsql.sql.postprocess import Answers

    if compiled.offset_queries:
        return None
    if release.ordered is not None:
        return _answer_merged_ordered(schema, release, compiled)
    answers, stderrs = Answers(), {}
    for lq in compiled.linear_queries:
        got = _answer_matrix(schema, release, lq.matrix)
        if got is None:
            return None
        answers[lq.name], stderrs[lq.name] = got
        if lq.blocks > 1:
            # an OR's boxes measured as one sum per group (engine/direct_sums.py): the sum in
            # the first block's rows, the others 0, its error per group (postprocess adds the
            # blocks up and takes an error per row as the sum's)
            answers[lq.name] = np.concatenate([got[0], np.zeros(got[0].size * (lq.blocks - 1))])
    return answers, stderrs


def answers_block(schema, release: DirectRelease, matrix) -> bool:
    """Whether ``release`` measured every row of the workload block ``matrix`` (an ordered
    part: every factor on its column, its group columns per run, or summed out)."""
    if release.ordered is None:
        return _answer_matrix(schema, release, matrix) is not None
    coarse = _coarsen_matrix(schema, release.starts, matrix)
    if coarse is None:
        return False
    s = release.ordered.strategy
    names = list(schema.domain.attributes)
    allowed = {names.index(a) for a in (s.attribute, *s.groups) if a in names}
    return all({i for i, f in enumerate(factors) if not isinstance(f, linalg.Total)} <= allowed
               for _, factors in linalg.kron_terms(coarse))


def _coarsen_matrix(schema, starts: dict[str, tuple[int, ...]], matrix):
    """``matrix`` (one weighted Kronecker term over the table's domain) over the merged
    domain: each factor on a merged column taken per run, or None when there are several
    terms or a factor is not constant on every run (the release cannot answer it)."""
    terms = linalg.kron_terms(matrix)
    if len(terms) != 1:
        return None
    w, factors = terms[0]
    out = []
    for a, f in zip(schema.domain.attributes, factors):
        if a not in starts:
            out.append(f)
        elif isinstance(f, linalg.Total):
            out.append(linalg.Total(len(starts[a])))
        elif f.shape[0] > MAX_ROWS:
            return None
        else:
            Fc = _coarse(np.atleast_2d(np.asarray(f.dense(), dtype=np.float64)), starts[a])
            if Fc is None:
                return None
            out.append(linalg.Explicit(Fc))
    k = linalg.Kron(out) if len(out) > 1 else out[0]
    return k if w == 1.0 else linalg.Weighted(float(w), k)


def _answer_merged_ordered(schema, release: DirectRelease, compiled):
    """``engine.ordered.answer_ordered`` of the merged ordered ``release``: the statement's
    linear queries taken over the merged domain (``_coarsen_matrix``), the merged schema's
    columns as the release's groups."""
    import dataclasses
    from types import SimpleNamespace

    from dpsql.engine.ordered import answer_ordered

    coarse = coarse_schema(schema, release.starts)
    if coarse is None:
        return None
    names = list(schema.domain.attributes)
    merged = {names.index(a) for a in release.starts}

    def restricts(matrix) -> bool:         # a factor on a merged column that is not all ones
        return any(i in merged and not isinstance(f, linalg.Total)
                   and (f.shape[0] > MAX_ROWS or not bool(np.all(np.asarray(f.dense()) == 1)))
                   for _, factors in linalg.kron_terms(matrix) for i, f in enumerate(factors))
    if not any(restricts(lq.matrix) for lq in compiled.linear_queries):
        # nothing asks about the merged columns: the table's own releases answer it (a GROUP
        # BY sex the ordered part also holds comes from the model, planned for it)
        return None
    lqs = []
    for lq in compiled.linear_queries:
        m = _coarsen_matrix(schema, release.starts, lq.matrix)
        if m is None:
            return None
        lqs.append(dataclasses.replace(lq, matrix=m))
    return answer_ordered(coarse, release.estimate, SimpleNamespace(offset_queries=(), linear_queries=lqs))


def _answer_matrix(schema, release: DirectRelease, matrix):
    """(values, standard errors) of the rows of ``matrix`` (one weighted Kronecker term over
    the table's domain) from the block of ``release`` that measured them, or None."""
    names = list(schema.domain.attributes)
    terms = linalg.kron_terms(matrix)
    if len(terms) != 1:
        # an OR's boxes measured as one block of their sum (engine/direct_sums.py), never
        # from a two-fine release (its cells are merged runs)
        from dpsql.engine.box_sums import sum_matrix
        got = None if release.starts else sum_matrix(
            names, schema.domain.shape, [(float(w), list(fs)) for w, fs in terms])
        found = None if got is None else _match(release, got[0], [got[1]])
        return None if found is None else (found[0], np.full(found[0].shape, found[1]))
    w, factors = terms[0]
    clique, coarse = [], []
    for i, f in enumerate(factors):
        if isinstance(f, linalg.Total):
            continue
        if f.shape[0] > MAX_ROWS:
            return None
        F = np.atleast_2d(np.asarray(f.dense(), dtype=np.float64))
        if names[i] in release.starts:
            Fc = _coarse(F, release.starts[names[i]])
            if Fc is None:
                return None
            F = Fc
        if F.shape[0] == 1 and bool(np.all(F == 1)):
            continue        # summed over: the block's clique leaves it out too
        clique.append(names[i])
        coarse.append(F)
    got = _match(release, tuple(clique), coarse)
    if got is None:
        return None
    y, sd = got
    return float(w) * y, np.full(y.shape, abs(float(w)) * sd)


def _match(release: DirectRelease, clique: tuple[str, ...], factors: list[np.ndarray]):
    """(values, stddev) of the released block measuring exactly ``factors`` over ``clique``."""
    for block, values, sd in release.released:
        if block.clique != clique or block.offsets is not None or block.scale != 1.0:
            continue
        # a factor read back from a payload may be a StructuredFactor (an identity over sex):
        # its entries through np.asarray
        if block.joint:
            dense = factors[0]
            for F in factors[1:]:
                dense = np.kron(dense, F)
            same = block.factors[0].shape == dense.shape and np.array_equal(np.asarray(block.factors[0]), dense)
        else:
            same = len(block.factors) == len(factors) and all(
                b.shape == F.shape and np.array_equal(np.asarray(b), F) for b, F in zip(block.factors, factors))
        if same:
            return np.asarray(values, dtype=np.float64), float(sd)
    return None
