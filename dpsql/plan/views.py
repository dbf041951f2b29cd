"""Dividing one budget across views of the same people (issue 32; PrivateSQL §5).

The views of a people schema (``dpsql.measure.views``) share their persons, so their
measurements compose: their shares ρ_v must add up to the workload budget ρ.  With the
(discrete) Gaussian mechanism a view measured with share ρ_v has expected total squared
error

    err_v(ρ_v) = c_v / (2 ρ_v),

in the planner's objective, with c_v from the view's unit-noise expected error E_v (HDMM's
``Strategy.expected_error``: the strategy's squared sensitivity times ‖W A⁺‖²_F):
c_v = k_v²·E_v for absolute errors, k_v the view's per-person row bound (every sensitivity
is multiplied by it), and c_v = n_v·E_v for errors relative to each query's baseline, n_v
the view's number of queries (the bound multiplies the baseline too and cancels:
``dpsql.engine.people_plan.ViewCost``).  Minimising
Σ_v c_v / (2ρ_v) subject to Σ_v ρ_v = ρ (Lagrange: c_v / (2ρ_v²) equal for all v) gives

    ρ_v = ρ · √c_v / Σ_u √c_u,   total = (Σ_v √c_v)² / (2ρ),

never worse than the even split (Cauchy–Schwarz: (Σ√c_v)² ≤ n·Σc_v), and strictly better
unless every c_v is equal.  For pure DP (Laplace at ε_v = √(2ρ_v), variance 2(k_v Δ₁/ε_v)²)
the error has the same form c_v/ρ_v, so the same split is optimal.

Shares are exact :class:`~fractions.Fraction` s adding up to exactly ρ (the weights are the
float square roots taken at their exact binary values): the split is public (configuration,
workload, domains) and only decides how the budget is divided, never how much is spent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["split_budget", "expected_total", "even_total", "GroupBound", "grouped_l2_sq"]


def grouped_l2_sq(max_rows: int, max_groups: int, max_rows_per_group: int) -> int:
    """The largest Σ_γ n_γ² over integers 0 ≤ n_γ ≤ r, at most g of them non-zero, with
    Σ_γ n_γ ≤ k (k = ``max_rows``, g = ``max_groups``, r = ``max_rows_per_group``): the
    squared L2 norm of the change one person makes to a marginal that separates their
    groups (``docs/privacy.md`` §2a, "Groups per person").

    The greedy vector (r, …, r, m, 0, …) with q = min(g, ⌊k/r⌋) entries r and a remainder
    m = min(k − q·r, r) when q < g weakly majorizes every feasible vector (its top-j partial
    sums are min(j·r, k) for j ≤ g, the most any feasible vector's can be), and t ↦ t² is
    convex and increasing on t ≥ 0, so the greedy vector's Σ n² is the maximum (Schur).
    It is q·r² + m² ≤ min(k², g·r², k·r)."""
    k, g, r = int(max_rows), int(max_groups), int(max_rows_per_group)
    if k < 1 or g < 1 or r < 1:
        raise ValueError("bounds must be positive integers")
    r = min(r, k)
    q = min(g, k // r)
    m = 0 if q == g else min(k - q * r, r)
    return q * r * r + m * m


@dataclass(frozen=True)
class GroupBound:
    """A view's per-person group bound: each person keeps rows of at most ``max_groups``
    distinct values of ``attributes`` (view columns) and at most ``max_rows_per_group`` rows
    in each, on top of the view's ``max_rows`` (Tumult's MaxGroupsPerID with
    MaxRowsPerGroupPerID).  A marginal whose clique holds every one of ``attributes`` then
    moves by at most √(``grouped_l2_sq``) in L2 when one person is removed, instead of
    ``max_rows``."""

    attributes: tuple[str, ...]
    max_groups: int
    max_rows_per_group: int

    def __post_init__(self) -> None:
        if not self.attributes:
            raise ValueError("a group bound names at least one attribute")
        if self.max_groups < 1 or self.max_rows_per_group < 1:
            raise ValueError("group bounds must be positive")

    def l2_sq(self, max_rows: int) -> int:
        """The squared L2 row factor of a separating block (``grouped_l2_sq``)."""
        return grouped_l2_sq(max_rows, self.max_groups, self.max_rows_per_group)

    def describe(self) -> dict:
        return {"group_by": list(self.attributes), "max_groups": self.max_groups,
                "max_rows_per_group": self.max_rows_per_group}


def split_budget(rho: Fraction, costs: Mapping[str, float]) -> dict[str, Fraction]:
    """The shares ρ_v minimising Σ_v costs[v] / (2ρ_v) with Σ_v ρ_v = ``rho`` exactly.

    ``costs[v]`` = c_v ≥ 0 (k_v²·E_v or n_v·E_v, ``ViewCost``).  A view of cost 0 (nothing
    to measure) gets 0; when every cost is 0 the budget is split evenly."""
    rho = Fraction(rho)
    if rho <= 0:
        raise ValueError("the budget must be positive")
    for name, c in costs.items():
        if not (math.isfinite(c) and c >= 0):
            raise ValueError(f"cost of {name!r} must be finite and non-negative, got {c!r}")
    if not costs:
        return {}
    weights = {v: Fraction(math.sqrt(c)) for v, c in costs.items()}
    total = sum(weights.values(), Fraction(0))
    if total == 0:
        weights = {v: Fraction(1) for v in costs}
        total = Fraction(len(costs))
    shares = {v: rho * w / total for v, w in weights.items()}
    assert sum(shares.values(), Fraction(0)) == rho
    return shares


def expected_total(costs: Mapping[str, float], shares: Mapping[str, Fraction]) -> float:
    """Σ_v costs[v] / (2ρ_v): the total expected squared error of the views at those shares
    (a view with cost 0 adds nothing; one with cost > 0 and no share is infinite)."""
    out = 0.0
    for v, c in costs.items():
        if c == 0:
            continue
        share = shares.get(v, Fraction(0))
        if share <= 0:
            return math.inf
        out += c / (2 * float(share))
    return out


def even_total(rho: Fraction, costs: Mapping[str, float]) -> float:
    """The total at the even split, for comparison (``dpsql plan`` shows both)."""
    n = len(costs)
    return expected_total(costs, {v: Fraction(rho) / n for v in costs}) if n else 0.0
