"""Kronecker products, vertical unions and sums of query matrices (thesis §3.4–3.9).

* :class:`Kron` — Q_1 ⊗ … ⊗ Q_d over a product domain (Definition 18).  Products
  follow thesis Algorithm 1: the vector is viewed as a d-way tensor and one factor
  is applied along one axis at a time, so the Kronecker product is never formed
  (Theorem 12: O(n Σ n_i) time).  Transpose, Gram, pseudo-inverse, sums and norms
  factor over the Kron (Propositions 11 and 12).
* :class:`Union` — vertical stack of blocks, the "+" of thesis eq. (3.3); its Gram
  is the :class:`Sum` of the block Grams.
* :class:`Sum` — same-shape sum (Gram matrices of unions, marginal Grams §3.6).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import reduce
from itertools import accumulate
from typing import cast

import numpy as np

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.linalg.base import DENSE_LIMIT, Product, QueryMatrix, Weighted
from dpsql.linalg.leaves import Identity

__all__ = ["Kron", "Union", "Sum", "EXACT_SENSITIVITY_LIMIT", "max_column_sum"]

#: Unions over at most this many cells get their sensitivity from per-cell column
#: norms (exact); larger ones use the bound (Σ_b s_b^p)^(1/p).  2^22 float64 is 32 MiB
#: per block vector.
EXACT_SENSITIVITY_LIMIT = 1 << 22

# Each slab handed to a factor in Algorithm 1 holds at most about this many entries
# (2 MiB), which bounds the scratch memory beyond the input and output vectors.
# Factors may ask for smaller slabs (QueryMatrix._slab_hint), but a slab always has
# at least _MIN_SLAB_COLS columns so a wide factor's own entries are reused.
_SLAB_ENTRIES = 1 << 18
_MIN_SLAB_COLS = 128

def max_column_sum(scales: Sequence[float], vectors: Sequence[Sequence[np.ndarray]], limit: int) -> float | None:
    """max over cells x of Σ_b scales[b]·Π_i vectors[b][i][x_i], or None when the
    attributes whose vectors vary across cells span more than ``limit`` cells.

    The column p-norms^p of a union of Kron products (blocks b, attributes i) have this
    form; attributes where every block's vector is constant factor out."""
    d = len(vectors[0])
    seen: dict[int, bool] = {}

    def varies(x: np.ndarray) -> bool:
        out = seen.get(id(x))
        if out is None:
            hi, lo = float(np.max(x)), float(np.min(x))
            out = seen[id(x)] = hi - lo > 1e-12 * max(abs(hi), abs(lo))
        return out

    vary = [i for i in range(d) if any(varies(v[i]) for v in vectors)]
    cells = math.prod(len(vectors[0][i]) for i in vary)
    if cells > limit:
        return None
    acc = np.zeros(tuple(len(vectors[0][i]) for i in vary))
    for s, v in zip(scales, vectors):
        term = np.asarray(s * math.prod(float(v[i][0]) for i in range(d) if i not in vary))
        for i in vary:
            term = np.multiply.outer(term, v[i])
        acc = acc + term
    return float(acc.max())


def _check_blocks(items: Iterable[QueryMatrix], what: str) -> list[QueryMatrix]:
    items = list(items)
    if not items:
        raise ProgrammingError(f"{what} needs at least one matrix",
                               hint=f"pass a non-empty list to {what}([...])")
    for it in items:
        if not isinstance(it, QueryMatrix):
            raise ProgrammingError(f"{what} members must be QueryMatrix, got "
                                   f"{type(it).__name__}", hint="wrap arrays in Explicit(...)")
    return items


def _apply_along_axis(op: QueryMatrix, src: np.ndarray, dst: np.ndarray) -> None:
    """dst[l, :, r] = op · src[l, :, r] for every (l, r), in slabs of bounded size.

    This is one step of Algorithm 1 (the reshape of f_{i+1} to an n_i × r/n_i
    matrix), done in slabs so the scratch memory stays ~_SLAB_ENTRIES and ``dst``
    may alias ``src`` when the factor is square: each slab is read completely
    before its own region is written.
    """
    L, N, R = src.shape
    M = dst.shape[1]
    cols = max(_MIN_SLAB_COLS, min(_SLAB_ENTRIES, op._slab_hint) // max(N, M))
    if R == 1:
        # Innermost axis of a matvec: rows of src[:, :, 0] are contiguous, so the
        # factor maps whole rows (one GEMM for Explicit) with no transposes.
        for l0 in range(0, L, cols):
            l1 = min(L, l0 + cols)
            dst[l0:l1, :, 0] = op._matmat_rows(src[l0:l1, :, 0])
        return
    if R >= cols:
        cl, cr = 1, cols
    else:
        cl, cr = max(1, cols // R), R
    for l0 in range(0, L, cl):
        l1 = min(L, l0 + cl)
        for r0 in range(0, R, cr):
            r1 = min(R, r0 + cr)
            if l1 - l0 == 1:
                dst[l0, :, r0:r1] = op._matmat(src[l0, :, r0:r1])
            else:
                Z = src[l0:l1, :, r0:r1].transpose(1, 0, 2).reshape(N, -1)
                Y = op._matmat(Z)
                dst[l0:l1, :, r0:r1] = Y.reshape(M, l1 - l0, r1 - r0).transpose(1, 0, 2)


def kron_matmat(factors: Sequence[QueryMatrix], X: np.ndarray) -> np.ndarray:
    """(Q_1 ⊗ … ⊗ Q_d) X by thesis Algorithm 1, with X's columns as a trailing axis.

    Identity factors are skipped and shrinking factors (m_i < n_i, e.g. totals) go
    first so later steps touch fewer entries; the order does not change the result
    because the axis-wise maps commute.  Memory: the output, at most one
    intermediate when a factor changes the axis length, and one slab.
    """
    k = X.shape[1]
    if k == 0:
        return np.zeros((math.prod(f.shape[0] for f in factors), 0))
    dims = [f.shape[1] for f in factors] + [k]
    steps = [i for i, f in enumerate(factors) if not isinstance(f, Identity)]
    steps.sort(key=lambda i: factors[i].shape[0] / factors[i].shape[1])
    cur, owned = X, False
    for ax in steps:
        op = factors[ax]
        N, M = dims[ax], op.shape[0]
        L, R = math.prod(dims[:ax]), math.prod(dims[ax + 1:])
        src = cur.reshape(L, N, R)
        if M == N and owned:
            # Our own contiguous buffer (never the caller's X): update it in place.
            dst = src
        else:
            dst = np.empty((L, M, R))
        _apply_along_axis(op, src, dst)
        cur, owned = dst, True
        dims[ax] = M
    if not owned:
        cur = np.array(cur, dtype=np.float64, copy=True)
    return cur.reshape(math.prod(dims[:-1]), k)


class Kron(QueryMatrix):
    """Q_1 ⊗ … ⊗ Q_d (thesis Definition 18); factor i acts on attribute i."""

    def __init__(self, factors: Iterable[QueryMatrix]) -> None:
        self.factors = tuple(_check_blocks(factors, "Kron"))
        self._shape = (math.prod(f.shape[0] for f in self.factors),
                       math.prod(f.shape[1] for f in self.factors))

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return kron_matmat(list(self.factors), X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return kron_matmat([f.T for f in self.factors], Y)

    def _transpose(self) -> QueryMatrix:
        return Kron([f.T for f in self.factors])

    def gram(self) -> QueryMatrix:
        return Kron([f.gram() for f in self.factors])

    def pinv(self) -> QueryMatrix:
        return Kron([f.pinv() for f in self.factors])

    def _compose(self, other: QueryMatrix) -> QueryMatrix:
        # Mixed product (Prop. 11): (A⊗B)(C⊗D) = AC ⊗ BD when the factors chain.
        if (isinstance(other, Kron) and len(other.factors) == len(self.factors)
                and all(a.shape[1] == b.shape[0] for a, b in zip(self.factors, other.factors))):
            return Kron([a @ b for a, b in zip(self.factors, other.factors)])
        return Product(self, other)

    def _sensitivity(self, p: int) -> float:
        # Column (x_1..x_d) has entries Π Q_i(z_i, x_i), so its p-norm is the
        # product of the factor column norms and the max factors too.
        return math.prod(f._sensitivity(p) for f in self.factors)

    def _column_norms(self, p: int) -> np.ndarray:
        _check_vector_size(self._shape[1], "column norms")
        return reduce(np.kron, [f._column_norms(p) for f in self.factors])

    def _all_square(self) -> bool:
        return all(f.is_square for f in self.factors)

    def _trace(self) -> float:
        if self._all_square():
            return math.prod(f._trace() for f in self.factors)
        return super()._trace()

    def _diag(self) -> np.ndarray:
        if self._all_square():
            _check_vector_size(self._shape[1], "diagonal")
            return reduce(np.kron, [f._diag() for f in self.factors])
        return super()._diag()

    def _sum(self) -> float:
        return math.prod(f._sum() for f in self.factors)

    def _dense(self) -> np.ndarray:
        return reduce(np.kron, [f._dense() for f in self.factors])

    def __repr__(self) -> str:
        return "Kron([" + ", ".join(repr(f) for f in self.factors) + "])"


def _check_vector_size(n: int, what: str) -> None:
    if n > DENSE_LIMIT:
        raise NotSupportedError(f"{what} would be a vector of {n} entries",
                                hint=f"per-cell vectors are limited to {DENSE_LIMIT} entries")


class Union(QueryMatrix):
    """Vertical stack [B_1; …; B_k] of blocks over one domain (thesis eq. 3.3)."""

    def __init__(self, blocks: Iterable[QueryMatrix]) -> None:
        self.blocks = tuple(_check_blocks(blocks, "Union"))
        n = self.blocks[0].shape[1]
        for b in self.blocks:
            if b.shape[1] != n:
                raise ProgrammingError(
                    f"Union blocks must share a domain: {b!r} has {b.shape[1]} columns, "
                    f"expected {n}", hint="every block must act on the same data vector")
        # Python ints: Kron row counts may exceed int64 while staying implicit.
        self._offsets = list(accumulate([b.shape[0] for b in self.blocks], initial=0))
        self._shape = (self._offsets[-1], n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((self._shape[0], X.shape[1]))
        for b, lo, hi in zip(self.blocks, self._offsets, self._offsets[1:]):
            out[lo:hi] = b._matmat(X)
        return out

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        out: np.ndarray | None = None
        for b, lo, hi in zip(self.blocks, self._offsets, self._offsets[1:]):
            part = b._rmatmat(Y[lo:hi])
            out = part if out is None else out + part
        assert out is not None  # a Union has at least one block (_check_blocks)
        return out

    def gram(self) -> QueryMatrix:
        # [B_1; …; B_k]ᵀ[B_1; …; B_k] = Σ_b B_bᵀB_b
        if len(self.blocks) == 1:
            return self.blocks[0].gram()
        return Sum([b.gram() for b in self.blocks])

    def pinv(self) -> QueryMatrix:
        if len(self.blocks) == 1:
            return self.blocks[0].pinv()
        return super().pinv()

    def _sensitivity(self, p: int) -> float:
        """Exact from per-cell column norms when the domain has at most
        EXACT_SENSITIVITY_LIMIT cells; otherwise the upper bound (Σ_b s_b^p)^(1/p),
        which is exact whenever every block's column norms are constant across
        cells (e.g. marginal workloads: Kron of Identity/Total factors)."""
        if self._shape[1] <= EXACT_SENSITIVITY_LIMIT:
            try:
                return float(self._column_norms(p).max())
            except NotSupportedError:
                pass
        exact = self._kron_sensitivity(p)
        if exact is not None:
            return exact
        return float(sum(b._sensitivity(p) ** p for b in self.blocks) ** (1.0 / p))

    def _kron_sensitivity(self, p: int) -> float | None:
        """Exact for a union of (weighted) Krons over a large domain: only attributes on
        which some block's column norms vary need enumerating (an OR split into
        disjoint blocks touches two or three), the rest contribute constants."""
        scales: list[float] = []
        vectors: list[list[np.ndarray]] = []
        for b in self.blocks:
            w = 1.0
            while isinstance(b, Weighted):
                w, b = w * b.weight, b.base
            if not isinstance(b, Kron):
                return None
            try:
                vectors.append([f._column_norms(p) ** p for f in b.factors])
            except NotSupportedError:
                return None
            scales.append(abs(w) ** p)
        if len({len(v) for v in vectors}) != 1:
            return None
        total = max_column_sum(scales, vectors, EXACT_SENSITIVITY_LIMIT)
        return None if total is None else float(total ** (1.0 / p))

    def _column_norms(self, p: int) -> np.ndarray:
        # A column's p-th power norm is the sum over blocks of its blocks' p-th powers.
        total = sum(b._column_norms(p) ** p for b in self.blocks)
        return total ** (1.0 / p)

    def _sum(self) -> float:
        return float(sum(b._sum() for b in self.blocks))

    def _dense(self) -> np.ndarray:
        return np.vstack([b._dense() for b in self.blocks])

    def __repr__(self) -> str:
        return "Union([" + ", ".join(repr(b) for b in self.blocks) + "])"


class Sum(QueryMatrix):
    """A_1 + … + A_k for same-shape terms (e.g. the Gram of a union)."""

    def __init__(self, terms: Iterable[QueryMatrix]) -> None:
        self.terms = tuple(_check_blocks(terms, "Sum"))
        shape = self.terms[0].shape
        for t in self.terms:
            if t.shape != shape:
                raise ProgrammingError(f"Sum terms must share a shape: {t!r} is {t.shape}, "
                                       f"expected {shape}",
                                       hint="to stack queries vertically use Union")
        self._shape = shape

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        out = self.terms[0]._matmat(X)
        for t in self.terms[1:]:
            out = out + t._matmat(X)
        return out

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        out = self.terms[0]._rmatmat(Y)
        for t in self.terms[1:]:
            out = out + t._rmatmat(Y)
        return out

    def _transpose(self) -> QueryMatrix:
        return Sum([t.T for t in self.terms])

    def _trace(self) -> float:
        return float(sum(t._trace() for t in self.terms))

    def _diag(self) -> np.ndarray:
        return cast(np.ndarray, sum(t._diag() for t in self.terms))  # at least one term

    def _sum(self) -> float:
        return float(sum(t._sum() for t in self.terms))

    def _dense(self) -> np.ndarray:
        return cast(np.ndarray, sum(t._dense() for t in self.terms))

    def __repr__(self) -> str:
        return "Sum([" + ", ".join(repr(t) for t in self.terms) + "])"
