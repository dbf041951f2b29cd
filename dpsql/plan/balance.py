"""Keeping every query within its per-query baseline (issue 16).

The planner minimises the weighted total (``dpsql.plan.objective``), which can starve a
small query: OPT_+ and OPT_M+ give each part a budget share ∝ (its loss)^{1/2}, so a
one-row filtered count gets a sliver of the budget and a standard error above what it
would get measured on its own.  The per-query mechanism is a candidate (so the plan is
never worse *in total*), and here the structured operators are made to respect every
query's own baseline where they can:

* **Budget shares** (:func:`baseline_shares`): a part's share x_g must be at least
  max over its queries of v·L_q / (s_q B_q) — then each query's error, a sum over its
  parts of v·L_gq/x_g, is at most B_q.  ``union.union_weights`` water-fills the
  remaining budget by the unconstrained rule.
* **Marginal weights** (:func:`balanced_theta`): inside OPT_M, a query's share of the
  eigenspaces is set by its weight in κ_w (Theorem 9).  Dual ascent on the constraints
  G_q ≤ t·cap_q (t the share the marginal part will get): multiply the weights of the
  queries above their cap by (G_q / (t·cap_q))^{3/2} and re-solve; every iterate is a
  valid strategy, and the one with the best objective that satisfies the caps is kept
  (if none does, the unconstrained optimum).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dpsql.plan.marginals import MarginalSpace, opt_marginals_theta, strategy_kappa
from dpsql.plan.workload import WorkloadTerms

__all__ = ["query_caps", "cap_score", "baseline_shares", "balanced_theta", "MARGIN"]

#: Caps are tightened by this factor, so rounding factors to the grid cannot push a
#: query that was planned at its cap over it.
MARGIN = 0.995


def query_caps(terms: WorkloadTerms, noise: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(owner of each term, cap per query): the loss (weighted units, before the unit noise
    variance v) a query may have at full budget, cap_q = MARGIN·s_q·rows_q·b_q / v."""
    if not terms.parts:
        return None
    var = 2.0 if noise == "laplace" else 1.0
    owner = np.empty(len(terms.terms), dtype=int)
    for q, part in enumerate(terms.parts):
        owner[list(part.terms)] = q
    cap = np.array([MARGIN * p.scale * p.rows * p.baseline / var if p.baseline > 0 else math.inf
                    for p in terms.parts])
    return owner, cap



def cap_score(owner: np.ndarray, cap: np.ndarray) -> Callable[[np.ndarray], tuple[float, bool]]:
    """The ``score`` of :func:`balanced_theta` and ``residual.balanced_mu`` for a workload judged
    by its own caps (:func:`query_caps`): per-term losses ↦ (their sum, whether every query's
    loss — the sum over the terms it owns — is within its cap)."""
    def score(losses: np.ndarray) -> tuple[float, bool]:
        lq = np.zeros(cap.size)
        np.add.at(lq, owner, losses)
        return float(losses.sum()), bool(np.all(lq <= cap))
    return score

def baseline_shares(terms: WorkloadTerms, noise: str, parts_terms: list[list[int]],
                    term_loss: np.ndarray) -> np.ndarray | None:
    """Lower bounds on each part's share (c_g² Gaussian, c_g Laplace; see module doc).

    ``term_loss[j]`` is term j's loss when its part has the whole budget (unit weight).
    A Laplace share c enters the error squared, hence the square root."""
    caps = query_caps(terms, noise)
    if caps is None:
        return None
    owner, cap = caps
    lq = np.zeros(cap.size)
    np.add.at(lq, owner, term_loss)
    need = lq / cap
    out = np.zeros(len(parts_terms))
    for g, members in enumerate(parts_terms):
        if members:
            req = float(need[owner[members]].max())
            out[g] = math.sqrt(req) if noise == "laplace" else req
    return out


def term_losses(space: MarginalSpace, kt: np.ndarray, theta: np.ndarray, noise: str
                ) -> np.ndarray:
    """Per term, ‖θ‖²·Σ_a mult(a) κ_j(a)/κ_θ(a) (Theorem 9)."""
    ku = strategy_kappa(space, theta ** 2, space.subsets)
    mult = space.mult()
    norm = float(theta.sum()) ** 2 if noise == "laplace" else float(theta @ theta)
    ok = ku > 0
    out = kt @ np.where(ok, mult / np.where(ok, ku, 1.0), 0.0)
    bad = (kt > 0).astype(float) @ (~ok).astype(float) > 0
    return np.where(bad, math.inf, norm * out)


def balanced_theta(space: MarginalSpace, kt: np.ndarray, owner: np.ndarray, cap: np.ndarray,
                   noise: str, score: Callable[[np.ndarray], tuple[float, bool]], *,
                   target: float = 1.0, rounds: int = 6, restarts: int = 1, rng=None,
                   progress=None) -> np.ndarray:
    """OPT_M weights θ (unit sensitivity) trading the objective against the caps.

    ``kt`` holds each term's κ vector (rows; their sum is the workload's κ_w), ``owner``
    the query of each term and ``cap`` each query's cap; ``score`` maps per-term losses to
    (objective, feasible).  Returns the best feasible iterate, else the one with the
    smallest worst ratio to its cap."""
    u = np.ones(cap.size)
    best, best_key, first = None, None, None
    for r in range(max(1, rounds)):
        kw = np.asarray(kt.T @ u[owner]).ravel()
        theta, _ = opt_marginals_theta(space, kw, noise, restarts=restarts if r == 0 else 1,
                                       rng=rng, progress=progress)
        losses = term_losses(space, kt, theta, noise)
        value, feasible = score(losses)
        lq = np.zeros(cap.size)
        np.add.at(lq, owner, losses)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(cap > 0, lq / (target * cap), 0.0)
        worst = float(np.max(ratio, initial=0.0))
        key = (0, value) if feasible else (1, worst)
        first = theta if first is None else first
        if best_key is None or key < best_key:
            best, best_key = theta, key
        if not np.any(ratio > 1.0) or not np.all(np.isfinite(ratio)):
            break
        u = u * np.maximum(ratio, 1.0) ** 1.5
    # No iterate meets every cap: the unconstrained optimum (it is flagged either way, and
    # competes on the objective with the per-query candidate).
    assert best is not None and best_key is not None and first is not None   # one round at least
    return best if best_key[0] == 0 else first
