"""Per-attribute building-block matrices (ICML 2019 appendix B.1, Table 2).

These are the factors of Kronecker query matrices: ``Identity`` (I, keep the
attribute), ``Total`` (1, marginalise it out), ``Indicator`` (e_S, evidence on a set
of cells), ``Bucket`` (R_f, coarsen the domain by a map f), ``Values`` (E, weight each
cell, e.g. by its numeric value for SUM), plus ``Ones`` (the all-ones matrix, Gram of
``Total``), ``Diagonal`` (per-row weights, appendix C.2's D) and ``Explicit`` (any small
array).  Each gives closed forms for its Gram matrix, column norms and
pseudo-inverse where one exists; the range leaves (P and friends) are in
``ranges.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from dpsql.errors import ProgrammingError
from dpsql.linalg.base import Explicit, Product, QueryMatrix, Weighted

__all__ = ["Identity", "Ones", "Total", "Values", "Indicator", "Bucket", "Diagonal",
           "Explicit"]


def _check_size(n: object, what: str = "n") -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ProgrammingError(f"{what} must be a positive integer, got {n!r}",
                               hint="domain sizes count cells and are at least 1")
    return int(n)


def _finite_vector(values: npt.ArrayLike, n: int, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (n,):
        raise ProgrammingError(f"{what} must have length {n}, got shape {v.shape}",
                               hint="give one value per cell of the attribute")
    if not np.all(np.isfinite(v)):
        raise ProgrammingError(f"{what} must be finite",
                               hint="NULL cells carry NaN representatives; replace them "
                                    "(usually by 0) before building the query")
    return v


class Identity(QueryMatrix):
    """I_n: one query per cell ("keep variable in", Table 2)."""

    def __init__(self, n: int) -> None:
        self.n = _check_size(n)
        self._shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.array(X, dtype=np.float64, copy=True)

    _rmatmat = _matmat

    def _transpose(self) -> QueryMatrix:
        return self

    def gram(self) -> QueryMatrix:
        return self

    def pinv(self) -> QueryMatrix:
        return self

    def _sensitivity(self, p: int) -> float:
        return 1.0

    def _column_norms(self, p: int) -> np.ndarray:
        return np.ones(self.n)

    def _trace(self) -> float:
        return float(self.n)

    def _diag(self) -> np.ndarray:
        return np.ones(self.n)

    def _sum(self) -> float:
        return float(self.n)

    def _dense(self) -> np.ndarray:
        return np.eye(self.n)

    def __repr__(self) -> str:
        return f"Identity({self.n})"


class Ones(QueryMatrix):
    """The m×n all-ones matrix; ``Total(n)`` is its 1×n case and 1ᵀ1 = Ones(n, n)."""

    def __init__(self, m: int, n: int) -> None:
        self._shape = (_check_size(m, "m"), _check_size(n))

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        s = X.sum(axis=0, keepdims=True)
        return np.repeat(s, self._shape[0], axis=0)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        s = Y.sum(axis=0, keepdims=True)
        return np.repeat(s, self._shape[1], axis=0)

    def _transpose(self) -> QueryMatrix:
        m, n = self._shape
        return self if m == n else Ones(n, m)

    def gram(self) -> QueryMatrix:
        m, n = self._shape
        return Ones(n, n) if m == 1 else Weighted(float(m), Ones(n, n))

    def pinv(self) -> QueryMatrix:
        # 1_m 1_nᵀ has the single singular value sqrt(mn); its pseudo-inverse is
        # 1_n 1_mᵀ / (mn).
        m, n = self._shape
        return Weighted(1.0 / (m * n), Ones(n, m))

    def _sensitivity(self, p: int) -> float:
        return float(self._shape[0]) ** (1.0 / p)

    def _column_norms(self, p: int) -> np.ndarray:
        return np.full(self._shape[1], self._sensitivity(p))

    def _trace(self) -> float:
        return float(self._shape[0])

    def _diag(self) -> np.ndarray:
        return np.ones(self._shape[0])

    def _sum(self) -> float:
        return float(self._shape[0] * self._shape[1])

    def _dense(self) -> np.ndarray:
        return np.ones(self._shape)

    def __repr__(self) -> str:
        m, n = self._shape
        return f"Ones({m}, {n})"


class Total(Ones):
    """1 (1×n): the total over an attribute ("marginalise variable out", Table 2)."""

    def __init__(self, n: int) -> None:
        super().__init__(1, n)
        self.n = self._shape[1]

    def __repr__(self) -> str:
        return f"Total({self.n})"


class Values(QueryMatrix):
    """E (1×n): one query weighting cell a by ``values[a]`` ("reduce to mean", Table 2)."""

    def __init__(self, n: int, values: npt.ArrayLike) -> None:
        self.n = _check_size(n)
        self.values = _finite_vector(values, self.n, "values")
        self.values.flags.writeable = False
        self._shape = (1, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return (self.values @ X)[None, :]

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return np.outer(self.values, Y[0])

    def gram(self) -> QueryMatrix:
        return Product(self.T, self)

    def pinv(self) -> QueryMatrix:
        # A non-zero row v has v⁺ = vᵀ / |v|²; the zero row's pseudo-inverse is 0.
        sq = float(self.values @ self.values)
        return Weighted(0.0 if sq == 0.0 else 1.0 / sq, self.T)

    def _sensitivity(self, p: int) -> float:
        return float(np.abs(self.values).max())

    def _column_norms(self, p: int) -> np.ndarray:
        return np.abs(self.values)

    def _sum(self) -> float:
        return float(self.values.sum())

    def _dense(self) -> np.ndarray:
        return self.values[None, :].copy()

    def __repr__(self) -> str:
        return f"Values({self.n}, ...)"


class Indicator(Values):
    """e_S (1×n): counts the cells in S ("inject evidence (disjuncts)", Table 2)."""

    def __init__(self, n: int, cells: Iterable[int] | npt.ArrayLike) -> None:
        n = _check_size(n)
        if isinstance(cells, (set, frozenset)):
            cells = sorted(cells)
        arr = np.asarray(cells)
        if arr.dtype == bool:
            if arr.shape != (n,):
                raise ProgrammingError(f"indicator mask must have length {n}, got {arr.shape}",
                                       hint="pass a boolean mask over the cells or a list "
                                            "of cell indices")
            idx = np.flatnonzero(arr)
        else:
            idx = np.unique(arr.astype(np.int64).ravel())
            if idx.size and (idx[0] < 0 or idx[-1] >= n):
                raise ProgrammingError(f"indicator cells must lie in [0, {n}), got {cells!r}",
                                       hint="cells are 0-based indices into the attribute "
                                            "domain")
        values = np.zeros(n)
        values[idx] = 1.0
        super().__init__(n, values)
        self.cells = tuple(int(i) for i in idx)

    def _sensitivity(self, p: int) -> float:
        return 1.0 if self.cells else 0.0

    def __repr__(self) -> str:
        return f"Indicator({self.n}, {list(self.cells)!r})"


#: Largest n×n gram of a ``Bucket`` materialised by ``Bucket.gram`` (beyond: the lazy product).
_GRAM_CELLS = 1 << 24


class Bucket(QueryMatrix):
    """R_f (r×n): row b sums the cells a with f(a) = b ("compress domain", Table 2).

    ``mapping[a] = -1`` drops cell a from every bucket.  Stored as a sparse 0/1
    matrix so products cost O(n·k) whatever the number of buckets.
    """

    def __init__(self, n: int, mapping: npt.ArrayLike, buckets: int | None = None) -> None:
        self.n = _check_size(n)
        f = np.asarray(mapping)
        if f.shape != (self.n,) or not np.issubdtype(f.dtype, np.integer):
            raise ProgrammingError(
                f"bucket mapping must be {self.n} integers, got shape {f.shape} "
                f"dtype {f.dtype}", hint="mapping[a] is the bucket of cell a, or -1")
        f = f.astype(np.int64)
        top = int(f.max()) + 1 if f.size else 0
        r = top if buckets is None else int(buckets)
        if f.min() < -1 or top > r or r < 1:
            raise ProgrammingError(
                f"bucket mapping values must lie in [-1, {r}), got range "
                f"[{f.min()}, {top - 1}]",
                hint="use -1 for cells outside every bucket; pass buckets= to add empty "
                     "trailing buckets")
        self.mapping = f
        self.mapping.flags.writeable = False
        self.buckets = r
        self._shape = (r, self.n)
        keep = np.flatnonzero(f >= 0)
        self._sparse = None
        self._counts = np.bincount(f[keep], minlength=r).astype(np.float64)

    @property
    def _matrix(self) -> Any:  # a scipy.sparse CSR matrix
        # Built on first product: compiling a query with a bucketed column needs none, and
        # scipy.sparse is then never imported by a process that only answers (issue 17).
        if self._sparse is None:
            import scipy.sparse as sp
            keep = np.flatnonzero(self.mapping >= 0)
            self._sparse = sp.csr_matrix((np.ones(keep.size), (self.mapping[keep], keep)), shape=self._shape)
        return self._sparse

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self._matrix @ X, dtype=np.float64)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return np.asarray(self._matrix.T @ Y, dtype=np.float64)

    def gram(self) -> QueryMatrix:
        # RᵀR[a, b] = 1 when a and b share a bucket.  A GROUP BY over every cell of its own
        # (a permutation of the cells) has the identity gram; else, on an attribute small
        # enough for the n×n gram to be materialised anyway, the gram comes from comparing
        # the mapping with itself in O(n²), not from the n³ product of the generic path
        # (a 1,459-label GROUP BY: 0.1 s per query, issue 35 item 2).
        f = self.mapping
        if np.array_equal(np.sort(f), np.arange(self.n)):
            return Identity(self.n)
        if self.n * self.n <= _GRAM_CELLS:
            same = (f[:, None] == f[None, :]) & (f >= 0)[:, None]
            return Explicit(same.astype(np.float64))
        return super().gram()

    def pinv(self) -> QueryMatrix:
        # R Rᵀ = diag(bucket sizes), so R⁺ = Rᵀ (R Rᵀ)⁺ with empty buckets giving 0.
        inv = np.divide(1.0, self._counts, out=np.zeros_like(self._counts),
                        where=self._counts > 0)
        return Product(self.T, Diagonal(inv))

    def _column_norms(self, p: int) -> np.ndarray:
        return (self.mapping >= 0).astype(np.float64)

    def _sum(self) -> float:
        return float(self._counts.sum())

    def _dense(self) -> np.ndarray:
        out = np.zeros(self._shape)
        keep = np.flatnonzero(self.mapping >= 0)
        out[self.mapping[keep], keep] = 1.0
        return out

    def __repr__(self) -> str:
        return f"Bucket({self.n}, buckets={self.buckets})"


class Diagonal(QueryMatrix):
    """diag(d): per-row weights, e.g. 1/σ_i for unequal noise (ICML appendix C.2)."""

    def __init__(self, values: npt.ArrayLike) -> None:
        d = np.asarray(values, dtype=np.float64)
        if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
            raise ProgrammingError("Diagonal needs a non-empty 1-D vector of finite values",
                                   hint="pass one weight per row")
        self.values = d
        self.values.flags.writeable = False
        self._shape = (d.size, d.size)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.values[:, None] * X

    _rmatmat = _matmat

    def _transpose(self) -> QueryMatrix:
        return self

    def gram(self) -> QueryMatrix:
        return Diagonal(self.values ** 2)

    def pinv(self) -> QueryMatrix:
        d = self.values
        return Diagonal(np.divide(1.0, d, out=np.zeros_like(d), where=d != 0))

    def _column_norms(self, p: int) -> np.ndarray:
        return np.abs(self.values)

    def _trace(self) -> float:
        return float(self.values.sum())

    def _diag(self) -> np.ndarray:
        return self.values.copy()

    def _sum(self) -> float:
        return float(self.values.sum())

    def _dense(self) -> np.ndarray:
        return np.diag(self.values)

    def __repr__(self) -> str:
        return f"Diagonal({self.values.size})"
