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
from typing import Sequence

import numpy as np

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


def _is_residual(F: np.ndarray) -> bool:
    n = F.shape[1]
    return (F.shape[0] == n - 1 and n >= 2 and bool(np.all(F == np.round(F)))
            and bool(np.all(F.sum(axis=1) == 0)))


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
    cliques, theta2, residual, eig, rfac = [], [], {}, {}, {}
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


class JointSupport:
    """Variances of queries answered *jointly* by released marginal and residual blocks.

    A residual block alone supports no marginal (it lacks the lower-order parts), so the
    engine's one-block support test (``engine/variance.py``) would call every answer from a
    ResidualPlanner strategy inferred.  Here the released blocks that are marginals
    (identity factors on their clique) or residual blocks (one common residual factor per
    attribute) are combined by least squares in the eigenbasis above: block b with noise σ_b
    and scale s_b adds (s_b/σ_b)²·(its eigenvalue) to the information κ(a, k), and a query
    row q has variance Σ_{a,k} (q·u_{a,k})² / κ(a, k) — any query over the blocks' cliques,
    not only marginals.  Blocks outside this algebra are ignored here (the one-block test
    still uses them), so the variance is that of a valid unbiased estimate, never less.
    """

    def __init__(self, attributes, sizes, marg, resid, eig, vecs) -> None:
        self.attributes = tuple(attributes)
        self.sizes = dict(sizes)
        self.marg = marg          # list of (clique frozenset of names, info weight)
        self.resid = resid        # frozenset -> info weight (on its eigenspace)
        self.eig = eig            # name -> eigenvalues of R_iᵀR_i on 1^⊥
        self.vecs = vecs          # name -> n × (n−1) eigenvectors

    @classmethod
    def build(cls, attributes, sizes, released) -> "JointSupport | None":
        """``released``: (clique, integer factors per clique attribute, scale, σ) per block."""
        marg, resid, rfac = [], {}, {}
        for clique, factors, scale, sigma in released:
            if len(factors) != len(clique) or not sigma > 0:
                continue
            w = (scale / sigma) ** 2
            kinds = []
            for a, F in zip(clique, factors):
                F = np.asarray(F, dtype=float)
                n = sizes[a]
                if F.shape == (n, n) and np.array_equal(F, np.eye(n)):
                    kinds.append("I")
                elif _is_residual(F) and (a not in rfac or np.array_equal(rfac[a], F)):
                    kinds.append("R")
                    rfac.setdefault(a, F)
                else:
                    kinds.append(None)
            if all(k == "I" for k in kinds):
                marg.append((frozenset(clique), w))
            elif all(k == "R" for k in kinds):
                key = frozenset(clique)
                resid[key] = resid.get(key, 0.0) + w
        if not resid:
            return None            # marginals alone: the one-block test already suffices
        eig, vecs = {}, {}
        for a, F in rfac.items():
            g, U = np.linalg.eigh(F.T @ F)
            order = np.argsort(g)[1:]      # drop the zero eigenvalue of the ones direction
            eig[a], vecs[a] = np.clip(g[order], 0.0, None), U[:, order]
        return cls(attributes, sizes, marg, resid, eig, vecs)

    def _kappa_m(self, a: frozenset) -> float:
        out = 0.0
        for clique, w in self.marg:
            if a <= clique:
                out += w * math.prod(self.sizes[x] for x in self.attributes if x not in clique)
        return out

    def row_variances(self, factors: dict) -> np.ndarray | None:
        """Per row of the Kron query with these per-attribute factors (attributes absent
        are summed out), its variance; None when the blocks do not support it."""
        T = [a for a in self.attributes if a in factors]
        qs = {a: np.atleast_2d(np.asarray(factors[a], dtype=float)) for a in T}
        ones = {a: qs[a].sum(axis=1) ** 2 / self.sizes[a] for a in T}          # (q·1)²/n
        rest = {a: (qs[a] * qs[a]).sum(axis=1) - ones[a] for a in T}         # ‖P q‖²
        outer = math.prod(self.sizes[x] for x in self.attributes if x not in qs)
        total = np.zeros(tuple(qs[a].shape[0] for a in T))
        for mask in range(1 << len(T)):
            sub = [T[i] for i in range(len(T)) if mask >> i & 1]
            key = frozenset(sub)
            energy = _broadcast_outer([rest[a] if a in key else ones[a] for a in T])
            if not np.any(energy > 1e-12 * max(float(np.abs(energy).max()), 1e-300)):
                continue
            km = self._kappa_m(key)
            w = self.resid.get(key, 0.0)
            if w <= 0.0:
                if km <= 0.0:
                    return None
                total = total + energy / km
                continue
            rho = w * math.prod(self.sizes[x] for x in self.attributes if x not in key)
            # Σ_k Π_{i∈a} (q_i·u_ik)² / (κ_M(a) + ρ_a Π g_ik): contract one attribute at a
            # time, each row axis moving to the back, so they end up in T order.
            part = 1.0 / (km + rho * _outer([self.eig[a] for a in sub]))
            for a in sub:
                coef = (qs[a] @ self.vecs[a]) ** 2                     # rows × (n − 1)
                part = np.moveaxis(np.tensordot(coef, part, axes=([1], [0])), 0, -1)
            part = part.reshape([qs[a].shape[0] if a in key else 1 for a in T])
            total = total + part * _broadcast_outer([None if a in key else ones[a] for a in T])
        return (total * outer).reshape(-1)


def _outer(vectors):
    out = np.ones(())
    for v in vectors:
        out = np.multiply.outer(out, v)
    return out


def _broadcast_outer(vectors):
    """Outer product with None entries as broadcast axes of length 1."""
    out = np.ones(())
    for v in vectors:
        out = np.multiply.outer(out, np.ones(1) if v is None else v)
    return out
