"""Standard errors of answers from released marginal and residual blocks together.

ResidualPlanner strategies (``plan/residual.py``) measure residual blocks that support no
marginal alone; :class:`JointSupport` combines them with the marginal blocks by least
squares in the product eigenbasis of ``plan/algebra.py`` (thesis Theorems 7-9).  It lives
apart from the planner's algebra so that a process answering from a saved model imports
numpy only (issue 17), and it decomposes each attribute's residual factor on first use:
a query that one block supports alone never needs it.
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.linalg.lattice import scaled_identity

__all__ = ["JointSupport"]


def _is_residual(F: np.ndarray) -> bool:
    n = F.shape[1]
    return (F.shape[0] == n - 1 and n >= 2 and bool(np.all(F == np.round(F)))
            and bool(np.all(F.sum(axis=1) == 0)))


class JointSupport:
    """Variances of queries answered *jointly* by released marginal and residual blocks.

    A residual block alone supports no marginal (it lacks the lower-order parts), so the
    engine's one-block support test (``engine/variance.py``) would call every answer from a
    ResidualPlanner strategy inferred.  Here the released blocks that are marginals
    (identity factors on their clique) or residual blocks (one common residual factor per
    attribute) are combined by least squares in the eigenbasis of ``plan/algebra.py``: block b with noise σ_b
    and scale s_b adds (s_b/σ_b)²·(its eigenvalue) to the information κ(a, k), and a query
    row q has variance Σ_{a,k} (q·u_{a,k})² / κ(a, k) — any query over the blocks' cliques,
    not only marginals.  Blocks outside this algebra are ignored here (the one-block test
    still uses them), so the variance is that of a valid unbiased estimate, never less.
    """

    def __init__(self, attributes, sizes, marg, resid, factors) -> None:
        self.attributes = tuple(attributes)
        self.sizes = dict(sizes)
        self.marg = marg          # list of (clique frozenset of names, info weight)
        self.resid = resid        # frozenset -> info weight (on its eigenspace)
        self.factors = factors    # name -> its residual factor R_i
        self._basis: dict = {}    # name -> (eigenvalues of R_iᵀR_i on 1^⊥, n × (n−1) eigenvectors)

    def basis(self, a: str) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues and eigenvectors of R_aᵀR_a on 1^⊥, computed on first use (an
        eigendecomposition per attribute; queries one block supports never ask)."""
        got = self._basis.get(a)
        if got is None:
            F = self.factors[a]
            g, U = np.linalg.eigh(F.T @ F)
            order = np.argsort(g)[1:]      # drop the zero eigenvalue of the ones direction
            got = self._basis[a] = (np.clip(g[order], 0.0, None), U[:, order])
        return got

    @classmethod
    def build(cls, attributes, sizes, released) -> JointSupport | None:
        """``released``: (clique, integer factors per clique attribute, scale, σ) per block."""
        marg: list = []
        resid: dict = {}
        rfac: dict[str, np.ndarray] = {}
        for clique, factors, scale, sigma in released:
            if len(factors) != len(clique) or not sigma > 0:
                continue
            w = (scale / sigma) ** 2
            kinds: list[str | None] = []
            for a, F in zip(clique, factors):
                n = sizes[a]
                if F.shape == (n, n) and scaled_identity(F) == 1.0:
                    kinds.append("I")          # (read from a payload: the record, not n² floats)
                    continue
                F = np.asarray(F, dtype=float)
                if _is_residual(F) and (a not in rfac or np.array_equal(rfac[a], F)):
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
        return cls(attributes, sizes, marg, resid, rfac)

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
            part = 1.0 / (km + rho * _outer([self.basis(a)[0] for a in sub]))
            for a in sub:
                coef = (qs[a] @ self.basis(a)[1]) ** 2                     # rows × (n − 1)
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
