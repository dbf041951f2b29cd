"""What the planner minimises, and what each query gets (issue 16).

HDMM minimises the total squared error over the workload's rows (thesis Prop. 9).  In
absolute units that lets a SUM over incomes (rows weighted by values up to 10⁵) swamp
every count.  dpsql plans a workload of *queries* instead, each a block of rows
(``QuerySpec``), and by default weighs each query's rows by the inverse of what they
would get alone:

    objective = Σ_q w_q · Σ_{rows r of q} Var(r) / b_q

where b_q is the per-row variance of the **per-query mechanism** (every query measured on
its own, the budget split evenly over the k queries: b_q = k·Δ₂(q)² for Gaussian noise,
2k²·Δ₁(q)² for Laplace, at unit budget) and w_q a user weight (default 1).  Every row
counts by its squared error relative to its own baseline, so a count and a SUM are both
planned for relative accuracy, and on a workload of counts (Δ = 1 throughout) the
objective is the thesis' total squared error up to a constant.  The per-query mechanism
scores at most Σ_q w_q·rows_q.  It is the total squared error of a re-weighted workload —
query q's rows scaled by √(w_q / b_q) — so every HDMM operator optimises it unchanged.

A weighted total still lets the many rows of big GROUP BYs outvote a one-row filtered
count; :mod:`dpsql.plan.balance` keeps every query within its own baseline where the
operators can, and ``optimize`` prefers candidates that do (the per-query mechanism
always does).

``objective = "absolute"`` keeps the thesis objective (scale w_q: total squared error,
optionally weighted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsql.errors import UnsupportedQueryError

__all__ = ["QuerySpec", "QueryPart", "OBJECTIVES", "query_parts", "baseline_variance"]

OBJECTIVES = ("relative", "absolute")


@dataclass(frozen=True)
class QuerySpec:
    """One query of a workload: its rows over the full domain and a user weight."""

    name: str
    matrix: Any               # dpsql.linalg matrix (Union of Weighted Kron over the domain)
    weight: float = 1.0


@dataclass(frozen=True)
class QueryPart:
    """Where a query sits in the flattened workload and how the objective scales it."""

    name: str
    rows: int
    first_term: int
    num_terms: int
    sensitivity: float        # Δ_p of the query alone (p = 1 Laplace, 2 Gaussian)
    weight: float             # user weight w_q
    scale: float              # its rows' variances are multiplied by this in the objective
    baseline: float           # b_q: per-row unit variance of the per-query mechanism
    # o_q: per-row unit variance a SUM's measured binning offsets add at the whole budget (0
    # for a count); at a share t of it o_q/t, the strategy's rows then at 1 − t (plan/shares.py)
    offsets: float = 0.0

    @property
    def terms(self) -> range:
        return range(self.first_term, self.first_term + self.num_terms)


def baseline_variance(sensitivity: float, k: int, noise: str) -> float:
    """Per-row unit-noise variance of one of k queries measured on its own at budget 1/k.

    Gaussian: ρ/k each means σ² scaled by k, so k·Δ₂².  Laplace: ε/k each means the scale
    b grows k-fold, so 2·(k·Δ₁)² (the 2 of Var(Lap(b)) = 2b², as in the planner's unit
    TSE).  Either way the unit conversion to a budget is the same as for the plan
    (``PlanReport``), so ratios are budget-free.
    """
    if noise == "laplace":
        return 2.0 * (k * sensitivity) ** 2
    return k * sensitivity ** 2


def query_parts(queries: Sequence[QuerySpec], noise: str, objective: str = "relative"
                ) -> tuple[list[Any], list[QueryPart]]:
    """Scaled query matrices (to stack into the workload) and their parts."""
    from dpsql.linalg import Weighted, kron_terms

    if objective not in OBJECTIVES:
        raise UnsupportedQueryError(f"unknown planner objective {objective!r}",
                                    hint='use "relative" or "absolute"')
    p = 1 if noise == "laplace" else 2
    k = len(queries)
    mats, parts, first = [], [], 0
    for q in queries:
        w = float(q.weight)
        if not (math.isfinite(w) and w > 0):
            raise UnsupportedQueryError(f"query weight must be a positive number, got {q.weight!r}",
                                        hint="e.g. -- weight: 3 above the query")
        rows = int(q.matrix.shape[0])
        sens = float(q.matrix.sensitivity(p))
        base = baseline_variance(sens, k, noise)
        if objective == "relative":
            scale = w / base if base > 0 else w
        else:
            scale = w
        nterms = len(kron_terms(q.matrix))
        mats.append(Weighted(math.sqrt(scale), q.matrix) if scale != 1.0 else q.matrix)
        parts.append(QueryPart(q.name, rows, first, nterms, sens, w, scale, base))
        first += nterms
    return mats, parts


def part_values(parts: Sequence[QueryPart], term_tse: np.ndarray) -> np.ndarray:
    """Per query, the unweighted unit-noise total squared error over its rows."""
    return np.array([float(np.sum(term_tse[list(p.terms)])) / p.scale for p in parts])
