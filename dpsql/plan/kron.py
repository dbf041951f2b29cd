"""OPT_⊗: a single Kronecker-product strategy for a union of Kron products (thesis §3.5).

For W = Σ_j w_j W_j and Q = Q_1 ⊗ … ⊗ Q_d the error is Σ_j w_j² Π_i e_ji with
e_ji = ‖Q_i‖²·tr(V_ji (Q_iᵀQ_i)⁺) (Theorem 4).  Definition 20 minimises it by block
coordinate descent: with every factor but Q_i fixed, the error equals that of Q_i on the
surrogate workload Ŵ_i with gram Σ_j c_j² V_ji, c_j² = w_j² Π_{i'≠i} e_ji' (Eq. 3.5), which
OPT_0 optimises.  For a single product (Definition 19) one sweep is exact.  The current
factor is kept as a candidate in each step, so the error never increases.

The p-Identity size follows §3.8: p = 1 for attributes whose sub-workloads are built from
I and T only, else n_i/16.
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.plan.gram import FactorPinv, LowRankGram, gram_trace, scaled_identity
from dpsql.plan.large import opt0_large, row_basis
from dpsql.plan.opt0 import FactorResult, Progress, opt0, semiseparable_right, sensitivity
from dpsql.plan.strategy import KronBlock
from dpsql.plan.workload import WorkloadTerms

__all__ = ["kron_strategy", "factor_errors"]


def factor_errors(A: np.ndarray, terms: WorkloadTerms, i: int, p: int) -> np.ndarray:
    """e_ji = ‖A‖_p² tr(V_ji (AᵀA)⁺) for every term j (inf if A does not support V_ji)."""
    if scaled_identity(A) == 1.0:
        return np.array([gram_trace(t.grams[i]) for t in terms.terms])
    pinv = FactorPinv.of(A)
    s2 = sensitivity(A, p) ** 2
    cache: dict[int, float] = {}
    out = np.empty(len(terms.terms))
    for j, t in enumerate(terms.terms):
        V = t.grams[i]
        val = cache.get(id(V))
        if val is None:
            val = s2 * pinv.trace(V)
            cache[id(V)] = val
        out[j] = val
    return out


def _fast_right(terms: WorkloadTerms, i: int, coeffs: np.ndarray):
    """T ↦ T·V̂_i in O(pn) when the surrogate gram is one semiseparable gram (Prefix,
    AllRange; linalg keeps those as G[i,j] = a[min]·b[max])."""
    live = [j for j in range(len(terms.terms)) if coeffs[j] != 0]
    if len(live) != 1 or not terms.terms[live[0]].structured:
        return None
    g = terms.terms[live[0]].structured[i]
    if g is None or type(g).__name__ != "Semiseparable":
        return None
    return semiseparable_right(coeffs[live[0]] ** 2 * np.asarray(g.a), np.asarray(g.b))


def _p_for(terms: WorkloadTerms, i: int) -> int:
    n = terms.shape[i]
    if all(t.marginal_like[i] for t in terms.terms):
        return 1
    return max(1, n // 16)


def kron_strategy(terms: WorkloadTerms, noise: str, *, restarts: int = 1,
             rng: np.random.Generator | None = None, rounds: int = 10, tol: float = 1e-4,
             progress: Progress | None = None) -> tuple[KronBlock, float]:
    """OPT_⊗ (Definitions 19-20): returns the unit-sensitivity block and Σ_j w_j² Π_i e_ji."""
    rng = np.random.default_rng(0) if rng is None else rng
    p_norm = 1 if noise == "laplace" else 2
    d = len(terms.shape)
    w2 = np.array([t.weight ** 2 for t in terms.terms])
    # A large attribute (LowRankGram) starts from its workload rows (row_basis), the rest
    # from the identity; bases[i] records the integer basis a large factor is C·S over.
    factors: list[np.ndarray] = []
    bases: list[np.ndarray | None] = []
    for i, n in enumerate(terms.shape):
        g = terms.attribute_gram(i) if isinstance(terms.terms[0].grams[i], LowRankGram) else None
        if isinstance(g, LowRankGram):
            S = row_basis(g.rows)
            if not S.size:
                S = np.zeros((1, n))
            factors.append(S)
            bases.append(S)
        else:
            factors.append(np.eye(n))
            bases.append(None)
    E = np.column_stack([factor_errors(factors[i], terms, i, p_norm) for i in range(d)])
    best = float(np.sum(w2 * np.prod(E, axis=1)))
    sweeps = 1 if len(terms.terms) == 1 else rounds
    for sweep in range(sweeps):
        before = best
        for i in range(d):
            others = np.prod(np.delete(E, i, axis=1), axis=1) if d > 1 else np.ones(len(w2))
            coeffs = np.sqrt(w2 * others)
            if not np.all(np.isfinite(coeffs)):
                continue
            V = terms.attribute_gram(i, coeffs)
            basis = None
            if isinstance(V, LowRankGram):
                cand, basis = opt0_large(V, noise, progress=progress)
            else:
                cand = opt0(V, noise, p=_p_for(terms, i), restarts=restarts, rng=rng,
                            progress=progress, right=_fast_right(terms, i, coeffs))
            current = FactorResult(factors[i], float(np.sum(coeffs ** 2 * E[:, i])), "current")
            if cand.loss < current.loss * (1 - 1e-12):
                factors[i] = cand.matrix
                bases[i] = basis
                if len(w2) == 1:
                    # One term: OPT_0's loss on c²V is exactly c²·e, no second inverse.
                    E[0, i] = cand.loss / coeffs[0] ** 2
                else:
                    E[:, i] = factor_errors(cand.matrix, terms, i, p_norm)
            best = float(np.sum(w2 * np.prod(E, axis=1)))
            if progress is not None:
                progress("opt_kron", sweep * d + i + 1, best)
        if before - best <= tol * best:
            break
    sens = math.prod(sensitivity(F, p_norm) for F in factors)
    return KronBlock(1.0 / sens, tuple(factors), bases=tuple(bases)), best
