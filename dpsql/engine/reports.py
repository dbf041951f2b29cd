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

__all__ = ["ReleaseInfo", "QueryReport", "PlanReport", "SpendPreview", "MeasureReport"]


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

    @property
    def ratio(self) -> float:
        return self.stderr / self.baseline if self.baseline > 0 else math.inf

    @property
    def flagged(self) -> bool:
        """Expected error above the query's own per-query baseline."""
        return self.ratio > 1.0 + 1e-9


@dataclass(frozen=True)
class PlanReport:
    table: str
    strategy: Strategy
    queries: int
    rows: int
    rho: float
    rmse: float              # expected RMSE per workload row at rho
    baseline_rmse: float     # per-query mechanism, budget split evenly
    seconds: float
    # No strategy can beat this RMSE with unbiased (least-squares) answers: the SVD bound
    # (thesis Def. 12 / Prop. 10), of the whole workload when ``bound_exact``, else of its
    # marginal queries only (still a valid floor).  None when not computable.
    bound_rmse: float | None = None
    bound_exact: bool = False
    objective: str = "relative"
    per_query: tuple[QueryReport, ...] = ()
    # AIM or HDMM for this workload and budget (dpsql.plan.aim.advise; public information)
    advice: str | None = None

    @property
    def flagged(self) -> tuple[QueryReport, ...]:
        return tuple(q for q in self.per_query if q.flagged)

    def per_query_lines(self, width: int = 60) -> list[str]:
        """The per-query table the CLI and the shell print: expected standard error, the
        per-query baseline, their ratio, the SVD floor of the query alone, the weight."""
        if not self.per_query:
            return []
        out = [f"objective: {self.objective} (each query against its per-query baseline)"
               if self.objective == "relative" else "objective: absolute (total squared error)",
               f"{'std err':>10} {'baseline':>10} {'ratio':>6} {'floor':>9} {'weight':>6}  query"]
        for q in self.per_query:
            text = " ".join(w for line in q.sql.splitlines()
                            if not line.strip().startswith("--") for w in line.split())
            label = f"{text} [{q.aggregate}]" if q.aggregate and q.aggregate not in text else text
            if len(label) > width:
                label = label[:width - 1] + "…"
            floor = "-" if q.floor is None else f"{q.floor:,.2f}"
            flag = "  ABOVE BASELINE" if q.flagged else ""
            out.append(f"{q.stderr:>10,.2f} {q.baseline:>10,.2f} {q.ratio:>6.2f} {floor:>9} "
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
