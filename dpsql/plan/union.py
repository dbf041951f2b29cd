"""OPT_+: a union of Kronecker products, one per group of workload terms (thesis §3.5.2).

Definition 21: each group W_g is optimised by OPT_⊗ into Q_g with error E_g, and the blocks
are weighted c_g Q_g.  With group g answered from its own block only (local least squares,
§3.9 item 3), the error is Σ_g E_g / c_g² under ‖c‖₁ = 1 (Laplace) or ‖c‖₂ = 1 (Gaussian);
Lagrange multipliers give c_g ∝ E_g^{1/3} (Laplace) and c_g ∝ E_g^{1/4} (Gaussian).

Grouping: the thesis leaves clustering open and defaults to one product per group; we
group the terms that have the same support (the attributes they do not sum out), since
those share one measured marginal and OPT_⊗ over them cannot enlarge it — except that on
a large attribute counts and SUMs are kept apart: their rows differ in scale by the
column's values, and one product mixing them could not be put on a measurement lattice
of bounded size (plan/large.py).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import numpy as np

from dpsql.plan.balance import baseline_shares
from dpsql.plan.error import kron_loss
from dpsql.plan.kron import kron_strategy
from dpsql.plan.opt0 import Progress
from dpsql.plan.strategy import KronBlock
from dpsql.plan.workload import WorkloadTerms

__all__ = ["union_strategy", "group_by_support", "union_weights"]


def group_by_support(terms: WorkloadTerms) -> list[list[int]]:
    groups: OrderedDict[tuple, list[int]] = OrderedDict()
    for j, t in enumerate(terms.terms):
        # Counts and SUMs over a large attribute go to different blocks (plan/large.py).
        groups.setdefault((t.support, t.large_kinds), []).append(j)
    return list(groups.values())


def union_weights(losses, noise: str, lower=None) -> np.ndarray:
    """Block weights c minimising Σ_g E_g / c_g² (Definition 21): c ∝ E^{1/3} with
    ‖c‖₁ = 1 (Laplace) or c ∝ E^{1/4} with ‖c‖₂ = 1 (Gaussian).  A part with zero error
    still gets a positive share, so that it is measured at all.

    ``lower`` (optional) bounds each part's budget share from below — x_g = c_g²
    (Gaussian) or c_g (Laplace) — e.g. so that no query ends up worse than measured on
    its own (planner).  The constrained optimum is a water-filling: x_g =
    max(lower_g, free_g(ν)) with the free optimum's scale ν set so the shares sum to 1
    (KKT of a convex separable problem); when the bounds alone exceed the budget they
    cannot all hold and are dropped."""
    E = np.maximum(np.asarray(losses, dtype=float), 1e-300)
    free = np.cbrt(E) if noise == "laplace" else np.sqrt(E)      # shares ∝ these
    lo = None if lower is None else np.maximum(np.asarray(lower, dtype=float), 0.0)
    if lo is None or lo.sum() >= 1.0 or not np.any(lo > 0):
        x = free / free.sum()
    else:
        # Σ_g max(lo_g, t·free_g) = 1 is increasing in t: bisect on log t.
        lo_t, hi_t = 0.0, 1.0 / free.sum()
        while np.maximum(lo, hi_t * free).sum() < 1.0:
            hi_t *= 2.0
        for _ in range(200):
            mid = 0.5 * (lo_t + hi_t)
            if np.maximum(lo, mid * free).sum() < 1.0:
                lo_t = mid
            else:
                hi_t = mid
        x = np.maximum(lo, hi_t * free)
        x = x / x.sum()
    return x if noise == "laplace" else np.sqrt(x)


def union_strategy(terms: WorkloadTerms, noise: str, *, groups: list[list[int]] | None = None,
              restarts: int = 1, rng: np.random.Generator | None = None,
              progress: Progress | None = None
              ) -> tuple[tuple[KronBlock, ...], tuple[int, ...], float]:
    """OPT_+ (Definition 21): blocks, term→block assignment, local-least-squares loss."""
    rng = np.random.default_rng(0) if rng is None else rng
    groups = group_by_support(terms) if groups is None else groups
    blocks, losses = [], []
    assignment = [0] * len(terms.terms)
    term_loss = np.zeros(len(terms.terms))
    for g, members in enumerate(groups):
        sub = terms.select(members)
        block, loss = kron_strategy(sub, noise, restarts=restarts, rng=rng, progress=progress)
        blocks.append(block)
        losses.append(loss)
        if terms.parts:
            term_loss[members] = kron_loss(block, sub)
        for j in members:
            assignment[j] = g
    c = union_weights(losses, noise, baseline_shares(terms, noise, groups, term_loss))
    E = np.maximum(np.asarray(losses), 1e-300)
    weighted = tuple(replace(b, weight=b.weight * float(cg)) for b, cg in zip(blocks, c))
    return weighted, tuple(assignment), float(np.sum(E / (c * c)))
