"""A released block's integer factor kept as its structure, not its n² entries.

A release payload stores an identity, prefix or a·I + b·11ᵀ factor as a record (its kind
and size, ``measure/release.py``).  Reading it back used to build the dense matrix: the
flights ledger's 1,459-label ``dest`` identity was 17 MB of int64 held for the life of the
process (and copied to float by each consumer), although the answer path only needs its
closed forms (``SpanPinv``, ``Identity``, a scaled identity's marginal).  :class:`StructuredFactor`
is that record with the ndarray surface the consumers read: ``shape``/``ndim``/``dtype``
without building anything, the structured questions (``span_form``, ``scaled_identity``,
``leaf``) in closed form, and everything else (``astype``, indexing, ``np.asarray``,
arithmetic with arrays) through the dense matrix, built on that call and not kept, so a
consumer that does not know the structure gets the same numbers as before (issue 35).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsql.linalg.base import QueryMatrix, is_scaled_identity

KINDS = ("identity", "prefix", "diagonal_plus_constant")


class StructuredFactor:
    """The n×n matrix of one kind: ``identity`` (I), ``prefix`` (lower triangle of ones) or
    ``diagonal_plus_constant`` (``diagonal`` on the diagonal, ``other`` elsewhere).  The
    entries are int64 as read from a payload; ``scaled`` multiplies them by a float (the
    block's scale), as ``f.astype(float) * s`` does entry by entry."""

    __array_priority__ = 100          # ndarray ⊙ StructuredFactor defers to the methods below
    __hash__ = None                   # type: ignore[assignment]   # == is elementwise, as an array's

    def __init__(self, kind: str, n: int, diagonal: Any = 1, other: Any = 0,
                 dtype: Any = np.int64) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown factor kind {kind!r} in a release payload")
        self.kind, self.n = kind, int(n)
        self.dtype = np.dtype(dtype)
        if kind == "identity":
            diagonal, other = 1, 0
        self.diagonal, self.other = self.dtype.type(diagonal), self.dtype.type(other)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    ndim = 2

    @property
    def size(self) -> int:
        return self.n * self.n

    def dense(self) -> np.ndarray:
        """The matrix itself (n² entries: built on each call, never kept)."""
        n = self.n
        if self.kind == "prefix":
            out = np.tril(np.ones((n, n), dtype=self.dtype))
            return out if self.diagonal == 1 else out * self.diagonal
        out = np.full((n, n), self.other, dtype=self.dtype)
        np.fill_diagonal(out, self.diagonal)
        return out

    def scaled(self, s: float) -> StructuredFactor:
        """``self.astype(float64) * s`` with the structure kept (the same float products)."""
        d, o = np.float64(self.diagonal) * s, np.float64(self.other) * s
        kind = "diagonal_plus_constant" if self.kind == "identity" else self.kind
        return StructuredFactor(kind, self.n, d, o, np.float64)

    def scaled_identity(self) -> float | None:
        """d when the matrix is d·I with d ≠ 0, else None (``base.is_scaled_identity``)."""
        if self.n == 0:
            return None
        if self.kind == "prefix" and self.n > 1:
            return None
        if self.other != 0 and self.n > 1:
            return None
        d = float(self.diagonal)
        return d if d != 0 else None

    def max_abs(self) -> float:
        """The largest |entry| (0 for the empty matrix)."""
        if self.n == 0:
            return 0.0
        return max(abs(float(self.diagonal)), abs(float(self.other)) if self.n > 1 else 0.0)

    def span_form(self, min_columns: int) -> tuple[float, float] | None:
        """(a, b) with the matrix = a·I + b·11ᵀ invertible, as ``rowscaled.span_form`` reads
        it from the dense matrix (b the entry at [0, 1], a = [0, 0] − b), or None."""
        n = self.n
        if self.kind == "prefix" or n < min_columns:
            return None
        b = float(self.other)
        a = float(self.diagonal) - b
        if a == 0.0 or a + b * n == 0.0:
            return None
        return a, b

    def leaf(self) -> QueryMatrix | None:
        """The query matrix in implicit form when it is an identity, else None."""
        from dpsql.linalg.leaves import Identity
        return Identity(self.n) if self.scaled_identity() == 1.0 else None

    # --- the ndarray surface, through the dense matrix -----------------------------------
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return self.dense().astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        return self.dense()[key]

    def __getattr__(self, name: str) -> Any:
        # the rest of ndarray's attributes (T, sum, diagonal, ...): those of the dense matrix
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dense(), name)

    def __eq__(self, other: Any) -> Any:
        return self.dense() == np.asarray(other)

    def __ne__(self, other: Any) -> Any:
        return self.dense() != np.asarray(other)

    def __mul__(self, other: Any) -> Any:
        return self.dense() * np.asarray(other)

    __rmul__ = __mul__

    def __matmul__(self, other: Any) -> Any:
        return self.dense() @ np.asarray(other)

    def __rmatmul__(self, other: Any) -> Any:
        return np.asarray(other) @ self.dense()

    def __neg__(self) -> np.ndarray:
        return -self.dense()

    def __abs__(self) -> np.ndarray:
        return np.abs(self.dense())

    def __repr__(self) -> str:
        return f"StructuredFactor({self.kind!r}, n={self.n}, diagonal={self.diagonal}, other={self.other})"


def scaled_identity(f: Any) -> float | None:
    """d when the square factor ``f`` (an array or a :class:`StructuredFactor`) is d·I, d ≠ 0."""
    if isinstance(f, StructuredFactor):
        return f.scaled_identity()
    if f.ndim != 2 or f.shape[0] != f.shape[1] or f.shape[0] == 0:
        return None
    d = float(f[0, 0])
    return d if d != 0.0 and is_scaled_identity(f, d) else None
