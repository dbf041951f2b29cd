"""(MᵀM)⁺ of a matrix whose rows differ widely in scale, to working accuracy.

A measured block's rows come with very different weights: a lattice block holds the query's
row at weight 2²⁰ next to edge rows at weight 2⁻² (``measure/release.py`` rounds real
factors to a grid, and its tiny entries become light rows).  Any method that is only
*normwise* backward stable — the SVD of M, ``pinv(M)``, ``eigh(MᵀM)``, unpivoted QR of M —
makes errors of size ε·‖M‖ in every direction, so the directions only the light rows
reach come out wrong by ε·(d_max/d_min)²: 1.2% for rows 2²² apart, and how wrong depends
on how the machine's BLAS kernel rounds (issue 28).

The stiffness lives in a diagonal: M = D W with D the row norms and W the unit rows, which
is well scaled.  Everything below is computed from W, with D applied exactly:

1. Rows sorted by decreasing norm and cut into levels (rows within ``LEVEL`` of the heaviest
   row not yet seen).  Level by level, the rows are projected off the basis so far and the
   *pivots* are chosen as in QR with (threshold) column pivoting: largest residual first,
   while it is above ``RANK_TOL``.  The pivots W_p = T Q_bᵀ (T lower triangular, Q_b orthonormal) span
   M's row space; every other row is a combination E of pivots of its level or heavier ones.
2. In the pivots' coordinates the non-pivot rows are C·(D_p W_p) with C = D_n E D_p⁻¹, and
   |C_ij| ≤ LEVEL·|E_ij| because a non-pivot row is at most LEVEL times heavier than the
   pivots it combines — C is well scaled.  So MᵀM = (D_p W_p)ᵀ (I + CᵀC) (D_p W_p) = FᵀF
   with F = R_c D_p W_p, where [I; C] = Q_c R_c is an ordinary QR of a well-scaled matrix.
3. G⁺ = F⁺F⁺ᵀ = L Lᵀ with L = Q_b T⁻¹ D_p⁻¹ R_c⁻¹, and M L = Q_c (rows back in M's order).

Each factorisation is of a well-scaled matrix, so the result is accurate to ε times the
conditioning of W, whatever the spread of D; this is the row-wise stable weighted least
squares of Powell & Reid (1969) and Cox & Higham (1998) (Householder QR with row sorting and
column pivoting), mostly with BLAS-3 products.  Quadratic forms must be taken as ‖q L‖²: G⁺
itself has entries ~1/d_min², and q G⁺ qᵀ for a query of the heavy rows cancels them down
to ~1/d_max², losing everything (``dense`` is for tests).  Only the triangular solves touch
graded matrices, and they are done by substitution without pivoting (componentwise
backward stable).
"""

from __future__ import annotations

import numpy as np

#: A unit row whose distance from the span of the heavier pivots is at most this is in their
#: span.  Exact dependencies leave ~1e-15; integer rows that are independent stay far above
#: (the old row-space check, eigenvalues of the unit-row gram above 1e-15, cut at a singular
#: value of ~3e-8: the same scale).
RANK_TOL = 1e-8

#: Rows within this factor of a level's heaviest row are pivoted together, by residual; a
#: dependent row then combines pivots at most LEVEL times lighter than itself.
LEVEL = 256.0

_CLEAR = 1e-3  # a pivot's residual is at least this fraction of the largest remaining one
_BLOCK = 64    # rows factored together when choosing pivots


class GramPinv:
    """G⁺ = (MᵀM)⁺ = L Lᵀ and the row space of ``m`` (k × n), never an n × n matrix.

    ``basis`` (n × r, orthonormal) spans the row space; ``factor`` is L (n × r);
    ``orthonormal`` is M L (k × r, orthonormal columns; zero rows of M give zero rows)."""

    def __init__(self, m: np.ndarray) -> None:
        m = np.asarray(m, dtype=np.float64)
        if m.ndim != 2:
            raise ValueError("GramPinv needs a matrix")
        k, n = m.shape
        self.shape = (k, n)
        norms = np.sqrt(np.einsum("ij,ij->i", m, m))
        if not np.all(np.isfinite(norms)):
            raise ValueError("GramPinv needs finite entries")
        live = np.flatnonzero(norms > 0)
        order = live[np.argsort(-norms[live], kind="stable")]   # heaviest first, ties by index
        d = norms[order]
        w = m[order] / d[:, None]
        qb, piv, known = _pivot_rows(w, d)
        r = qb.shape[1]
        self.rank = r
        self.basis = qb
        if r == 0:
            self.factor = np.zeros((n, 0))
            self.orthonormal = np.zeros((k, 0))
            return
        y = w @ qb                                   # unit rows in the pivots' orthonormal basis
        rest = np.ones(len(order), dtype=bool)
        rest[piv] = False
        dep = np.flatnonzero(rest)
        t = np.tril(y[piv])                          # W_p = T Q_bᵀ (upper part: rounding only)
        # a non-pivot row lies in the span of the pivots of its level and the heavier ones: its
        # coordinates beyond them are rounding, and dropping them keeps C bounded (step 2)
        c = np.where(np.arange(r)[None, :] < known[dep][:, None], y[dep], 0.0)
        e = _solve_upper(t.T, c.T).T                 # E T = c (back substitution: zeros stay zero)
        cmat = e * (d[dep][:, None] / d[piv][None, :])
        if dep.size:
            qc, rc = np.linalg.qr(np.vstack([np.eye(r), cmat]))
        else:
            qc, rc = np.eye(r), np.eye(r)
        rc_inv = _solve_upper(rc, np.eye(r))
        s = _solve_lower(t, rc_inv / d[piv][:, None])   # T⁻¹ D_p⁻¹ R_c⁻¹
        self.factor = qb @ s
        out = np.zeros((k, r))
        out[order[piv]] = qc[:r]
        out[order[dep]] = qc[r:]
        self.orthonormal = out

    def coords(self, q: np.ndarray) -> np.ndarray:
        """q L: diag(qa G⁺ qbᵀ) is the row-wise dot product of coords(qa) and coords(qb)."""
        return q @ self.factor

    def quad(self, qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
        """diag(qa G⁺ qbᵀ)."""
        return np.einsum("ij,ij->i", self.coords(qa), self.coords(qb))

    def estimator(self, q: np.ndarray) -> np.ndarray:
        """q G⁺ Mᵀ (local least squares), as (q L)(M L)ᵀ."""
        return self.coords(q) @ self.orthonormal.T

    def project(self, q: np.ndarray) -> np.ndarray:
        """Orthogonal projection of the rows of q onto M's row space."""
        return (q @ self.basis) @ self.basis.T

    def dense(self) -> np.ndarray:
        """G⁺ as an n × n matrix (tests and small factors only)."""
        return self.factor @ self.factor.T


def _pivot_rows(w: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pivot rows of the unit rows ``w`` (sorted by decreasing weight ``d``), level by level.

    A level is the heaviest rows not yet seen and every row within ``LEVEL`` of its weight.
    Its rows are projected off the basis of the heavier levels (twice: classical
    Gram–Schmidt with reorthogonalisation), then its pivots are chosen as in QR with
    column pivoting, while the largest residual is above ``RANK_TOL`` (``_level_pivots``).
    Choosing by residual keeps T well conditioned; choosing only within a level keeps
    C = D_n E D_p⁻¹ bounded by LEVEL·|E|.

    Returns the orthonormal basis (n × r), the pivots' positions in the order they were
    chosen, and for every row how many pivots were chosen by the end of its level."""
    k, n = w.shape
    basis = np.zeros((n, min(k, n)))
    piv: list[int] = []
    known = np.zeros(k, dtype=np.int64)
    s = 0
    start = 0
    while start < k:
        stop = int(np.searchsorted(-d, -d[start] / LEVEL, side="right"))
        if s < n:
            x = np.array(w[start:stop])
            if s:
                b = basis[:, :s]
                x -= (x @ b) @ b.T
                x -= (x @ b) @ b.T
            s = _level_pivots(x, start, basis, s, piv)
        known[start:stop] = s
        start = stop
    return basis[:, :s], np.asarray(piv, dtype=np.int64), known


def _level_pivots(x: np.ndarray, start: int, basis: np.ndarray, s: int, piv: list[int]) -> int:
    """Pivots among one level's projected rows ``x`` (see ``_pivot_rows``); returns the new
    basis size.

    Threshold column pivoting, a block at a time: the remaining rows sorted by residual,
    a Householder QR of the first ``_BLOCK``, and its leading run of rows whose residual
    stays within ``_CLEAR`` of the largest becomes pivots (at least that largest one).
    Residuals only shrink, so every pivot is within ``_CLEAR`` of the one QR with column
    pivoting would take, and a level of independent rows costs a few BLAS-3 steps."""
    n = basis.shape[0]
    rows = np.arange(start, start + x.shape[0])
    while rows.size and s < n:
        res = np.sqrt(np.einsum("ij,ij->i", x, x))
        top = float(res.max())
        if top <= RANK_TOL:
            break
        order = np.argsort(-res, kind="stable")
        x, rows, res = x[order], rows[order], res[order]
        m = min(rows.size, n - s, _BLOCK)
        q, r = np.linalg.qr(x[:m].T)
        low = np.flatnonzero(np.abs(np.diag(r)) < _CLEAR * top)
        j = int(low[0]) if low.size else m
        new = q[:, :j]
        if s:
            # a small residual leaves the new directions ε/residual off the basis: once more
            b = basis[:, :s]
            new = np.linalg.qr(new - b @ (b.T @ new))[0]   # nested spans, so T stays triangular
        basis[:, s:s + j] = new
        piv.extend(int(i) for i in rows[:j])
        s += j
        x, rows = x[j:], rows[j:]
        if rows.size:
            x = x - (x @ new) @ new.T
            x = x - (x @ new) @ new.T
    return s


def _solve_upper(u: np.ndarray, b: np.ndarray) -> np.ndarray:
    """U⁻¹ b for upper-triangular U by back substitution: LU with partial pivoting of an
    upper-triangular matrix finds every pivot on the diagonal (the entries below are 0), so
    it swaps nothing and is exactly substitution."""
    return np.linalg.solve(u, b)


def _solve_lower(low: np.ndarray, b: np.ndarray) -> np.ndarray:
    """L⁻¹ b for lower-triangular L by forward substitution: reversing rows and columns makes
    L upper triangular (see ``_solve_upper``); a pivoting LU of L itself could swap rows of a
    graded right-hand side and lose its light rows' accuracy."""
    return np.linalg.solve(low[::-1, ::-1], b[::-1])[::-1]
