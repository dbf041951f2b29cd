"""Out-of-model marginals from pseudo-marginals (NeurIPS 2021 §4 Problem 4, App. B.3).

A relaxed model knows pseudo-marginals τ̂_u only on the regions u of its region graph.
For a clique r inside no region the paper estimates τ̂_r by

    max H(τ_r)  subject to  τ_r ∈ argmin_{τ_r ∈ S} Σ_{u ∈ V, s = u ∩ r ≠ ∅} ‖P_{r→s} τ_r − P_{u→s} τ̂_u‖²,

maximum entropy among the minimisers of the L2 violation of local consistency.
Appendix B.3: entropic mirror descent started from the uniform distribution solves
the inner problem and lands on its maximum-entropy minimiser.  The reason is that
every iterate has log τ in log(uniform) + span{P_sᵀ}: all minimisers share the same
projections P_s τ (the objective is strictly convex in them), and the distribution of
that exponential form matching them is the maximum-entropy one.  Any step sizes keep
that form, so the step is chosen by Armijo backtracking on the mirror-descent descent
inequality f(τ') ≤ f(τ) + ⟨∇f, τ' − τ⟩ + KL(τ'‖τ)/α (relative smoothness with
respect to the entropy, which holds for α ≤ 1/(2Σ n_s) since KL ≥ ‖·‖₁²/2), and
doubled before every iteration.  When a consistent τ_r exists the minimum is zero and the answer
is Theorem 3's: the maximum-entropy τ_r consistent with τ̂.

Which regions u take part follows App. B.2 ("the same structure as the original
region graph"): every region for a saturated (or capped) graph, the singletons only
for a factor graph, where the answer is then the product of one-way marginals
(Remark 2).  Terms with the same intersection s are merged, Σ_u ‖Pτ − b_u‖² = n_s‖Pτ − b̄_s‖² +
const, so the work per iteration is one pass over τ_r per distinct intersection.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsql.pgm.factor import logsumexp
from dpsql.pgm.region_graph import RegionGraph

__all__ = ["consistency_targets", "max_entropy_marginal"]


def consistency_targets(graph: RegionGraph, probs: Sequence[np.ndarray], clique: tuple[str, ...]
                        ) -> list[tuple[tuple[int, ...], tuple[int, ...], float, np.ndarray]]:
    """For each distinct s = u ∩ r: (axes of r summed out, shape of s in r, n_s, b̄_s).

    u ranges over the regions r would be joined to (see the module docstring).

    ``clique`` is canonical; b̄_s is the mean of P_{u→s} τ̂_u over the n_s regions u
    with that intersection, laid out to broadcast against τ_r.
    """
    want = set(clique)
    touched = graph.touching(clique)
    if graph.kind == "factor":
        # App. B.2: r joins the graph with the structure the graph already has; in a
        # factor graph that is edges to the singletons only (Remark 2), so only
        # one-way marginals constrain τ_r.
        touched = [i for i in touched if len(graph.regions[i]) == 1]
    groups: dict[tuple[str, ...], list] = {}
    for i in touched:
        region = graph.regions[i]
        s = tuple(a for a in clique if a in region)
        axes = tuple(j for j, a in enumerate(region) if a not in want)
        proj = probs[i].sum(axis=axes) if axes else probs[i]
        g = groups.setdefault(s, [0, 0.0])
        g[0] += 1
        g[1] = g[1] + proj
    out = []
    for s, (count, acc) in groups.items():
        sum_axes = tuple(j for j, a in enumerate(clique) if a not in s)
        kd = tuple(graph.sizes[a] if a in s else 1 for a in clique)
        out.append((sum_axes, kd, float(count), (np.asarray(acc) / count).reshape(kd)))
    return out


def _objective(tau: np.ndarray, targets) -> tuple[float, np.ndarray]:
    value = 0.0
    grad = np.zeros_like(tau)
    for axes, _, w, b in targets:
        proj = tau.sum(axis=axes, keepdims=True) if axes else tau
        r = proj - b
        value += w * float(np.vdot(r, r))
        grad += 2.0 * w * r  # broadcasts P_sᵀ back over the summed axes
    return value, grad


def max_entropy_marginal(graph: RegionGraph, probs: Sequence[np.ndarray], clique: Sequence[str],
                         *, iters: int = 3000, tol: float = 1e-7) -> np.ndarray:
    """Problem 4's τ̂_r (a probability table over canonical ``clique``).

    Stops when an iteration moves τ_r by less than ``tol`` in L1 or after ``iters``.
    """
    clique = graph.canonical(clique)
    shape = tuple(graph.sizes[a] for a in clique)
    targets = consistency_targets(graph, probs, clique)
    lip = 2.0 * sum(w for _, _, w, _ in targets)
    z = np.full(shape, -np.log(float(np.prod(shape))))  # log τ, normalised
    tau = np.exp(z)
    value, grad = _objective(tau, targets)
    alpha = 1.0 / max(lip, 1e-300)
    for _ in range(iters):
        alpha *= 2.0
        while True:
            z_new = z - alpha * grad
            z_new -= logsumexp(z_new, tuple(range(z_new.ndim)))
            new = np.exp(z_new)
            diff = new - tau
            l1 = float(np.abs(diff).sum())
            new_value, new_grad = _objective(new, targets)
            kl = float(np.vdot(new, z_new - z))
            bound = value + float(np.vdot(grad, diff)) + kl / alpha
            if new_value <= bound + 1e-15 * max(abs(value), 1.0) or alpha <= 1e-300:
                break
            alpha *= 0.5
        z, tau, value, grad = z_new, new, new_value, new_grad
        if l1 <= tol:
            break
    return tau
