"""What the engine reports to its callers: releases, plans, spend previews and measurements.

Plain frozen records of public information (the plan's expected errors, the strategy, the ρ a
measurement charged); the engine builds them (``dpsql.engine.engine``) and every front end reads
them.  Kept apart from the engine so that its file stays about the pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpsql.plan import Strategy

__all__ = ["ReleaseInfo", "QueryReport", "UnitReport", "PartReport", "PlanReport", "SpendPreview", "MeasureReport",
           "unit_of", "units_of", "COUNTS", "QUANTILES"]

# The units a plan's errors are reported in (issue 29 item 6): counts of rows, the per-cell
# counts of a quantile's histogram, and each SUM's own column (minutes, dollars, …).  Errors
# in different units are never averaged together.
COUNTS, QUANTILES = "counts", "quantiles"


def unit_of(kind: str, aggregate: str) -> str:
    """The unit of one linear query's rows: ``kind`` and ``description`` of the compiled
    query (``dpsql.sql.LinearQuery``): a COUNT (also COUNT(x) of an AVG, SUM of a constant)
    counts rows; a SUM's unit is its argument's, named by the aggregate, e.g. ``SUM(x)``."""
    if kind == "quantile":
        return QUANTILES
    if aggregate.strip().upper().startswith("COUNT("):
        return COUNTS
    # the binning bound of a SUM/AVG over wide bins (docs/sql.md) is in its column's unit
    return aggregate.replace("SUM(half bin width of ", "SUM(", 1)


@dataclass(frozen=True)
class ReleaseInfo:
    """One release in the ledger, and whether the engine uses it (public)."""

    key: str
    table: str
    seq: int
    rho: Fraction            # charged for it (exact)
    purpose: str
    current: bool
    reasons: tuple[str, ...]   # why it is stale (empty when current)


@dataclass(frozen=True)
class QueryReport:
    """What one workload query gets from the plan, at the plan's budget.

    ``stderr`` is the root-mean-square expected standard error over the query's rows,
    ``baseline`` that of the per-query mechanism (each query measured on its own, the
    budget split evenly), ``floor`` the SVD bound of the query alone (no unbiased answer
    does better even with the whole budget; None when not computable)."""

    sql: str
    aggregate: str
    rows: int
    weight: float
    stderr: float
    baseline: float
    floor: float | None
    unit: str = COUNTS       # see unit_of

    @property
    def ratio(self) -> float:
        return self.stderr / self.baseline if self.baseline > 0 else math.inf

    @property
    def flagged(self) -> bool:
        """Expected error above the query's own per-query baseline."""
        return self.ratio > 1.0 + 1e-9


@dataclass(frozen=True)
class UnitReport:
    """The plan's expected error over the workload rows of one unit (``unit_of``): the RMSE
    per row over its linear queries, and that of the per-query baseline."""

    unit: str
    queries: int             # linear queries (an AVG is a SUM and a COUNT)
    rows: int
    rmse: float
    baseline: float


def units_of(per_query) -> tuple[UnitReport, ...]:
    """Per-unit summaries of per-query reports: counts first, quantiles, then each SUM's
    unit in the order the workload names it."""
    order: dict[str, list] = {}
    for q in per_query:
        order.setdefault(q.unit, []).append(q)
    keys = sorted(order, key=lambda u: (u != COUNTS, u != QUANTILES))
    out = []
    for u in keys:
        qs = order[u]
        rows = sum(q.rows for q in qs)
        out.append(UnitReport(u, len(qs), rows, math.sqrt(sum(q.stderr ** 2 * q.rows for q in qs) / rows),
                              math.sqrt(sum(q.baseline ** 2 * q.rows for q in qs) / rows)))
    return tuple(out)


@dataclass(frozen=True)
class PartReport:
    """One part of a mixed plan (``dpsql.engine.mixed``): the fine column's ordered part or
    the rest, its exact share of the table's budget (``rho``, ``fraction``), its expected
    RMSE per row at that share, and the SVD bound of its queries alone at that share (no
    strategy for them does better with unbiased answers; None when not computable)."""

    name: str
    operator: str
    rho: float
    fraction: float
    queries: int             # workload statements
    rows: int                # linear query rows
    rmse: float
    bound_rmse: float | None
    unit_error: float        # the strategy's unit-noise error in the whole workload's objective
    bound_exact: bool = True  # False: the bound of its CDF/range (or marginal) queries alone, a looser floor

    def line(self) -> str:
        which = "these queries" if self.bound_exact else "its CDF/range or marginal queries alone"
        bound = "" if self.bound_rmse is None else \
            f" (SVD bound of {which} at this share: {self.bound_rmse:,.2f}, ratio {self.rmse / self.bound_rmse:.3f})"
        n = f"{self.queries} quer{'y' if self.queries == 1 else 'ies'}"
        rows = f"{self.rows:,} row{'' if self.rows == 1 else 's'}"
        return (f"  {self.name}: {self.operator}, {n} ({rows}), rho = {self.rho:.6g} "
                f"({self.fraction:.1%} of the budget), expected RMSE per row {self.rmse:,.2f}{bound}")


@dataclass(frozen=True)
class PlanReport:
    table: str
    strategy: Strategy
    queries: int
    rows: int
    rho: float
    # expected RMSE per workload row at rho over *all* rows: the planner's objective, which
    # mixes units when the workload does (counts with a SUM's minutes); ``units`` has each
    rmse: float
    baseline_rmse: float     # per-query mechanism, budget split evenly
    seconds: float
    # No strategy can beat this RMSE with unbiased (least-squares) answers: the SVD bound
    # (thesis Def. 12 / Prop. 10), of the whole workload when ``bound_exact``, else of its
    # marginal queries only (still a valid floor).  None when not computable.
    bound_rmse: float | None = None
    bound_exact: bool = False
    objective: str = "relative"
    per_query: tuple[QueryReport, ...] = ()
    # AIM or HDMM for this workload and budget (dpsql.plan.aim.advise; public information),
    # judged from the counts' RMSE
    advice: str | None = None
    units: tuple[UnitReport, ...] = ()
    # the share of rho the binning offsets of the workload's SUMs/AVGs get (docs/engine.md,
    # "Binning offsets"); the counts' errors above are at rho minus it
    offsets_rho: float = 0.0
    # a mixed workload's parts, each its own release at its share (dpsql/engine/mixed.py)
    parts: tuple[PartReport, ...] = ()

    def part_lines(self) -> list[str]:
        """The split of a mixed plan, as the CLI and the shell print it (empty otherwise)."""
        if not self.parts:
            return []
        count = {2: "two", 3: "three"}.get(len(self.parts), str(len(self.parts)))
        return ([f"{count} releases, rho = {self.rho:.6g} split between them to minimise the total expected error "
                 "(shares proportional to the square root of each part's error at unit noise):"]
                + [p.line() for p in self.parts])

    @property
    def count_rmse(self) -> float | None:
        """Expected RMSE per row of the workload's counts (else of its quantile histograms,
        also counts of rows); None when it has neither."""
        by = {u.unit: u for u in self.units}
        u = by.get(COUNTS) or by.get(QUANTILES)
        return None if u is None else u.rmse

    def unit_lines(self) -> list[str]:
        """The expected error per unit, as the CLI and the shell print it."""
        out = [f"expected RMSE per query row at rho = {self.rho:.4g}, by unit "
               "(errors in different units are not averaged):"]
        for u in self.units:
            n = f"{u.queries} linear quer{'y' if u.queries == 1 else 'ies'}"
            out.append(f"  {u.unit}: {u.rmse:,.2f} over {u.rows:,} row{'' if u.rows == 1 else 's'} of {n} "
                       f"(per-query baseline: {u.baseline:,.2f})")
        if self.offsets_rho > 0:
            out.append(f"  binning offsets of the SUMs/AVGs over wide bins: rho = {self.offsets_rho:.4g} "
                       f"({self.offsets_rho / self.rho:.0%}; unbiased SUM/AVG, their noise is in the SUM rows above)")
        return out

    @property
    def flagged(self) -> tuple[QueryReport, ...]:
        return tuple(q for q in self.per_query if q.flagged)

    def per_query_lines(self, width: int = 72) -> list[str]:
        """The per-query table the CLI and the shell print: expected standard error, the
        per-query baseline, their ratio, the SVD floor of the query alone, the weight."""
        if not self.per_query:
            return []
        out = [f"objective: {self.objective} (each query against its per-query baseline)"
               if self.objective == "relative" else "objective: absolute (total squared error)",
               f"{'std err':>12} {'baseline':>12} {'ratio':>6} {'floor':>11} {'weight':>6}  query"]
        for q in self.per_query:
            text = " ".join(w for line in q.sql.splitlines()
                            if not line.strip().startswith("--") for w in line.split())
            # the [SUM(x)]/[COUNT(x)] suffix tells an AVG's two rows apart: cut the SQL, never it
            suffix = f" [{q.aggregate}]" if q.aggregate and q.aggregate not in text else ""
            room = max(12, width - len(suffix))
            label = (text if len(text) <= room else text[:room - 1] + "…") + suffix
            floor = "-" if q.floor is None else f"{q.floor:,.2f}"
            flag = "  ABOVE BASELINE" if q.flagged else ""
            out.append(f"{q.stderr:>12,.2f} {q.baseline:>12,.2f} {q.ratio:>6.2f} {floor:>11} "
                       f"{q.weight:>6g}  {label}{flag}")
        if self.flagged:
            out.append(f"{len(self.flagged)} quer{'y is' if len(self.flagged) == 1 else 'ies are'} "
                       "expected to be less accurate than measured on its own")
        return out


@dataclass(frozen=True)
class SpendPreview:
    """What measuring a strategy would charge now (0 when already released), and what the
    principal has left (both exact)."""

    rho: Fraction
    remaining: Fraction


@dataclass(frozen=True)
class MeasureReport:
    table: str
    rho: Fraction            # spent by this call, exact (0 when re-used)
    reused: bool
    blocks: int
    cells: int
    seconds: float
    completed: bool = False  # released under an earlier charge a crash left unreleased (rho 0)
