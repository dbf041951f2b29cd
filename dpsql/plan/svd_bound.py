"""The SVD bound: a lower bound on the matrix mechanism's error (thesis §3.2.2).

Definition 12: SVDB(W) = (λ_1 + … + λ_n)² / n with λ the singular values of W, i.e. the
square roots of the eigenvalues of WᵀW -- so only the gram is needed.  It lower-bounds the
unit-noise Gaussian error ‖A‖₂²·tr(WᵀW(AᵀA)⁺) of every supporting strategy (Prop. 10), and
the Laplace error divided by 2 (‖A‖₁ ≥ ‖A‖₂).  Computable cases:

* a single Kronecker product: the bound factorises (Theorem 3), with the prefix and
  all-range factors of a large attribute in closed form (``gram.RangeGram``);
* a marginal workload (every factor gram in span{I, 1}): Theorem 10;
* anything on a small domain: a dense eigendecomposition.

Other workloads return ``None`` (the thesis reports "-" there too, tables 3.4-3.5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsql.plan.gram import LowRankGram, RangeGram, span_coefficients
from dpsql.plan.marginals import MarginalSpace, marginal_svd_bound, workload_kappa
from dpsql.plan.workload import workload_terms

__all__ = ["svd_bound", "svd_lower_bound", "gram_svd_bound"]

_DENSE_LIMIT = 4096


def gram_svd_bound(V) -> float:
    """Definition 12 from a gram V = WᵀW (dense, or a large attribute's LowRankGram)."""
    if isinstance(V, (LowRankGram, RangeGram)):
        return V.svd_bound()
    span = span_coefficients(V)
    if span is not None:
        # V = b·I + c·11ᵀ: eigenvalue b on the n − 1 directions orthogonal to 1, b + c·n on 1
        n = V.shape[0]
        b, c = span
        root = (n - 1) * np.sqrt(max(b, 0.0)) + np.sqrt(max(b + c * n, 0.0))
        return float(root * root / n)
    ev = np.linalg.eigvalsh(V)
    return float(np.sqrt(np.clip(ev, 0.0, None)).sum() ** 2 / V.shape[0])


def svd_bound(W: Any) -> float | None:
    """SVDB of the workload (unit-noise Gaussian TSE lower bound), or None if unknown."""
    terms = workload_terms(W)
    if len(terms.terms) == 1:
        t = terms.terms[0]
        out = t.weight ** 2
        for g in t.grams:
            out *= gram_svd_bound(g)
        return float(out)
    if all(all(t.marginal_like) for t in terms.terms):
        space = MarginalSpace.of(terms.shape, [t.support for t in terms.terms])
        return marginal_svd_bound(space, workload_kappa(space, terms))
    if terms.size <= _DENSE_LIMIT and not any(isinstance(g, LowRankGram)
                                              for t in terms.terms for g in t.grams):
        return gram_svd_bound(terms.dense_gram())
    return None


def svd_lower_bound(W: Any) -> tuple[float, bool] | None:
    """A lower bound on every supporting strategy's unit-noise Gaussian TSE, and whether
    it is the full SVD bound.

    When the workload's own SVDB is not computable, the bound of its marginal-like terms
    is returned instead: for any A supporting W, TSE_W(A) = Σ_t TSE_{W_t}(A) ≥
    TSE_{marginal terms}(A) ≥ SVDB(marginal terms) (Prop. 10 applied to the sub-workload,
    which A also supports), so the partial bound is still a valid floor, only looser.
    ``None`` when not even that is computable (no marginal-like term).
    """
    full = svd_bound(W)
    if full is not None:
        return full, True
    terms = workload_terms(W)
    marg, _ = terms.split_marginal()
    part = svd_bound(terms.select(marg)) if marg else None
    return None if part is None else (part, False)
