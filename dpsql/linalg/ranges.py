"""Range-query leaves and their closed-form Gram matrices (thesis §3.10 workloads).

``Prefix`` (P of ICML Table 2, the CDF), ``Suffix`` (Pᵀ), ``AllRange`` (every interval
[i, j], n(n+1)/2 rows) and ``WidthRange`` (every interval of one width) are applied
through running sums, so a product costs O(rows + n) per column and the matrices
are never built.  Their Gram matrices have closed forms:

* PᵀP, PPᵀ and AllRangeᵀAllRange are *symmetric semiseparable*:
  G[i, j] = a[min(i, j)] · b[max(i, j)] (0-based), with
  (a, b) = (1, n - j), (i + 1, 1) and (i + 1, n - j) respectively, because the
  number of intervals covering both i ≤ j is (#left ends ≤ i)·(#right ends ≥ j);
* WidthRangeᵀWidthRange is banded: G[i, j] counts the windows covering both cells.

``Difference`` is P⁻¹ (first differences), which makes P⁺ structured, and the inverse
of a non-singular semiseparable G is :class:`Tridiagonal`, so (AᵀA)⁻¹ and
AllRange⁺ = (AᵀA)⁻¹Aᵀ cost O(n) per column for any n.
"""

from __future__ import annotations

import abc

import numpy as np
import numpy.typing as npt

from dpsql.errors import ProgrammingError
from dpsql.linalg.base import DENSE_LIMIT, Product, QueryMatrix
from dpsql.linalg.leaves import Explicit, _check_size

__all__ = ["Prefix", "Suffix", "Difference", "AllRange", "WidthRange", "Semiseparable",
           "Tridiagonal", "WidthRangeGram"]


# numpy's cumsum along axis 0 of a C-ordered block walks each column with a large
# stride (6x slower than row-wise adds measured on 40 x 52k blocks); with wide rows a
# Python loop of vectorised row additions is faster, with narrow rows it is not.
_ROW_LOOP_MIN_WIDTH = 64


def _cumsum_rows(X: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Running sums down axis 0 (out[i] = X[:i+1].sum(0)), into ``out`` if given."""
    if out is None:
        out = np.empty(X.shape)
    if X.shape[0] == 0:
        return out
    if X[0].size < _ROW_LOOP_MIN_WIDTH:
        return np.cumsum(X, axis=0, out=out)
    out[0] = X[0]
    for i in range(1, X.shape[0]):
        np.add(out[i - 1], X[i], out=out[i])
    return out


def _cumsum0(X: np.ndarray) -> np.ndarray:
    """Running sums with a leading zero row: c[i] = X[:i].sum(0)."""
    c = np.empty((X.shape[0] + 1,) + X.shape[1:])
    c[0] = 0.0
    _cumsum_rows(X, out=c[1:])
    return c


def _rcumsum(X: np.ndarray) -> np.ndarray:
    """Reverse running sums: r[i] = X[i:].sum(0)."""
    out = np.empty(X.shape)
    _cumsum_rows(X[::-1], out=out[::-1])
    return out


class _RunningSum(QueryMatrix):
    """What Prefix and Suffix share: n×n triangles of ones, one on each side of the diagonal.

    Row b of either covers cell b, so the diagonal and trace are ones and n; the n(n+1)/2
    ones sum the same; column a holds ``_rows_per_cell()[a]`` ones, which gives the column
    norms and the Gram's semiseparable vector.  The subclasses say which way the sums run.
    """

    def __init__(self, n: int) -> None:
        self.n = _check_size(n)
        self._shape = (self.n, self.n)

    @abc.abstractmethod
    def _rows_per_cell(self) -> np.ndarray:
        """How many rows hold each cell."""

    def _column_norms(self, p: int) -> np.ndarray:
        return self._rows_per_cell() ** (1.0 / p)

    def _trace(self) -> float:
        return float(self.n)

    def _diag(self) -> np.ndarray:
        return np.ones(self.n)

    def _sum(self) -> float:
        return self.n * (self.n + 1) / 2.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.n})"


class Prefix(_RunningSum):
    """P (n×n): row b sums cells 0..b ("transform into CDF", ICML Table 2)."""

    def _rows_per_cell(self) -> np.ndarray:
        return self.n - np.arange(self.n, dtype=np.float64)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return _cumsum_rows(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return _rcumsum(Y)

    def _matmat_rows(self, Z: np.ndarray) -> np.ndarray:
        return np.cumsum(Z, axis=1)

    def gram(self) -> QueryMatrix:
        # Cells i and j are both in row b iff b >= max(i, j): n - max(i, j) rows.
        return Semiseparable(np.ones(self.n), self._rows_per_cell())

    def pinv(self) -> QueryMatrix:
        return Difference(self.n)

    def _dense(self) -> np.ndarray:
        return np.tril(np.ones((self.n, self.n)))


class Suffix(_RunningSum):
    """Pᵀ (n×n): row b sums cells b..n-1 (the complementary CDF)."""

    def _rows_per_cell(self) -> np.ndarray:
        return np.arange(1, self.n + 1, dtype=np.float64)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return _rcumsum(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return _cumsum_rows(Y)

    def _matmat_rows(self, Z: np.ndarray) -> np.ndarray:
        return np.cumsum(Z[:, ::-1], axis=1)[:, ::-1]

    def gram(self) -> QueryMatrix:
        # Cells i and j are both in row b iff b <= min(i, j): min(i, j) + 1 rows.
        return Semiseparable(self._rows_per_cell(), np.ones(self.n))

    def pinv(self) -> QueryMatrix:
        return Difference(self.n).T

    def _dense(self) -> np.ndarray:
        return np.triu(np.ones((self.n, self.n)))


class Difference(QueryMatrix):
    """P⁻¹ (n×n): row 0 is x_0, row b is x_b - x_{b-1}."""

    def __init__(self, n: int) -> None:
        self.n = _check_size(n)
        self._shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        out = np.array(X, dtype=np.float64, copy=True)
        out[1:] -= X[:-1]
        return out

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        out = np.array(Y, dtype=np.float64, copy=True)
        out[:-1] -= Y[1:]
        return out

    def pinv(self) -> QueryMatrix:
        return Prefix(self.n)

    def _column_norms(self, p: int) -> np.ndarray:
        norms = np.full(self.n, 2.0 ** (1.0 / p))
        norms[-1] = 1.0
        return norms

    def _trace(self) -> float:
        return float(self.n)

    def _diag(self) -> np.ndarray:
        return np.ones(self.n)

    def _sum(self) -> float:
        return 1.0

    def _dense(self) -> np.ndarray:
        return np.eye(self.n) - np.eye(self.n, k=-1)

    def __repr__(self) -> str:
        return f"Difference({self.n})"


class Semiseparable(QueryMatrix):
    """Symmetric G with G[i, j] = a[min(i, j)] · b[max(i, j)] (n×n).

    The Gram matrices of Prefix, Suffix and AllRange have this form; a product
    is two running sums: (Gx)_i = a_i Σ_{j≥i} b_j x_j + b_i Σ_{j<i} a_j x_j, O(n).
    """

    def __init__(self, a: npt.ArrayLike, b: npt.ArrayLike) -> None:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if a.ndim != 1 or a.shape != b.shape or a.size == 0 or not (
                np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise ProgrammingError("Semiseparable needs two finite 1-D vectors of one length",
                                   hint="G[i, j] = a[min(i, j)] * b[max(i, j)]")
        self.a, self.b = a, b
        self.n = a.size
        self._shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        upper = _rcumsum(self.b[:, None] * X)           # Σ_{j≥i} b_j x_j
        lower = _cumsum0(self.a[:, None] * X)[:-1]      # Σ_{j<i} a_j x_j
        return self.a[:, None] * upper + self.b[:, None] * lower

    _rmatmat = _matmat

    def _transpose(self) -> QueryMatrix:
        return self

    def _trace(self) -> float:
        return float(self.a @ self.b)

    def _diag(self) -> np.ndarray:
        return self.a * self.b

    def _dense(self) -> np.ndarray:
        i = np.arange(self.n)
        lo = np.minimum(i[:, None], i[None, :])
        hi = np.maximum(i[:, None], i[None, :])
        return self.a[lo] * self.b[hi]

    def pinv(self) -> QueryMatrix:
        """Tridiagonal inverse when G is non-singular, else a dense pseudo-inverse.

        With d_i = a_{i+1} b_i - a_i b_{i+1}, det G = a_0 b_{n-1} Π d_i and
        G⁻¹ has off-diagonal -1/d_i, corners a_1/(a_0 d_0) and
        b_{n-2}/(b_{n-1} d_{n-2}), and interior diagonal
        (a_{i+1} b_{i-1} - a_{i-1} b_{i+1}) / (d_{i-1} d_i).  (Column j of G is
        b_j·a on rows i ≤ j and a_j·b below, so a three-term row of T annihilates
        it away from the diagonal; the tests check T G = I and the determinant.)
        """
        a, b, n = self.a, self.b, self.n
        scale = np.abs(a).max() * np.abs(b).max()
        d = a[1:] * b[:-1] - a[:-1] * b[1:]
        # Near-singular G: the inverse would be huge and pinv must truncate instead.
        tol = 1e-12 * scale
        singular = (scale == 0 or abs(a[0] * b[-1]) <= tol
                    or (d.size > 0 and np.abs(d).min() <= tol))
        if not singular:
            if n == 1:
                return Tridiagonal(np.array([1.0 / (a[0] * b[0])]), np.empty(0))
            diag = np.empty(n)
            diag[0] = a[1] / (a[0] * d[0])
            diag[-1] = b[-2] / (b[-1] * d[-1])
            diag[1:-1] = (a[2:] * b[:-2] - a[:-2] * b[2:]) / (d[:-1] * d[1:])
            return Tridiagonal(diag, -1.0 / d)
        if self.n * self.n <= DENSE_LIMIT:
            return Explicit(np.linalg.pinv(self._dense(), hermitian=True))
        return super().pinv()

    def __repr__(self) -> str:
        return f"Semiseparable({self.n})"


class Tridiagonal(QueryMatrix):
    """Symmetric tridiagonal T (n×n): ``diag`` on the diagonal, ``off`` beside it.

    Arises as the inverse of the range Gram matrices (see :class:`Semiseparable`).
    """

    def __init__(self, diag: npt.ArrayLike, off: npt.ArrayLike) -> None:
        d = np.asarray(diag, dtype=np.float64)
        e = np.asarray(off, dtype=np.float64)
        if d.ndim != 1 or d.size == 0 or e.shape != (d.size - 1,) or not (
                np.all(np.isfinite(d)) and np.all(np.isfinite(e))):
            raise ProgrammingError("Tridiagonal needs a finite diagonal of length n and "
                                   "off-diagonal of length n - 1",
                                   hint="the matrix is symmetric: one off-diagonal suffices")
        self.diag_values, self.off = d, e
        self.n = d.size
        self._shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        out = self.diag_values[:, None] * X
        out[:-1] += self.off[:, None] * X[1:]
        out[1:] += self.off[:, None] * X[:-1]
        return out

    _rmatmat = _matmat

    def _transpose(self) -> QueryMatrix:
        return self

    def _trace(self) -> float:
        return float(self.diag_values.sum())

    def _diag(self) -> np.ndarray:
        return self.diag_values.copy()

    def _sum(self) -> float:
        return float(self.diag_values.sum() + 2.0 * self.off.sum())

    def _dense(self) -> np.ndarray:
        return np.diag(self.diag_values) + np.diag(self.off, 1) + np.diag(self.off, -1)

    def __repr__(self) -> str:
        return f"Tridiagonal({self.n})"


class AllRange(QueryMatrix):
    """Every interval query [i, j], 0 ≤ i ≤ j < n: n(n+1)/2 rows, ordered by (i, j).

    Row (i, j) is c[j+1] - c[i] for the running sums c of x, so products cost
    O(rows) per column and the matrix is never materialised.
    """

    def __init__(self, n: int) -> None:
        self.n = _check_size(n)
        self._shape = (self.n * (self.n + 1) // 2, self.n)
        self._rows: tuple[np.ndarray, np.ndarray] | None = None

    def _intervals(self) -> tuple[np.ndarray, np.ndarray]:
        if self._rows is None:
            self._rows = np.triu_indices(self.n)  # (i, j) pairs, i <= j, row-major
        return self._rows

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        i, j = self._intervals()
        c = _cumsum0(X)
        return c[j + 1] - c[i]

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        # (Aᵀy)_a = Σ_{i≤a} Σ_{j≥a} y[i, j].  Rows with left end i are one contiguous
        # run (j = i..n-1), whose reverse running sums give Σ_{j≥a} y[i, j] for every
        # a ≥ i: n vectorised steps, O(rows·k) time and O(n·k) scratch.
        n = self.n
        out = np.zeros((n, Y.shape[1]))
        start = 0
        for i in range(n):
            run = Y[start:start + n - i]
            out[i:] += _rcumsum(run)
            start += n - i
        return out

    def gram(self) -> QueryMatrix:
        # Intervals covering i ≤ j: (i + 1) left ends times (n - j) right ends.
        ar = np.arange(self.n, dtype=np.float64)
        return Semiseparable(ar + 1.0, self.n - ar)

    def pinv(self) -> QueryMatrix:
        # Full column rank (the width-1 intervals are I), so A⁺ = (AᵀA)⁻¹Aᵀ, and
        # (AᵀA)⁻¹ is tridiagonal: O(rows) per column for any n.
        return Product(self.gram().pinv(), self.T)

    def _column_norms(self, p: int) -> np.ndarray:
        ar = np.arange(self.n, dtype=np.float64)
        return ((ar + 1.0) * (self.n - ar)) ** (1.0 / p)

    def _sum(self) -> float:
        ar = np.arange(self.n, dtype=np.float64)
        return float(((ar + 1.0) * (self.n - ar)).sum())

    def _dense(self) -> np.ndarray:
        i, j = self._intervals()
        cells = np.arange(self.n)
        return ((cells[None, :] >= i[:, None]) & (cells[None, :] <= j[:, None])).astype(
            np.float64)

    def __repr__(self) -> str:
        return f"AllRange({self.n})"


class WidthRange(QueryMatrix):
    """Every interval of width w: row i sums cells i..i+w-1 (n - w + 1 rows)."""

    def __init__(self, n: int, w: int) -> None:
        self.n = _check_size(n)
        w = _check_size(w, "w")
        if w > self.n:
            raise ProgrammingError(f"range width {w} exceeds the domain size {self.n}",
                                   hint="choose 1 <= w <= n")
        self.w = w
        self._shape = (self.n - w + 1, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        c = _cumsum0(X)
        return c[self.w:] - c[:-self.w]

    def _window_span(self) -> tuple[np.ndarray, np.ndarray]:
        """For each cell a, the first and last window containing it."""
        a = np.arange(self.n)
        return np.maximum(0, a - self.w + 1), np.minimum(a, self._shape[0] - 1)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        lo, hi = self._window_span()
        c = _cumsum0(Y)
        return c[hi + 1] - c[lo]

    def gram(self) -> QueryMatrix:
        return WidthRangeGram(self.n, self.w)

    def _column_norms(self, p: int) -> np.ndarray:
        lo, hi = self._window_span()
        return (hi - lo + 1).astype(np.float64) ** (1.0 / p)

    def _sum(self) -> float:
        return float(self._shape[0] * self.w)

    def _dense(self) -> np.ndarray:
        r = np.arange(self._shape[0])[:, None]
        a = np.arange(self.n)[None, :]
        return ((a >= r) & (a < r + self.w)).astype(np.float64)

    def __repr__(self) -> str:
        return f"WidthRange({self.n}, {self.w})"


class WidthRangeGram(QueryMatrix):
    """WᵀW for W = WidthRange(n, w): G[i, j] = #windows covering both i and j.

    Windows start at s ∈ [0, n - w]; both cells are covered iff
    max(i, j) - w + 1 ≤ s ≤ min(i, j), so
    G[i, j] = max(0, min(i, j, n - w) - max(0, max(i, j) - w + 1) + 1).
    Products go through W itself (two running sums).
    """

    def __init__(self, n: int, w: int) -> None:
        self.base = WidthRange(n, w)
        self.n, self.w = self.base.n, self.base.w
        self._shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.base._rmatmat(self.base._matmat(X))

    _rmatmat = _matmat

    def _transpose(self) -> QueryMatrix:
        return self

    def _diag(self) -> np.ndarray:
        lo, hi = self.base._window_span()
        return (hi - lo + 1).astype(np.float64)

    def _sum(self) -> float:
        # 1ᵀWᵀW1 = |W1|² and every window sums w ones.
        return float(self.base._shape[0] * self.w * self.w)

    def _dense(self) -> np.ndarray:
        i = np.arange(self.n)
        lo = np.minimum(i[:, None], i[None, :])
        hi = np.maximum(i[:, None], i[None, :])
        last = self.n - self.w
        return np.maximum(0, np.minimum(lo, last) - np.maximum(0, hi - self.w + 1) + 1
                          ).astype(np.float64)

    def __repr__(self) -> str:
        return f"WidthRangeGram({self.n}, {self.w})"
