"""OPT_0 for a large attribute (10⁴–10⁶ cells) without n×n matrices (issue 16).

On a large attribute the workload's factors are thin: a Total, a few BETWEEN indicators, a
SUM's value row (``LowRankGram``: V = RᵀR with R m×n, m small).  Every supporting strategy
that matters lies in the row space of R (for Gaussian noise the optimum's range is range(V),
thesis §3.3.1), so we write it as A = C·S with S an R'×n basis of that row space made of
the workload's own rows (integer for counts and for the values of integer columns) and C a
small R'×R' matrix:

* error: with R = Q·S, tr(V (AᵀA)⁺) = tr(W̃ (CᵀC)⁻¹), W̃ = QᵀQ (R'×R');
* sensitivity: the largest column norm of C·S, i.e. max over the *distinct* columns t_a of S
  of ‖C t_a‖ — cells with equal columns are one constraint, cells no query touches none.

Gaussian: minimise tr(W̃ X⁻¹) subject to t_aᵀ X t_a ≤ 1 for every distinct column, X = CᵀC.
Its Lagrangian dual has the thesis' form (§3.3.1, Definition 13) with M_λ = Σ_a λ_a t_a t_aᵀ
in place of Λ: g(λ) = 2 tr((M_λ^½ W̃ M_λ^½)^½) − 1ᵀλ, maximised at X = M^-½ (M^½W̃M^½)^½ M^-½,
gradient t_aᵀ X t_a − 1 (Danskin); each evaluation costs O(r·R'²) for r distinct columns, so
100,000 cells with a value row take milliseconds.  Weak duality (best point of each ray,
tr²/1ᵀλ) certifies the gap, as in ``opt0.gaussian_dual``.

Laplace: the same parameterisation under L1 column norms; candidates are C = I (the basis
rows measured directly) and the Gaussian optimum's C, whichever is lower.

Rounding keeps support exactly: ``strategy.round_blocks`` rounds C, not A, and the measured
factor round(C)·S is an integer matrix whose row space is still that of S.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.linalg as sla

from dpsql.errors import UnsupportedQueryError
from dpsql.plan.gram import LowRankGram, column_classes
from dpsql.plan.opt0 import FactorResult, Progress, dual_ascent

__all__ = ["row_basis", "opt0_large"]


def _as_integer_row(row: np.ndarray) -> np.ndarray:
    """The row divided by its smallest non-zero |entry| when that makes it integer (a count
    or a value row of an integer column), else the row itself."""
    nz = np.abs(row[row != 0])
    if nz.size == 0:
        return row
    for m in (1, 2, 4, 10, 100):
        k = row * (m / float(nz.min()))
        if np.allclose(k, np.round(k), rtol=0.0, atol=1e-9 * max(1.0, float(np.abs(k).max()))) \
                and np.abs(k).max() < 2 ** 40:
            return np.round(k)
    return row


def row_basis(R: np.ndarray) -> np.ndarray:
    """An R'×n basis of R's row space chosen among R's own rows (pivoted QR), each scaled
    to small integers where possible."""
    if not R.size:
        return np.zeros((0, R.shape[1]))
    _, rr, piv = sla.qr(R.T, mode="economic", pivoting=True)
    d = np.abs(np.diag(rr))
    rank = int(np.sum(d > d.max(initial=0.0) * max(R.shape) * 1e-12)) if d.size else 0
    return np.vstack([_as_integer_row(R[i]) for i in sorted(piv[:rank])])


#: Up to this row-space dimension the constraint set is cut down to convex-hull vertices.
HULL_DIMENSION = 6


def _extreme_columns(T: np.ndarray) -> np.ndarray:
    """The columns that can carry the sensitivity: a quadratic or L1 norm tᵀXt / ‖Ct‖₁ is
    convex and even in t, so its maximum over the columns is attained at a vertex of the
    convex hull of ±columns.  With a SUM's value row a 100,000-cell attribute has 100,000
    distinct columns but a handful of such vertices.  The reduction only steers the
    optimiser: every strategy's sensitivity is computed afterwards over all cells."""
    k, r = T.shape
    if k == 1:
        return T[:, [int(np.argmax(np.abs(T[0])))]]
    if r <= 4 * k + 8 or k > HULL_DIMENSION:
        return T
    try:
        from scipy.spatial import ConvexHull
        pts = np.vstack([T.T, -T.T])
        scale = np.abs(pts).max(axis=0)
        hull = ConvexHull(pts / np.where(scale > 0, scale, 1.0))
    except Exception:           # qhull: degenerate or too flat a point set
        return T
    keep = np.unique(hull.vertices % r)
    return T[:, keep]


def _coordinates(R: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Q with R = Q·S (S has full row rank)."""
    return sla.solve(S @ S.T, S @ R.T, assume_a="pos").T


def _sym_power(X: np.ndarray, power: float) -> np.ndarray:
    w, P = np.linalg.eigh(X)
    w = np.clip(w, 0.0, None)
    with np.errstate(divide="ignore"):
        return (P * np.where(w > 0, w ** power, 0.0)) @ P.T


def _gaussian(Wt: np.ndarray, T: np.ndarray, *, maxiter: int = 200, gap_tol: float = 5e-4,
              progress: Progress | None = None) -> tuple[np.ndarray, float, float]:
    """(C, loss, dual bound) for min tr(W̃ X⁻¹) s.t. t_aᵀXt_a ≤ 1 (columns t_a of T)."""
    k, r = T.shape
    best: dict[str, Any] = {"loss": math.inf, "X": None, "dual": 0.0}
    it = [0]

    def evaluate(lam):
        M = (T * lam[None, :]) @ T.T
        Mh = _sym_power(M, 0.5)
        Mih = _sym_power(M, -0.5)
        inner = _sym_power(Mh @ Wt @ Mh, 0.5)
        tr = float(np.trace(inner))
        X = Mih @ inner @ Mih
        diag = np.einsum("ia,ij,ja->a", T, X, T)
        loss = float(diag.max()) * tr
        best["dual"] = max(best["dual"], tr * tr / float(lam.sum()))
        if loss < best["loss"]:
            best.update(loss=loss, X=X)
        it[0] += 1
        if progress is not None:
            progress("opt0-large", it[0], best["loss"])
        return diag, tr

    dual_ascent(evaluate, r, best, fixed_point_steps=2, maxiter=maxiter, gap_tol=gap_tol)
    C = _sym_power(best["X"], 0.5)
    return C, best["loss"], best["dual"]


def _loss(C: np.ndarray, Wt: np.ndarray, T: np.ndarray, p: int) -> float:
    CT = C @ T
    sens = np.abs(CT).sum(axis=0).max() if p == 1 else np.sqrt((CT * CT).sum(axis=0).max())
    G = C.T @ C
    return float(sens) ** 2 * float(np.trace(sla.solve(G, Wt, assume_a="pos")))


def opt0_large(V: LowRankGram, noise: str, *, progress: Progress | None = None
               ) -> tuple[FactorResult, np.ndarray]:
    """OPT_0 on a large attribute: (result with the R'×n strategy C·S, the basis S)."""
    if V.c > 0:
        raise UnsupportedQueryError(
            f"every value of a {V.n:,}-cell attribute is asked for (GROUP BY or a quantile)",
            hint="declare coarser bins for the column (bin_width) or ask for ranges")
    n = V.n
    if not V.rows.size or not np.any(V.rows):
        return FactorResult(np.zeros((1, n)), 0.0, "empty"), np.zeros((1, n))
    S = row_basis(V.rows)
    Q = _coordinates(V.rows, S)
    Wt = Q.T @ Q
    labels, reps = column_classes(S.T)
    T = _extreme_columns(S[:, reps])
    p = 1 if noise == "laplace" else 2
    cands = [(np.eye(S.shape[0]), _loss(np.eye(S.shape[0]), Wt, T, p), "basis rows")]
    C, loss, dual = _gaussian(Wt, T, progress=progress)
    cands.append((C, loss if p == 2 else _loss(C, Wt, T, p), "row-space dual"))
    C, loss, method = min(cands, key=lambda c: c[1])
    bound = dual if p == 2 else 0.0
    return FactorResult(C @ S, loss, f"{method} ({S.shape[0]} rows, {reps.size:,} cell classes)",
                        bound), S
