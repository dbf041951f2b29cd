"""ResidualPlanner (Xiao, He, Zhang, Kifer; NeurIPS 2023): the optimal Gaussian strategy for
marginal workloads, with a certificate, realised with OPT_M's integer marginals where
possible (issue 16).

Facts used (the code is written here):

* The marginal workload's gram has eigenvalue κ_w(a) on the eigenspace of each attribute
  subset a, of dimension mult(a) = Π_{i∈a}(n_i − 1) (thesis Theorems 7-8).  The workload is
  invariant under permuting each attribute's values, so by convexity an optimal strategy
  gram X can be taken invariant too, i.e. in the same algebra: X = Σ_a μ_a E_a.  Its column
  norm² is Σ_a μ_a mult(a)/N (N the domain size) and its error Σ_a mult(a) κ_w(a)/μ_a, so
  with the norm fixed the optimum is μ_a ∝ √κ_w(a) (Cauchy–Schwarz: ResidualPlanner's
  closed form for the sum of variances), and the error equals (Σ_a mult(a)√κ_w(a))²/N —
  exactly the SVD bound of the workload (Theorem 10).  The bound is a floor for *every*
  strategy (Prop. 10), so reaching it is the optimality certificate.
* ResidualPlanner measures, for each subset a, the residual query ⊗_{i∈a} R_i ⊗_{i∉a} 1ᵀ
  (R_i spanning 1^⊥), whose gram lies on the single eigenspace a; weights give any μ.
  OPT_M's marginal blocks reach only μ = Y·θ² with θ² ≥ 0 (Theorem 11), which is why it
  can miss the bound (2x on nltcs all 3-way marginals).

Realisation.  Any split μ_a = Σ_{b⊇a} c(b)·t_b + ρ_a with marginal weights t ≥ 0 and
residual parts ρ ≥ 0 gives the same X, hence the same error and sensitivity.  A linear
program (HiGHS via scipy) maximises the marginal mass Σ_b t_b, so the strategy is OPT_M's
— integer marginals, each answering its own queries — whenever OPT_M is optimal, and
residual blocks fill in only what marginals cannot.  Residual factors are integer
(``algebra.residual_factor``), so nothing is rounded at measurement; their error is
evaluated exactly (``algebra.AlgebraForm``), within ~10⁻⁶ of the certificate.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import scipy.optimize as so
import scipy.sparse as sp

from dpsql.plan.algebra import residual_factor
from dpsql.plan.marginals import MarginalSpace, workload_kappa
from dpsql.plan.strategy import KronBlock, eye_factor, ones_factor

__all__ = ["residual_mu", "split_marginal_residual", "residual_blocks", "balanced_mu"]


def residual_mu(space: MarginalSpace, kappa_w: np.ndarray) -> np.ndarray:
    """μ_a ∝ √κ_w(a), scaled to unit sensitivity Σ_a μ_a mult(a)/N = 1 (in logs: N can
    exceed 10¹⁸)."""
    root = np.sqrt(np.clip(kappa_w, 0.0, None))
    total = float(np.sum(space.mult() * root))
    if total <= 0:
        return root
    log_n = float(np.sum(np.log(np.asarray(space.shape, dtype=float))))
    return root * math.exp(log_n - math.log(total))


def term_losses(space: MarginalSpace, kt: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Per term Σ_a mult(a) κ_j(a)/μ_a at the sensitivity of μ."""
    mult = space.mult()
    log_n = float(np.sum(np.log(np.asarray(space.shape, dtype=float))))
    sens2 = float(np.sum(mu * mult)) * math.exp(-log_n)
    ok = mu > 0
    out = kt @ np.where(ok, mult / np.where(ok, mu, 1.0), 0.0)
    bad = (kt > 0).astype(float) @ (~ok).astype(float) > 0
    return np.where(bad, math.inf, sens2 * out)


def balanced_mu(space: MarginalSpace, kt: np.ndarray, owner: np.ndarray, cap: np.ndarray,
                score: Callable[[np.ndarray], tuple[float, bool]], *, target: float = 1.0,
                rounds: int = 8) -> np.ndarray:
    """μ for the re-weighted workload Σ_q u_q κ_q, with u raised by dual ascent on the
    per-query caps (as ``balance.balanced_theta`` does for OPT_M; here every step is closed
    form).  Returns the best iterate that meets the caps, else the unweighted optimum."""
    u = np.ones(cap.size)
    first = best = None
    best_value = math.inf
    for _ in range(max(1, rounds)):
        mu = residual_mu(space, np.asarray(kt.T @ u[owner]).ravel())
        losses = term_losses(space, kt, mu)
        value, feasible = score(losses)
        first = mu if first is None else first
        if feasible and value < best_value:
            best, best_value = mu, value
        lq = np.zeros(cap.size)
        np.add.at(lq, owner, losses)
        ratio = lq / (target * cap)
        if not np.any(ratio > 1.0):
            break
        u = u * np.maximum(ratio, 1.0) ** 2
    return best if best is not None else first


def split_marginal_residual(space: MarginalSpace, mu: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray]:
    """(t, ρ): marginal weights² t_b ≥ 0 and residual parts ρ_a ≥ 0 with
    Σ_{b⊇a} c(b) t_b + ρ_a = μ_a, maximising Σ_b t_b (module docstring)."""
    S = space.size
    sub = space.subset_matrix()                      # sub[a, b] = 1 when a ⊆ b
    c = np.exp(space.log_c())
    live = mu > 0
    t = np.zeros(S)
    if live.any():
        # Variables v_b = c(b)·t_b/μ_b (b with μ_b > 0; t_b = 0 otherwise, since the
        # constraint at a = b caps it by μ_b), rows divided by μ_a: coefficients are
        # ratios μ_b/μ_a of nearby subsets instead of 10¹⁸-wide c(b).
        idx = np.flatnonzero(live)
        A = sp.diags(1.0 / mu[idx]) @ sub[idx][:, idx] @ sp.diags(mu[idx])
        obj = -(mu[idx] / c[idx])
        obj = obj / np.abs(obj).max()
        try:
            res = so.linprog(obj, A_ub=sp.csr_matrix(A), b_ub=np.ones(idx.size),
                             bounds=(0, None), method="highs")
            if res.status == 0:
                t[idx] = np.clip(res.x, 0.0, None) * mu[idx] / c[idx]
        except ValueError:
            pass
    km = sub @ (c * t)
    over = km > mu * (1 + 1e-9)
    if np.any(over):         # solver tolerance: scale the marginal part back inside
        t *= float(np.min(np.where(km > 0, mu / np.maximum(km, 1e-300), np.inf)))
        km = sub @ (c * t)
    rho = np.clip(mu - km, 0.0, None)
    rho[rho <= 1e-9 * np.maximum(mu, 1e-300)] = 0.0
    return t, rho


def residual_blocks(space: MarginalSpace, t: np.ndarray, rho: np.ndarray) -> list[KronBlock]:
    """Marginal blocks (weight √t_b) and residual blocks (integer R_i on a, totals
    elsewhere; weight chosen so the block's gram is ρ_a·E_a on average over its
    eigenspace, i.e. ρ_a / Π_{i∈a} mean eigenvalue of R_iᵀR_i), before normalisation."""
    shape = space.shape
    R = {}
    blocks = []
    log_c = space.log_c()
    for s, a in enumerate(space.subsets):
        if t[s] > 0:
            factors = tuple(eye_factor(n) if i in a else ones_factor(n) for i, n in enumerate(shape))
            blocks.append(KronBlock(math.sqrt(t[s]), factors))
    for s, a in enumerate(space.subsets):
        if rho[s] <= 0:
            continue
        factors, scale = [], 1.0
        for i, n in enumerate(shape):
            if i in a:
                if i not in R:
                    R[i] = residual_factor(n)
                factors.append(R[i])
                scale *= float(np.sum(R[i] * R[i])) / (n - 1)
            else:
                factors.append(ones_factor(n))
        c_a = math.exp(log_c[s])
        blocks.append(KronBlock(math.sqrt(rho[s] / (c_a * scale)), tuple(factors)))
    return blocks
