"""Noisy linear measurements of clique marginals and the loss they define.

A :class:`Measurement` records ``values = query · μ_clique + noise`` with noise of
scale ``stddev`` (thesis §4.2, the canonical mechanism A(D) = Q M_C(D) + ξ).  The
query acts on the clique's marginal with attributes in the clique's *given* order
and C-order flattening, exactly as a planner's measurement block does; the model
keeps every array in canonical (domain) order, and :class:`_Term` translates.

Measurements with unequal noise are put on a common scale by dividing each row by
its noise scale (ICML appendix C.2), so the L2 loss is
``Σ_i ‖Q_i μ_{r_i} − y_i‖² / σ_i²`` and the L1 loss ``Σ_i ‖Q_i μ_{r_i} − y_i‖₁ / σ_i``.
:func:`estimate_total` derives the number of records from the measurements when it is
unknown (appendix E.1), and :func:`lipschitz` bounds the curvature of the L2 loss
for the accelerated method (thesis Algorithm 3).

Queries are duck-typed against the :mod:`dpsql.linalg` contract (``shape``,
``matvec``, ``rmatvec``, ``dense``; ``factors`` for Kron, ``blocks`` for Union,
``weight``/``base`` for Weighted); a plain 2-D ndarray is accepted as an explicit
matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from typing import Any

import numpy as np

from dpsql.linalg.rowscaled import GramPinv

__all__ = ["Measurement", "estimate_total", "lipschitz"]

# Queries whose dense form has at most this many entries are materialised once and
# applied with BLAS: far faster than a structured matvec for the small clique
# marginals that dominate in practice, and negligible memory.
DENSE_LIMIT = 1 << 18


@dataclass(frozen=True, eq=False)
class Measurement:
    """Noisy answers ``values`` to ``query`` over the marginal of ``clique``.

    ``query`` has ``prod(sizes of clique)`` columns, in the clique's given attribute
    order (C order); ``stddev`` is the noise scale of every row (σ for Gaussian, b for
    Laplace noise); the loss weights the measurement by 1/σ (ICML appendix C.2).
    """

    clique: tuple[str, ...]
    query: Any          # a QueryMatrix or a 2-D array
    values: np.ndarray
    stddev: float

    def __post_init__(self) -> None:
        clique = tuple(self.clique)
        if len(set(clique)) != len(clique):
            raise ValueError(f"Measurement: clique {clique} repeats an attribute")
        query = np.atleast_2d(np.asarray(self.query, dtype=float)) if isinstance(
            self.query, (np.ndarray, list)) else self.query
        values = np.asarray(self.values, dtype=float).ravel()
        rows = int(query.shape[0])
        if values.size != rows:
            raise ValueError(f"Measurement on {clique}: {values.size} values for a query of {rows} rows")
        if not np.all(np.isfinite(values)):
            raise ValueError(f"Measurement on {clique}: values must be finite")
        stddev = float(self.stddev)
        if not (np.isfinite(stddev) and stddev > 0):
            raise ValueError(f"Measurement on {clique}: stddev must be positive and finite, got {stddev}")
        object.__setattr__(self, "clique", clique)
        object.__setattr__(self, "query", query)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "stddev", stddev)


# --- structure of queries ---------------------------------------------------------------

def _shape(q) -> tuple[int, int]:
    m, n = q.shape
    return int(m), int(n)


def _is(q, name: str) -> bool:
    return type(q).__name__ == name


def identity_scale(q) -> float | None:
    """c when ``q`` is c·I (structurally, never by materialising), else None."""
    if isinstance(q, np.ndarray):
        m, n = q.shape
        if m == n and m * n <= DENSE_LIMIT and np.array_equal(q, q[0, 0] * np.eye(n)) and q[0, 0] != 0:
            return float(q[0, 0])
        return None
    if _is(q, "Identity"):
        return 1.0
    if hasattr(q, "factors"):
        scale = 1.0
        for f in q.factors:
            s = identity_scale(f)
            if s is None:
                return None
            scale *= s
        return scale
    if hasattr(q, "weight") and hasattr(q, "base"):
        s = identity_scale(q.base)
        return None if s is None else float(q.weight) * s
    return None


def dense(q) -> np.ndarray:
    return q if isinstance(q, np.ndarray) else np.asarray(q.dense(), dtype=float)


def group_rows(q) -> np.ndarray | None:
    """The cell → row map of ``q`` when it is a ``Bucket`` of more than one row with at most
    one cell per row (a GROUP BY of a column, filtered or not: -1 for a cell in no row), or
    None.  Such a factor is applied by picking cells (``into_buckets``), never as its
    rows × n dense matrix, and the result is the matrix product's to the last bit (each row
    sums one value and zeros)."""
    if type(q).__name__ != "Bucket" or int(q.shape[0]) < 2:
        return None
    mapping = np.asarray(q.mapping)
    kept = mapping[mapping >= 0]
    # bincount, not np.unique (which imports numpy.ma: 0.1 s in a new process)
    return mapping if kept.size == 0 or np.bincount(kept).max() <= 1 else None


def into_buckets(table: np.ndarray, axis: int, mapping: np.ndarray, rows: int) -> np.ndarray:
    """``table`` with its ``axis`` taken into ``rows`` rows: cell a into row ``mapping[a]``
    (-1 into none; at most one cell per row, ``group_rows``), rows without a cell 0."""
    keep = np.flatnonzero(mapping >= 0)
    moved = np.moveaxis(table, axis, 0)
    out = np.zeros((rows,) + moved.shape[1:], dtype=np.result_type(table.dtype, np.float64))
    out[mapping[keep]] = moved[keep]
    return np.moveaxis(out, 0, axis)


#: A query's non-zeros: (row, column, value) arrays and its shape.
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]


def dense_entries(q, limit: int = DENSE_LIMIT) -> Entries | None:
    """The non-zeros of ``q`` from its dense form (row-major order); None when that has more
    than ``limit`` entries."""
    m, n = _shape(q)
    if m * n > limit:
        return None
    d = dense(q)
    i, j = np.nonzero(d)
    return i, j, d[i, j], (m, n)


def structured_entries(q, limit: int = DENSE_LIMIT) -> Entries | None:
    """The non-zeros of ``q`` with Kronecker factors kept apart until the end (a 7,326-cell
    identity marginal is 7,326 non-zeros, not a 54-million-entry dense array), in no
    particular order; None when a factor that is neither structured nor at most ``limit``
    entries would have to be densified."""
    if isinstance(q, np.ndarray) or not (_is(q, "Identity") or hasattr(q, "factors")
                                         or (hasattr(q, "weight") and hasattr(q, "base"))):
        return dense_entries(q, limit)
    if _is(q, "Identity"):
        n = int(q.shape[0])
        i = np.arange(n)
        return i, i.copy(), np.ones(n), (n, n)
    if hasattr(q, "factors"):
        out = None
        for f in q.factors:
            e = structured_entries(f, limit)
            if e is None:
                return None
            out = e if out is None else _kron(out, e)
        return out
    e = structured_entries(q.base, limit)
    return None if e is None else (e[0], e[1], float(q.weight) * e[2], e[3])


def _kron(a: Entries, b: Entries) -> Entries:
    """The non-zeros of A ⊗ B: entry (i, j) of A times entry (k, l) of B at (i·m_B + k, j·n_B + l)."""
    (ia, ja, va, (ma, na)), (ib, jb, vb, (mb, nb)) = a, b
    rows = (ia[:, None] * mb + ib[None, :]).ravel()
    cols = (ja[:, None] * nb + jb[None, :]).ravel()
    return rows, cols, (va[:, None] * vb[None, :]).ravel(), (ma * mb, na * nb)

class _Operator:
    """Fast ``Q x`` / ``Qᵀ y`` for one query: scaled identity, dense BLAS, or structured."""

    __slots__ = ("scale", "matrix", "query")

    def __init__(self, q) -> None:
        self.scale = identity_scale(q)
        m, n = _shape(q)
        self.matrix = dense(q) if self.scale is None and m * n <= DENSE_LIMIT else None
        self.query = q

    def matvec(self, x: np.ndarray) -> np.ndarray:
        if self.scale is not None:
            return x * self.scale if self.scale != 1.0 else x
        if self.matrix is not None:
            return self.matrix @ x
        return np.asarray(self.query.matvec(x), dtype=float)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        if self.scale is not None:
            return y * self.scale if self.scale != 1.0 else y
        if self.matrix is not None:
            return y @ self.matrix
        return np.asarray(self.query.rmatvec(y), dtype=float)


def lambda_max(q) -> float:
    """Largest eigenvalue of QᵀQ, exactly for Kron/Weighted/identity/small dense queries.

    For a Union it returns the sum over blocks (an upper bound, which is what the
    accelerated method needs); other large structured queries use Lanczos.
    """
    s = identity_scale(q)
    if s is not None:
        return s * s
    if hasattr(q, "factors"):
        return float(prod(lambda_max(f) for f in q.factors))
    if hasattr(q, "weight") and hasattr(q, "base"):
        return float(q.weight) ** 2 * lambda_max(q.base)
    if hasattr(q, "blocks"):
        return float(sum(lambda_max(b) for b in q.blocks))
    m, n = _shape(q)
    if m * n <= DENSE_LIMIT:
        d = dense(q)
        return float(np.linalg.norm(d, 2) ** 2) if d.size else 0.0
    from scipy.sparse.linalg import LinearOperator, eigsh
    op = LinearOperator((n, n), matvec=lambda x: q.rmatvec(q.matvec(x)), dtype=float)
    return float(eigsh(op, k=1, which="LA", return_eigenvectors=False, tol=1e-8)[0]) * (1 + 1e-6)


def lipschitz(measurements: Sequence[Measurement]) -> float:
    """Lipschitz constant of ∇L for the L2 loss, per unit of total² (thesis Algorithm 3).

    ∇L_i = 2 Q_iᵀ(Q_i μ − y_i)/σ_i², so each measurement contributes 2 λ_max(Q_iᵀQ_i)/σ_i²;
    since every clique marginal is a contraction of p in the L1 norm, the sum bounds
    the constant of the whole loss with respect to ‖·‖₁ on p.
    """
    return float(sum(2.0 * lambda_max(m.query) / m.stddev ** 2 for m in measurements))


def subgradient_bound(measurements: Sequence[Measurement]) -> float:
    """G ≥ ‖∇L‖_∞ for the L1 loss: Σ_i (max column L1 norm of Q_i)/σ_i.

    ∇_r L = Q_iᵀ sign(·)/σ_i has entries bounded by Q_i's column L1 norms; the step
    schedule of subgradient mirror descent is scaled by it.
    """
    total = 0.0
    for m in measurements:
        q: Any = m.query
        scale = identity_scale(q)
        if scale is not None:
            total += abs(scale) / m.stddev
        elif isinstance(q, np.ndarray) or _shape(q)[0] * _shape(q)[1] <= DENSE_LIMIT:
            total += float(np.abs(dense(q)).sum(axis=0).max()) / m.stddev
        else:
            total += float(q.sensitivity(1)) / m.stddev
    return total


# --- the total (appendix E.1) -------------------------------------------------------------

def _total_weights(q) -> np.ndarray | None:
    """v with Qᵀv = 1 of least norm, i.e. (Q⁺)ᵀ1, or None if 1 is not in Q's row space."""
    m, n = _shape(q)
    s = identity_scale(q)
    if s is not None:
        return np.full(m, 1.0 / s)
    if hasattr(q, "factors"):
        parts = [_total_weights(f) for f in q.factors]
        v = np.ones(1)
        for p in parts:
            if p is None:
                return None
            v = np.multiply.outer(v, p).ravel()
        return v
    if hasattr(q, "weight") and hasattr(q, "base"):
        w = _total_weights(q.base)
        return None if w is None else w / float(q.weight)
    ones = np.ones(n)
    if m * n <= DENSE_LIMIT:
        d = dense(q)
        # (Q⁺)ᵀ1 = Q (QᵀQ)⁺ 1 from the unit rows with the weights applied exactly: lstsq's SVD
        # is accurate only relative to the heaviest row, and a lattice block's rows can be 2²²
        # apart (issue 28: 6e-10 of ‖v‖² on a light prefix under two heavy cells, 50 cells)
        v = GramPinv(d).estimator(ones[None, :])[0]
        resid = d.T @ v - ones
    else:
        from scipy.sparse.linalg import LinearOperator, lsqr
        op = LinearOperator((n, m), matvec=lambda y: q.rmatvec(y), rmatvec=lambda x: q.matvec(x),
                            dtype=float)
        v = lsqr(op, ones, atol=1e-12, btol=1e-12, iter_lim=10 * (m + n))[0]
        resid = np.asarray(q.rmatvec(v)) - ones
    if np.linalg.norm(resid) > 1e-6 * np.sqrt(n):
        return None
    return v


def estimate_total(measurements: Sequence[Measurement]) -> tuple[float, float] | None:
    """Inverse-variance weighted estimate of the number of records (ICML appendix E.1).

    Each measurement whose row space contains 1ᵀ gives the unbiased estimate
    m_C = 1ᵀQ⁺y with variance σ²‖1ᵀQ⁺‖²; a measured Total query is simply the case
    Q = 1ᵀ.  Returns (estimate, variance), or None if no measurement determines it.
    """
    num = den = 0.0
    for meas in measurements:
        v = _total_weights(meas.query)
        if v is None:
            continue
        var = meas.stddev ** 2 * float(v @ v)
        num += float(v @ meas.values) / var
        den += 1.0 / var
    if den == 0.0:
        return None
    return num / den, 1.0 / den


def resolve_total(measurements: Sequence[Measurement], total, warm_start, caller: str) -> float:
    """The number of records a fit is scaled to: ``total`` when given, else the one the
    measurements determine (``estimate_total``), else the warm start's; at least 1.
    ``caller`` names the fit in the error when none is known."""
    if total is None:
        est = estimate_total(measurements)
        if est is not None:
            total = est[0]
        elif warm_start is not None:
            total = warm_start.total
        else:
            raise ValueError(f"{caller}: no measurement determines the number of records "
                             "(1ᵀ is in no query's row space); pass total=")
    return max(float(total), 1.0)
