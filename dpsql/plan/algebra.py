"""Marginal and residual strategies in one eigenbasis (thesis Theorems 7-9, ResidualPlanner).

A marginal block (identity on its clique, totals elsewhere; thesis Definition 24) has a gram
in the algebra spanned by C(b) = ⊗_i (I if i ∈ b else 11ᵀ), whose eigenspaces are indexed by
attribute subsets a (Theorem 7).  ResidualPlanner (Xiao, He, Zhang, Kifer, NeurIPS 2023)
measures *residual* queries instead: on a subset a, the Kron of per-attribute residual
factors R_i — rows orthogonal to the all-ones vector, spanning 1^⊥ — with totals on the
other attributes.  Its gram lives on the single eigenspace a.  With one residual factor per
attribute, R_iᵀR_i commutes with I and 11ᵀ (R_i 1 = 0), so every block of a strategy mixing
marginal and residual blocks is diagonal in one product basis: on attribute i, the ones
direction and the eigenvectors of R_iᵀR_i on 1^⊥ (eigenvalues g_i1 … g_i,n_i−1).  On the
basis vector (a, k) the strategy gram has eigenvalue

    κ(a, k) = κ_M(a) + ρ_a · Π_{i∈a} g_{i,k_i}

with κ_M(a) = Σ_{b ⊇ a} θ_b² c(b) from the marginal blocks (Theorem 9) and ρ_a the residual
block's weight² times Π_{i∉a} (its totals' n_i).  A marginal-like workload term (per
attribute in span{I, 1}) has eigenvalue κ_j(a) on the whole eigenspace a, so its trace is
Σ_a κ_j(a) Σ_k 1/κ(a, k) — exact for the *integer* residual factors the planner measures,
which are only approximately orthonormal (``residual_factor``).

This is the error of every such strategy, OPT_M's included (no residual blocks: the inner
sum is mult(a)/κ_M(a), Theorem 9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from dpsql.plan.joint import JointSupport, _is_residual
from dpsql.plan.marginals import MarginalSpace, strategy_kappa, term_kappas
from dpsql.plan.strategy import KronBlock, factor_kind

__all__ = ["residual_factor", "AlgebraForm", "algebra_form", "JointSupport", "RESIDUAL_SCALE"]

#: Residual factors are integer, their largest entry this big: the rows are the DCT-II basis
#: of 1^⊥ rounded at relative precision 2⁻¹⁰, then made to sum to exactly zero.
RESIDUAL_SCALE = 1024

#: Eigenspaces with more basis vectors than this are summed with the mean eigenvalue of each
#: residual factor instead of exactly (the factors are orthonormal to 2⁻¹⁰, so the error of
#: that approximation is of order 10⁻⁶ relative).
EXACT_GRID = 1 << 22


def residual_factor(n: int) -> np.ndarray:
    """An integer (n−1)×n matrix whose rows are orthogonal to 1 and span 1^⊥, nearly
    orthogonal with equal norms: the DCT-II basis without its constant row, scaled to
    RESIDUAL_SCALE, rounded, with each row's sum moved off its largest entry (so R·1 = 0
    exactly) and divided by the common gcd ([1, −1] for a binary attribute)."""
    if n < 2:
        return np.zeros((0, n))
    j = np.arange(n)
    k = np.arange(1, n)[:, None]
    Q = np.cos(np.pi * (2 * j[None, :] + 1) * k / (2 * n))
    R = np.round(Q * (RESIDUAL_SCALE / np.abs(Q).max()))
    top = np.argmax(np.abs(R), axis=1)
    R[np.arange(n - 1), top] -= R.sum(axis=1)
    g = int(np.gcd.reduce(np.abs(R).astype(np.int64).ravel()))
    return R / max(g, 1)


@dataclass(frozen=True, eq=False)
class AlgebraForm:
    """A strategy of marginal blocks (cliques, θ²·c-weights) and residual blocks."""

    shape: tuple[int, ...]
    cliques: tuple[frozenset[int], ...]        # marginal blocks
    theta2: np.ndarray                         # their weight² (Theorem 9's u)
    residual: dict                             # subset a -> ρ_a
    eig: dict                                  # attribute -> eigenvalues g_i (n_i − 1)

    def traces(self, terms) -> np.ndarray:
        """Per term, Σ_a κ_j(a) Σ_k 1/κ(a, k) (inf where the strategy misses a needed a)."""
        space = MarginalSpace.of(self.shape, [t.support for t in terms.terms])
        km = strategy_kappa(space, self.theta2, self.cliques) if self.cliques else \
            np.zeros(space.size)
        mult = space.mult()
        inv = np.empty(space.size)         # Σ_k 1/κ(a, k)
        for s, a in enumerate(space.subsets):
            inv[s] = self._inverse_sum(a, float(km[s]), float(mult[s]))
        kt = term_kappas(space, terms)                 # sparse, positive entries only
        finite = np.isfinite(inv)
        out = kt @ np.where(finite, inv, 0.0)
        bad = (kt > 0).astype(float) @ (~finite).astype(float) > 0
        return np.where(bad, math.inf, out)

    def _inverse_sum(self, a: frozenset, km: float, mult: float) -> float:
        rho = self.residual.get(a, 0.0)
        if rho <= 0.0:
            return mult / km if km > 0 else (0.0 if mult == 0 else math.inf)
        attrs = sorted(a)
        if km <= 0.0:      # the residual block alone: the sum factorises over attributes
            return math.prod(float(np.sum(1.0 / self.eig[i])) for i in attrs) / rho
        if mult > EXACT_GRID:
            prod = rho * math.prod(float(np.mean(self.eig[i])) for i in attrs)
            return mult / (km + prod)
        tensor = np.ones(())
        for i in attrs:
            tensor = np.multiply.outer(tensor, self.eig[i])
        return float(np.sum(1.0 / (km + rho * tensor)))


def algebra_form(blocks: Sequence[KronBlock], shape: Sequence[int]) -> AlgebraForm | None:
    """The blocks as an AlgebraForm, or None when some block is neither a marginal (I/1ᵀ
    factors) nor a residual block (one common residual factor per attribute on its clique,
    totals elsewhere)."""
    cliques: list = []
    theta2: list = []
    residual: dict = {}
    eig: dict = {}
    rfac: dict = {}
    for b in blocks:
        kinds = [factor_kind(F) for F in b.factors]
        if all(k != "other" for k, _ in kinds):
            clique, w2 = [], b.weight ** 2
            for i, (k, c) in enumerate(kinds):
                w2 *= c * c
                if k == "identity":
                    clique.append(i)
            cliques.append(frozenset(clique))
            theta2.append(w2)
            continue
        a, rho = [], b.weight ** 2
        for i, ((k, c), F) in enumerate(zip(kinds, b.factors)):
            if k == "total":
                rho *= c * c * F.shape[1]
            elif k == "other" and _is_residual(F):
                if i in rfac and not np.array_equal(rfac[i], F):
                    return None
                rfac[i] = F
                a.append(i)
            else:
                return None
        key = frozenset(a)
        residual[key] = residual.get(key, 0.0) + rho
    for i, F in rfac.items():
        eig[i] = np.clip(np.linalg.eigvalsh(F @ F.T), 0.0, None)
        if np.any(eig[i] <= 0):
            return None
    return AlgebraForm(tuple(int(n) for n in shape), tuple(cliques), np.asarray(theta2, dtype=float),
                       residual, eig)
