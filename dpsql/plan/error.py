"""The error model, in one place (thesis Prop. 9, §3.5 Theorem 4, §3.7 Theorem 9, §3.10).

``expected_error(W, A, noise)`` is the unit-noise total squared error of answering W by
least squares from the strategy A:  2·‖A‖₁²·tr(WᵀW(AᵀA)⁺) for Laplace noise of scale 1 and
‖A‖₂²·tr(WᵀW(AᵀA)⁺) for Gaussian noise with σ = 1.  It is computed from structured grams:

* A one Kronecker product: tr factorises over attributes (Theorem 4);
* A a union of (weighted) marginal queries: the marginals algebra (Theorem 9);
* any other union on a small domain: dense n×n grams;
* any other union on a large domain: *local* least squares (§3.9) -- each workload term is
  answered from the single block that supports it best.  This is the error the OPT_+
  reconstruction achieves and an upper bound on the global least-squares error; for
  OPT_M+ (assignment −1) the marginal terms are answered jointly by the marginal blocks
  (Theorem 9 on those blocks) and the others locally.

``rmse`` converts to RMSE = sqrt(TSE/m) for a concrete budget (thesis §3.10 convention),
and ``per_query_variance`` gives the variance of each workload answer (for standard errors).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsql.errors import UnsupportedQueryError
from dpsql.plan.calibration import gaussian_sigma, laplace_scale
from dpsql.plan.algebra import algebra_form
from dpsql.linalg.rowscaled import GramPinv
from dpsql.plan.gram import FactorPinv, LowRankGram, psd_root
from dpsql.plan.strategy import KronBlock, Strategy, union_sensitivity
from dpsql.plan.workload import WorkloadTerms, factor_dense, workload_terms

__all__ = ["expected_error", "query_tse", "rmse", "per_query_variance", "strategy_tse", "term_errors",
           "query_errors",
           "noise_norm",
           "strategy_blocks", "DENSE_LIMIT"]

#: Largest full domain on which a general union strategy is evaluated densely.
DENSE_LIMIT = 2048


def noise_norm(noise: str) -> int:
    """Sensitivity norm of a noise family: 1 for Laplace, 2 for Gaussian."""
    if noise == "laplace":
        return 1
    if noise == "gaussian":
        return 2
    raise UnsupportedQueryError(f"unknown noise {noise!r}", hint="use 'laplace' or 'gaussian'")


def _unit_variance(noise: str) -> float:
    return 2.0 if noise_norm(noise) == 1 else 1.0


def strategy_blocks(A: Any) -> tuple[tuple[KronBlock, ...], tuple[int, ...] | None]:
    """Dense Kron blocks (and OPT_+ assignment) of a Strategy, linalg matrix or array."""
    if isinstance(A, Strategy):
        return A.kron_blocks, A.assignment
    if isinstance(A, np.ndarray):
        return (KronBlock(1.0, (np.atleast_2d(np.asarray(A, dtype=float)),)),), None
    from dpsql.linalg import kron_terms

    return tuple(KronBlock(float(w), tuple(factor_dense(f) for f in fs))
                 for w, fs in kron_terms(A)), None


def _factor_traces(block: KronBlock, terms: WorkloadTerms) -> np.ndarray:
    """t[j, i] = tr(V_ji (F_iᵀF_i)⁺), inf where factor i does not support term j."""
    k, d = len(terms.terms), len(terms.shape)
    out = np.empty((k, d))
    for i, F in enumerate(block.factors):
        pinv = FactorPinv.of(F)
        cache: dict[int, float] = {}
        for j, t in enumerate(terms.terms):
            V = t.grams[i]
            val = cache.get(id(V))
            if val is None:
                val = pinv.trace(V)
                cache[id(V)] = val
            out[j, i] = val
    return out


def kron_loss(block: KronBlock, terms: WorkloadTerms) -> np.ndarray:
    """Per-term Σ-free loss w_j² Π_i tr(V_ji X_i⁺) / weight² (Theorem 4 summands)."""
    tr = _factor_traces(block, terms)
    w2 = np.array([t.weight ** 2 for t in terms.terms])
    with np.errstate(invalid="ignore"):
        return w2 * np.prod(tr, axis=1) / block.weight ** 2


def _algebra(terms: WorkloadTerms, blocks: Sequence[KronBlock]):
    """The blocks' AlgebraForm when it evaluates these terms exactly: always for marginal
    blocks (Theorem 9 holds for any term, through its projection onto span{I, 1}); with
    residual blocks only for marginal-like terms (their algebra is larger)."""
    form = algebra_form(blocks, terms.shape)
    if form is None:
        return None
    if form.residual and not all(all(t.marginal_like) for t in terms.terms):
        return None
    return form


def _dense_union(blocks: Sequence[KronBlock]) -> np.ndarray:
    """The union's rows w_b·⊗_i F_i, dense (small domains)."""
    rows = []
    for b in blocks:
        M = np.ones((1, 1))
        for F in b.factors:
            M = np.kron(M, F)
        rows.append(b.weight * M)
    return np.vstack(rows)


def _term_roots(term: Any) -> list[np.ndarray]:
    """R_i with R_iᵀR_i = V_i per attribute of one workload term (V = w²·⊗_i V_i)."""
    return [psd_root(g.dense() if isinstance(g, LowRankGram) else g) for g in term.grams]


def _dense_traces(terms: WorkloadTerms, blocks: Sequence[KronBlock]) -> np.ndarray:
    """tr(V_j (AᵀA)⁺) per term for a union strategy on a small domain, as w²‖(⊗R_i) L‖²_F
    with (AᵀA)⁺ = L Lᵀ from the stacked rows (``GramPinv``).  The eigenvalues of AᵀA cut at
    1e-10·n dropped a rounded block's light rows (2²² below its heavy ones: 2⁻⁴⁴ in AᵀA) and
    called the queries they support unsupported, and Σ V∘(AᵀA)⁺ cancels entries ~1/d_min²
    down to ~1/d_max² (issue 28)."""
    from dpsql.linalg import Explicit, kron_matmat

    g = GramPinv(_dense_union(blocks))
    out = np.empty(len(terms.terms))
    for j, t in enumerate(terms.terms):
        roots = _term_roots(t)
        ops = [Explicit(R) for R in roots]
        # V is supported iff it vanishes on null(AᵀA), iff ‖R‖² = ‖R Q_b‖² (Q_b: row space)
        whole = math.prod(float(np.sum(R * R)) for R in roots)
        inside = float(np.sum(kron_matmat(ops, g.basis) ** 2))
        if whole - inside > 1e-9 * max(whole, 1e-300):
            out[j] = math.inf
        else:
            out[j] = t.weight ** 2 * float(np.sum(kron_matmat(ops, g.factor) ** 2))
    return out


def _mixed_traces(terms: WorkloadTerms, blocks: Sequence[KronBlock],
                  assignment: Sequence[int]) -> np.ndarray:
    """OPT_M+ (planner.opt_marginals_plus): terms assigned −1 are answered jointly by the
    marginal-form blocks no other term is assigned to; the rest by their own block."""
    own = {a for a in assignment if a >= 0}
    marg = [b for i, b in enumerate(blocks) if i not in own]
    out = np.full(len(terms.terms), math.inf)
    joint = [j for j, a in enumerate(assignment) if a < 0]
    form = _algebra(terms.select(joint), marg) if joint else None
    if form is not None:
        out[joint] = form.traces(terms.select(joint))
    for j, a in enumerate(assignment):
        if a >= 0:
            out[j] = float(kron_loss(blocks[a], terms.select([j]))[0])
    return out


def term_errors(terms: WorkloadTerms, blocks: Sequence[KronBlock], noise: str,
                assignment: Sequence[int] | None = None,
                shape: Sequence[int] | None = None) -> np.ndarray:
    """Unit-noise TSE of each workload term under the blocks (see module docstring)."""
    p = noise_norm(noise)
    shape = terms.shape if shape is None else tuple(shape)
    if tuple(shape) != tuple(terms.shape):
        raise UnsupportedQueryError("strategy and workload are over different domains")
    sens = union_sensitivity(blocks, shape, p)
    if len(blocks) == 1:
        trace = kron_loss(blocks[0], terms)
    else:
        form = _algebra(terms, blocks)
        if form is not None:
            trace = form.traces(terms)
        elif terms.size <= DENSE_LIMIT:
            trace = _dense_traces(terms, blocks)
        elif assignment is not None and any(a < 0 for a in assignment):
            trace = _mixed_traces(terms, blocks, assignment)
        elif assignment is not None:
            trace = np.empty(len(terms.terms))
            for a in set(assignment):
                mine = [j for j, aa in enumerate(assignment) if aa == a]
                trace[mine] = kron_loss(blocks[a], terms.select(mine))
        else:
            trace = np.array([kron_loss(b, terms) for b in blocks]).min(axis=0)  # blocks × terms
    with np.errstate(invalid="ignore"):
        out = _unit_variance(noise) * sens * sens * np.asarray(trace, dtype=float)
    return np.where(np.isnan(out), math.inf, out)


def strategy_tse(terms: WorkloadTerms, blocks: Sequence[KronBlock], noise: str,
                 assignment: Sequence[int] | None = None,
                 shape: Sequence[int] | None = None) -> float:
    """Unit-noise TSE of the blocks on the flattened workload: Σ of :func:`term_errors`."""
    return float(np.sum(term_errors(terms, blocks, noise, assignment, shape)))


#: Largest attribute whose per-query SVD floor is computed (one eigvalsh per factor).
FLOOR_CELLS = 2048


def query_tse(strategy: Strategy) -> np.ndarray | None:
    """Per query of a workload built by ``Workload.of_queries``, its unweighted unit-noise
    total squared error under the strategy (None without query parts)."""
    from dpsql.plan.objective import part_values

    terms = strategy.workload
    if terms is None or not terms.parts:
        return None
    errs = (np.asarray(strategy.term_tse) if strategy.term_tse is not None else
            term_errors(terms, strategy.kron_blocks, strategy.noise, strategy.assignment))
    return part_values(terms.parts, errs)


def query_errors(strategy: Strategy) -> list[tuple[float, float, float | None]]:
    """Per query of a workload built by ``Workload.of_queries``: its unit-noise total
    squared error under the strategy, the per-query mechanism's (rows·b_q), and the SVD
    bound of the query alone (a floor no strategy beats with unbiased answers; None when
    not computable).  All unweighted: the objective's scales are divided out."""
    from dpsql.plan.svd_bound import svd_bound

    terms = strategy.workload
    tse = query_tse(strategy)
    if terms is None or tse is None:
        return []
    out = []
    for part, value in zip(terms.parts, tse):
        sub = terms.select(list(part.terms))
        floor = None
        if all(isinstance(g, LowRankGram) or g.shape[0] <= FLOOR_CELLS
               for t in sub.terms for g in t.grams):
            b = svd_bound(sub)
            floor = None if b is None else b / part.scale
        out.append((float(value), part.rows * part.baseline, floor))
    return out


def expected_error(W: Any, A: Any, noise: str = "gaussian") -> float:
    """Unit-noise total squared error of strategy A on workload W (thesis Prop. 9)."""
    terms = workload_terms(W)
    blocks, assignment = strategy_blocks(A)
    if isinstance(A, Strategy) and A.workload is not None and A.workload is terms \
            and A.noise == noise:
        return A.expected_error
    return strategy_tse(terms, blocks, noise, assignment)


def _variance_scale(noise: str, epsilon: float, delta: float | None, calibration: str) -> float:
    """Noise variance per unit of sensitivity² relative to the unit-noise convention."""
    if noise_norm(noise) == 1:
        return laplace_scale(epsilon) ** 2        # TSE already carries the 2 of Var(Lap(b))
    if delta is None:
        raise UnsupportedQueryError("Gaussian noise needs delta",
                                    hint="pass delta, e.g. 1e-6")
    return gaussian_sigma(epsilon, delta, calibration) ** 2


def rmse(W: Any, A: Any, noise: str = "gaussian", epsilon: float = 1.0,
         delta: float | None = None, calibration: str = "analytic") -> float:
    """sqrt(TSE/m) at (epsilon, delta): Laplace b = 1/ε, Gaussian σ by ``calibration``."""
    terms = workload_terms(W)
    tse = expected_error(terms, A, noise)
    return math.sqrt(_variance_scale(noise, epsilon, delta, calibration) * tse
                     / terms.num_queries)


def per_query_variance(W: Any, A: Any, noise: str = "gaussian", epsilon: float = 1.0,
                       delta: float | None = None, calibration: str = "analytic"
                       ) -> np.ndarray:
    """Variance of each least-squares workload answer: diag(W (AᵀA)⁺ Wᵀ)·‖A‖²·noise var.

    Per-term and per-factor: for a Kron strategy and a Kron term, the diagonal of
    ⊗_i W_i X_i⁺ W_iᵀ is the Kron of the factor diagonals, so the rows of each term are
    never materialised beyond one factor at a time.  Requires dense factors of W.
    """
    from dpsql.linalg import kron_terms

    blocks, _ = strategy_blocks(A)
    p = noise_norm(noise)
    terms = workload_terms(W)
    scale = _variance_scale(noise, epsilon, delta, calibration) * _unit_variance(noise)
    sens = union_sensitivity(blocks, terms.shape, p)
    matrix = W.matrix if hasattr(W, "matrix") else W
    flat = [(1.0, [matrix])] if isinstance(matrix, np.ndarray) else kron_terms(matrix)
    out = []
    if len(blocks) == 1:
        b = blocks[0]
        pinvs = [FactorPinv.of(F) for F in b.factors]
        for w, factors in flat:
            d = np.full(1, 1.0 / b.weight ** 2)
            for f, pinv in zip(factors, pinvs):
                q = pinv.diag_quadratic(factor_dense(f))
                d = np.kron(d, np.full(factor_dense(f).shape[0], np.inf) if q is None else q)
            out.append(w * w * d)
    else:
        if terms.size > DENSE_LIMIT:
            raise UnsupportedQueryError(
                "per-query variance of a union strategy needs a small domain",
                hint="use the graphical-model path for standard errors")
        g = GramPinv(_dense_union(blocks))      # ‖q L‖², see _dense_traces
        for w, factors in flat:
            Wd = np.ones((1, 1))
            for f in factors:
                Wd = np.kron(Wd, factor_dense(f))
            out.append(w * w * g.quad(Wd, Wd))
    return scale * sens * sens * np.concatenate(out)
