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

1. Rows sorted by decreasing norm; a row is a *pivot* when it is not in the span of the
   pivots before it (Gram–Schmidt with reorthogonalisation on the unit rows, a residual
   above ``RANK_TOL``).  The pivots W_p = T Q_bᵀ (T lower triangular, Q_b orthonormal) span
   M's row space; every other row is a combination E of *heavier* pivots.
2. In the pivots' coordinates the non-pivot rows are C·(D_p W_p) with C = D_n E D_p⁻¹, and
   |C_ij| ≤ |E_ij| because a non-pivot row is lighter than the pivots it combines — C is
   well scaled.  So MᵀM = (D_p W_p)ᵀ (I + CᵀC) (D_p W_p) = FᵀF with F = R_c D_p W_p, where
   [I; C] = Q_c R_c is an ordinary QR of a well-scaled matrix.
3. G⁺ = F⁺F⁺ᵀ = L Lᵀ with L = Q_b T⁻¹ D_p⁻¹ R_c⁻¹, and M L = Q_c (rows back in M's order).

Each factorisation is of a well-scaled matrix, so the result is accurate to ε times the
conditioning of W, whatever the spread of D; this is the row-wise stable weighted least
squares of Powell & Reid (1969) and Cox & Higham (1998), obtained here with BLAS-3 products
instead of Householder QR with row and column pivoting.  Only the triangular solves touch
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

_BLOCK = 64  # rows orthogonalised together (BLAS-3), then one by one within the block


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
        qb, pivot = _pivot_rows(w)
        r = qb.shape[1]
        self.rank = r
        self.basis = qb
        if r == 0:
            self.factor = np.zeros((n, 0))
            self.orthonormal = np.zeros((k, 0))
            return
        y = w @ qb                                   # unit rows in the pivots' orthonormal basis
        piv = np.flatnonzero(pivot)
        dep = np.flatnonzero(~pivot)
        t = np.tril(y[piv])                          # W_p = T Q_bᵀ (upper part: rounding only)
        # a non-pivot row lies in the span of the pivots before it: its coordinates beyond them
        # are rounding, and dropping them keeps C's entries bounded (step 2 of the docstring)
        before = np.cumsum(pivot)[dep]               # pivots preceding each non-pivot row
        c = np.where(np.arange(r)[None, :] < before[:, None], y[dep], 0.0)
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


def _pivot_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy in row order: an orthonormal basis of the rows that are not in the span of the
    rows before them, and which rows those are.

    A block of rows is projected off the basis so far (twice: classical Gram–Schmidt with
    reorthogonalisation is as accurate as Householder), then factored by Householder QR of
    its transpose: while the rows are independent, |R_jj| is row j's distance from the span
    of everything before it, so the rows up to the first |R_jj| ≤ ``RANK_TOL`` join the
    basis at once and that row is dependent; the rest of the block goes on the same way."""
    k, n = w.shape
    basis = np.zeros((n, min(k, n)))
    pivot = np.zeros(k, dtype=bool)
    s = 0
    start = 0
    while start < k and s < n:
        stop = min(k, start + min(_BLOCK, n - s))
        x = np.array(w[start:stop])
        if s:
            b = basis[:, :s]
            x -= (x @ b) @ b.T
            x -= (x @ b) @ b.T
        rows = np.arange(start, stop)
        while rows.size and s < n:
            q, r = np.linalg.qr(x.T)
            small = np.flatnonzero(np.abs(np.diag(r)) <= RANK_TOL)
            j = int(small[0]) if small.size else rows.size
            basis[:, s:s + j] = q[:, :j]
            pivot[rows[:j]] = True
            s += j
            x, rows = x[j + 1:], rows[j + 1:]      # row j (if any) is dependent
            if j and rows.size:
                b = q[:, :j]
                x = x - (x @ b) @ b.T
                x = x - (x @ b) @ b.T
        start = stop
    return basis[:, :s], pivot


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
