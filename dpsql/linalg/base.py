"""The implicit query-matrix base class and the three wrappers every matrix needs.

A :class:`QueryMatrix` is a linear map over the (vectorised) data domain that is
never required to exist as an array: workloads and strategies over 10^8-cell domains
are represented by their structure (thesis §3.4, "implicit representations") and
only ever applied to vectors.  This module defines

* :class:`QueryMatrix`: public methods validate shapes and argument values, then call
  private hooks (``_matmat``, ``_rmatmat``, ``_column_norms`` …) that subclasses
  override with structured formulas.  Every hook has a slow, obviously-correct
  fallback that builds the answer column by column, so a new leaf only has to
  supply ``_matmat``/``_rmatmat`` to be correct and can add closed forms later;
* :class:`Transpose`, :class:`Weighted` and :class:`Product`, which ``.T``, ``c * A``
  and ``A @ B`` return, and :class:`Explicit` (an array), which the dense fallbacks
  return.  They live here (not in ``composite.py`` / ``leaves.py``) because the base
  class's methods construct them, so every other module imports this one and this
  one imports none of them.

Conventions: float64 results throughout; a matrix's ``shape`` holds Python ints
(Kronecker shapes can exceed int64 as long as nothing is materialised); vectors
over a product domain use C-order flattening, as in thesis Algorithm 1.
"""

from __future__ import annotations

import abc
import math
import numbers

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from dpsql.errors import NotSupportedError, ProgrammingError

__all__ = [
    "QueryMatrix", "Transpose", "Weighted", "Product", "Explicit",
    "DENSE_LIMIT", "WORK_LIMIT", "is_scaled_identity",
]

#: Largest number of entries ``dense()`` (and the dense fallbacks) will materialise:
#: 2^25 float64 entries is 256 MiB, the most we want one call to allocate on a
#: shared machine.
DENSE_LIMIT = 1 << 25

#: Largest m*n for which the column-by-column fallbacks (column norms, diagonal)
#: run: they stream, so memory is bounded, but time grows with m*n.
WORK_LIMIT = 1 << 28

# Column blocks of the streaming fallbacks hold about this many float64 entries.
_BLOCK_ENTRIES = 1 << 20


def _shape_error(what: str, expected: tuple[object, ...], got: tuple[int, ...]) -> ProgrammingError:
    return ProgrammingError(
        f"{what}: expected shape {expected}, got {got}",
        hint="the operand must have as many rows as the matrix has columns "
             "(vectors over a product domain are C-order flattened)",
    )


def check_p(p: object) -> int:
    """Validate a norm order; only p in {1, 2} is meaningful for DP sensitivity."""
    if p not in (1, 2):
        raise ProgrammingError(
            f"unsupported norm order p={p!r}",
            hint="use p=1 (Laplace / L1 sensitivity) or p=2 (Gaussian / L2 sensitivity)",
        )
    return int(p)


def check_weight(c: object) -> float:
    """Validate a block weight: a finite real number, returned as float."""
    if not isinstance(c, numbers.Real) or not math.isfinite(float(c)):
        raise ProgrammingError(f"matrix weight must be a finite real number, got {c!r}",
                               hint="weights scale whole blocks of queries; pass a float")
    return float(c)


class QueryMatrix(abc.ABC):
    """A linear query matrix known by its structure (thesis §3.4).

    Subclasses set ``self._shape`` and override ``_matmat`` and ``_rmatmat`` (X has
    ``shape[1]`` rows, Y has ``shape[0]`` rows, both 2-D float64; return 2-D
    float64).  Everything else has a generic fallback that subclasses replace with
    closed forms where the maths gives one.
    """

    # Let numpy defer to our reflected operators (x @ A, 2.0 * A) instead of
    # trying to broadcast over an object it does not understand.
    __array_ufunc__ = None
    dtype = np.dtype(np.float64)
    _shape: tuple[int, int]
    # Preferred number of entries per block when a Kron applies this matrix along
    # one axis of a big tensor (thesis Algorithm 1).  Numpy-ufunc leaves want big
    # blocks to amortise per-call overhead; BLAS-backed ones override it with small,
    # cache-resident blocks.
    _slab_hint = 1 << 18

    # ----------------------------------------------------------------- shape
    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def is_square(self) -> bool:
        return self._shape[0] == self._shape[1]

    # ------------------------------------------------------ products (public)
    def matvec(self, x: npt.ArrayLike) -> np.ndarray:
        """``A x`` for a 1-D vector ``x`` of length ``shape[1]``."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1 or x.shape[0] != self._shape[1]:
            raise _shape_error("matvec", (self._shape[1],), x.shape)
        return self._matmat(x[:, None])[:, 0]

    def rmatvec(self, y: npt.ArrayLike) -> np.ndarray:
        """``Aᵀ y`` for a 1-D vector ``y`` of length ``shape[0]``."""
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1 or y.shape[0] != self._shape[0]:
            raise _shape_error("rmatvec", (self._shape[0],), y.shape)
        return self._rmatmat(y[:, None])[:, 0]

    def matmat(self, X: npt.ArrayLike) -> np.ndarray:
        """``A X`` for a 2-D array with ``shape[1]`` rows."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] != self._shape[1]:
            raise _shape_error("matmat", (self._shape[1], "k"), X.shape)
        return self._matmat(X)

    def rmatmat(self, Y: npt.ArrayLike) -> np.ndarray:
        """``Aᵀ Y`` for a 2-D array with ``shape[0]`` rows."""
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim != 2 or Y.shape[0] != self._shape[0]:
            raise _shape_error("rmatmat", (self._shape[0], "k"), Y.shape)
        return self._rmatmat(Y)

    # positional-only: a symmetric matrix sets ``_rmatmat = _matmat``
    @abc.abstractmethod
    def _matmat(self, X: np.ndarray, /) -> np.ndarray:
        """A X for 2-D float64 X with shape[1] rows (shape already checked)."""

    @abc.abstractmethod
    def _rmatmat(self, Y: np.ndarray, /) -> np.ndarray:
        """Aᵀ Y for 2-D float64 Y with shape[0] rows (shape already checked)."""

    def _matmat_rows(self, Z: np.ndarray) -> np.ndarray:
        """Z Aᵀ: A applied to every row of Z (the last Kron axis of a matvec).

        Leaves override this when they can write the row layout directly, which
        spares Algorithm 1 two strided transposes on the innermost axis.
        """
        return self._matmat(Z.T).T

    # ------------------------------------------------------------- algebra
    @property
    def T(self) -> QueryMatrix:
        return self._transpose()

    def _transpose(self) -> QueryMatrix:
        return Transpose(self)

    def gram(self) -> QueryMatrix:
        """AᵀA, kept structured (thesis §3.4.2: Kron of grams, sums for unions)."""
        return Product(self.T, self)

    def pinv(self) -> QueryMatrix:
        """The Moore–Penrose pseudo-inverse A⁺.

        Fallback for matrices without a structured formula: materialise A when it
        is small; otherwise use A⁺ = (AᵀA)⁺Aᵀ (or Aᵀ(AAᵀ)⁺) when the smaller
        Gram matrix is small, which keeps the tall side implicit.
        """
        m, n = self._shape
        if m * n <= DENSE_LIMIT:
            return Explicit(np.linalg.pinv(self.dense()))
        if n * n <= DENSE_LIMIT:
            return Product(Explicit(_pinv_psd(self.gram().dense())), self.T)
        if m * m <= DENSE_LIMIT:
            return Product(self.T, Explicit(_pinv_psd(Product(self, self.T).dense())))
        raise NotSupportedError(
            f"no structured pseudo-inverse for {self!r} of shape {m}x{n}",
            hint="express the matrix as a Kron (whose pseudo-inverse is the Kron of the "
                 "factors' pseudo-inverses) or reduce the domain",
        )

    # ------------------------------------------------------------- scalars
    def sensitivity(self, p: int = 1) -> float:
        """Largest column p-norm, i.e. the L_p sensitivity of the queries (thesis §2)."""
        return float(self._sensitivity(check_p(p)))

    def _sensitivity(self, p: int) -> float:
        norms = self._column_norms(p)
        return float(norms.max()) if norms.size else 0.0

    def column_norms(self, p: int = 2) -> np.ndarray:
        """The p-norm of every column (length ``shape[1]``)."""
        return self._column_norms(check_p(p))

    def _column_norms(self, p: int) -> np.ndarray:
        self._check_work("column norms")
        out = np.empty(self._shape[1])
        for lo, hi, block in self._column_blocks():
            out[lo:hi] = _pnorm(block, p, axis=0)
        return out

    def trace(self) -> float:
        """Trace of the (square) matrix itself; for AᵀA call ``A.gram().trace()``."""
        self._require_square("trace")
        return float(self._trace())

    def _trace(self) -> float:
        return float(self._diag().sum())

    def diag(self) -> np.ndarray:
        """Main diagonal of a square matrix."""
        self._require_square("diag")
        return self._diag()

    def _diag(self) -> np.ndarray:
        self._check_work("diagonal")
        out = np.empty(self._shape[1])
        for lo, hi, block in self._column_blocks():
            out[lo:hi] = block[np.arange(lo, hi), np.arange(hi - lo)]
        return out

    def sum(self) -> float:
        """Sum of all entries, 1ᵀ A 1 (one transposed product, never materialised)."""
        return float(self._sum())

    def _sum(self) -> float:
        return float(self._rmatmat(np.ones((self._shape[0], 1))).sum())

    # --------------------------------------------------------- materialise
    def dense(self) -> np.ndarray:
        """The explicit float64 matrix (small matrices only; tests and tiny leaves)."""
        m, n = self._shape
        if m * n > DENSE_LIMIT:
            raise NotSupportedError(
                f"refusing to materialise a {m}x{n} query matrix ({m * n} entries)",
                hint=f"dense() is limited to {DENSE_LIMIT} entries; use matvec/rmatvec, "
                     "which never form the matrix",
            )
        return self._dense()

    def _dense(self) -> np.ndarray:
        m, n = self._shape
        if m >= n:
            return self._matmat(np.eye(n))
        return np.ascontiguousarray(self._rmatmat(np.eye(m)).T)

    # ----------------------------------------------------------- operators
    # Any: a QueryMatrix for a matrix operand, an ndarray for an array (NotImplemented else)
    def __matmul__(self, other: object) -> Any:
        if isinstance(other, QueryMatrix):
            if self._shape[1] != other.shape[0]:
                raise _shape_error("matrix product", (self._shape[1], "k"), other.shape)
            return self._compose(other)
        if isinstance(other, (np.ndarray, list, tuple)):
            arr = np.asarray(other, dtype=np.float64)
            return self.matvec(arr) if arr.ndim == 1 else self.matmat(arr)
        return NotImplemented

    def _compose(self, other: QueryMatrix) -> QueryMatrix:
        return Product(self, other)

    def __rmatmul__(self, other: object) -> Any:
        # y @ A == (Aᵀ yᵀ)ᵀ: rows of `other` are combined with the rows of A.
        if isinstance(other, (np.ndarray, list, tuple)):
            arr = np.asarray(other, dtype=np.float64)
            if arr.ndim == 1:
                return self.rmatvec(arr)
            return self.rmatmat(arr.T).T
        return NotImplemented

    def __mul__(self, c: object) -> Any:
        if isinstance(c, numbers.Real):
            return _scale(check_weight(c), self)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, c: object) -> Any:
        if isinstance(c, numbers.Real):
            c = check_weight(c)
            if c == 0.0:
                raise ProgrammingError("division of a query matrix by zero",
                                       hint="weights must be non-zero to divide by them")
            return _scale(1.0 / c, self)
        return NotImplemented

    def __neg__(self) -> QueryMatrix:
        return _scale(-1.0, self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._shape}"

    # ------------------------------------------------------------ helpers
    def _require_square(self, what: str) -> None:
        if not self.is_square:
            raise ProgrammingError(f"{what} needs a square matrix, {self!r} is {self._shape}",
                                   hint="for the Gram matrix use A.gram()." + what + "()")

    def _check_work(self, what: str) -> None:
        m, n = self._shape
        if m * n > WORK_LIMIT:
            raise NotSupportedError(
                f"{what} of {self!r} has no structured formula and the matrix is too "
                f"large ({m}x{n}) to scan",
                hint="build the matrix from Kron/Union/Weighted of leaves, whose column "
                     "norms and diagonals are computed factor by factor",
            )

    def _column_blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield (lo, hi, A[:, lo:hi]) computed as A times slices of the identity."""
        m, n = self._shape
        width = max(1, _BLOCK_ENTRIES // max(m, n, 1))
        for lo in range(0, n, width):
            hi = min(n, lo + width)
            E = np.zeros((n, hi - lo))
            E[np.arange(lo, hi), np.arange(hi - lo)] = 1.0
            yield lo, hi, self._matmat(E)


def is_scaled_identity(F: np.ndarray, d: float) -> bool:
    """Whether the square array ``F`` equals d·I, i.e. ``np.array_equal(F, d * np.eye(n))``
    for d ≠ 0 without building the n×n identity (a 1,459-label marginal's factor: 17 MB and
    ~10 ms for each check, several per new process, issue 35): every diagonal entry is d and
    no other entry is non-zero (NaN counts as non-zero, -0.0 as zero, as in array_equal)."""
    n = F.shape[0]
    if F.ndim != 2 or F.shape[1] != n or d == 0:
        return False
    return bool(np.all(np.diagonal(F) == d)) and int(np.count_nonzero(F)) == n


def _pnorm(block: np.ndarray, p: int, axis: int) -> np.ndarray:
    if p == 1:
        return np.abs(block).sum(axis=axis)
    return np.sqrt(np.square(block).sum(axis=axis))


def _pinv_psd(G: np.ndarray) -> np.ndarray:
    # A Gram matrix squares the condition number, so its eigenvalue noise sits at
    # eps*|G|, not eps*|A|; cut well above that (relative 1e-10).
    return np.linalg.pinv(G, rcond=1e-10, hermitian=True)


def _scale(c: float, A: QueryMatrix) -> QueryMatrix:
    if isinstance(A, Weighted):
        return Weighted(c * A.weight, A.base)
    return Weighted(c, A)


class Transpose(QueryMatrix):
    """Aᵀ as a view: its products are A's transposed products."""

    def __init__(self, base: QueryMatrix) -> None:
        assert isinstance(base, QueryMatrix)
        self.base = base
        self._shape = (base.shape[1], base.shape[0])
        self._slab_hint = base._slab_hint

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.base._rmatmat(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.base._matmat(Y)

    def _transpose(self) -> QueryMatrix:
        return self.base

    def gram(self) -> QueryMatrix:
        return Product(self.base, self.base.T)

    def pinv(self) -> QueryMatrix:
        # (Aᵀ)⁺ = (A⁺)ᵀ
        return self.base.pinv().T

    def _trace(self) -> float:
        return self.base._trace()

    def _diag(self) -> np.ndarray:
        return self.base._diag()

    def _sum(self) -> float:
        return self.base._sum()

    def _dense(self) -> np.ndarray:
        return np.ascontiguousarray(self.base._dense().T)

    def __repr__(self) -> str:
        return f"Transpose({self.base!r})"


class Weighted(QueryMatrix):
    """c·A: a block of queries scaled by one weight (thesis eq. 3.3, w_j 𝕎_j)."""

    def __init__(self, weight: float, base: QueryMatrix) -> None:
        if not isinstance(base, QueryMatrix):
            raise ProgrammingError(f"Weighted needs a QueryMatrix, got {type(base).__name__}",
                                   hint="wrap arrays in Explicit(...)")
        self.weight = check_weight(weight)
        self.base = base
        self._shape = base.shape
        self._slab_hint = base._slab_hint

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.weight * self.base._matmat(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.weight * self.base._rmatmat(Y)

    def _transpose(self) -> QueryMatrix:
        return Weighted(self.weight, self.base.T)

    def gram(self) -> QueryMatrix:
        return Weighted(self.weight ** 2, self.base.gram())

    def pinv(self) -> QueryMatrix:
        if self.weight == 0.0:
            return Weighted(0.0, self.base.T)
        return Weighted(1.0 / self.weight, self.base.pinv())

    def _sensitivity(self, p: int) -> float:
        return abs(self.weight) * self.base._sensitivity(p)

    def _column_norms(self, p: int) -> np.ndarray:
        return abs(self.weight) * self.base._column_norms(p)

    def _trace(self) -> float:
        return self.weight * self.base._trace()

    def _diag(self) -> np.ndarray:
        return self.weight * self.base._diag()

    def _sum(self) -> float:
        return self.weight * self.base._sum()

    def _dense(self) -> np.ndarray:
        return self.weight * self.base._dense()

    def __repr__(self) -> str:
        return f"Weighted({self.weight!r}, {self.base!r})"


class Product(QueryMatrix):
    """A·B, applied right to left; never multiplied out unless ``dense()`` is asked."""

    def __init__(self, left: QueryMatrix, right: QueryMatrix) -> None:
        if not (isinstance(left, QueryMatrix) and isinstance(right, QueryMatrix)):
            raise ProgrammingError("Product needs two QueryMatrix operands",
                                   hint="wrap arrays in Explicit(...)")
        if left.shape[1] != right.shape[0]:
            raise _shape_error("Product", (left.shape[1], "k"), right.shape)
        self.left = left
        self.right = right
        self._shape = (left.shape[0], right.shape[1])
        self._slab_hint = min(left._slab_hint, right._slab_hint)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.left._matmat(self.right._matmat(X))

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.right._rmatmat(self.left._rmatmat(Y))

    def _transpose(self) -> QueryMatrix:
        return Product(self.right.T, self.left.T)

    def _is_gram(self) -> bool:
        return isinstance(self.left, Transpose) and self.left.base is self.right

    def _diag(self) -> np.ndarray:
        # diag(AᵀA) holds the squared column 2-norms of A, which leaves know in
        # closed form.
        if self._is_gram():
            return self.right._column_norms(2) ** 2
        return super()._diag()

    def _trace(self) -> float:
        if self._is_gram():
            return float((self.right._column_norms(2) ** 2).sum())
        return super()._trace()

    def _dense(self) -> np.ndarray:
        lm, ln = self.left.shape
        rm, rn = self.right.shape
        if lm * ln <= DENSE_LIMIT and rm * rn <= DENSE_LIMIT:
            return self.left._dense() @ self.right._dense()
        return super()._dense()

    def __repr__(self) -> str:
        return f"Product({self.left!r}, {self.right!r})"


class Explicit(QueryMatrix):
    """A small matrix given as an array (OPT_0 strategies, arbitrary factors).

    Integer arrays are kept as given (measured query entries must stay on a
    lattice); products are float64.
    """

    # 64 KiB blocks: on the 40^5 benchmark 2^13-entry GEMMs used 1.6 CPU-s single-
    # threaded against 2.7 for 2^21, and stay under OpenBLAS's threading threshold,
    # which spared 2-4x CPU lost to spinning threads on a loaded 2-core machine.
    _slab_hint = 1 << 13

    def __init__(self, array: npt.ArrayLike) -> None:
        a = np.asarray(array)
        if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
            raise ProgrammingError(f"Explicit needs a non-empty 2-D array, got shape {a.shape}",
                                   hint="reshape vectors to (1, n) for a single query")
        if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
                or a.dtype == bool):
            raise ProgrammingError(f"Explicit needs a numeric array, got dtype {a.dtype}",
                                   hint="query entries are real numbers")
        if a.dtype == bool:
            a = a.astype(np.int64)
        if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
            raise ProgrammingError("Explicit matrix has non-finite entries",
                                   hint="query entries must be finite")
        self.array = a
        self._shape = (int(a.shape[0]), int(a.shape[1]))
        self._f64 = a if a.dtype == np.float64 else a.astype(np.float64)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self._f64 @ X

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self._f64.T @ Y

    def _matmat_rows(self, Z: np.ndarray) -> np.ndarray:
        return Z @ self._f64.T

    def _transpose(self) -> QueryMatrix:
        return Explicit(self.array.T)

    def gram(self) -> QueryMatrix:
        return Explicit(self._f64.T @ self._f64)

    def pinv(self) -> QueryMatrix:
        return Explicit(np.linalg.pinv(self._f64))

    def _column_norms(self, p: int) -> np.ndarray:
        return _pnorm(self._f64, p, axis=0)

    def _trace(self) -> float:
        return float(np.trace(self._f64))

    def _diag(self) -> np.ndarray:
        return np.diag(self._f64).copy()

    def _sum(self) -> float:
        return float(self._f64.sum())

    def _dense(self) -> np.ndarray:
        return self._f64.copy()

    def __repr__(self) -> str:
        m, n = self._shape
        return f"Explicit({m}x{n})"
