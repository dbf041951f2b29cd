"""Lower-triangular Toeplitz matrices: the square-root factorisation of the prefix matrix.

The n×n prefix matrix P (the CDF) is the lower-triangular Toeplitz matrix of the power
series 1/(1 − z).  Its square root M, the Toeplitz matrix of (1 − z)^(−½), has coefficients
c_k = binom(2k, k) / 4^k (c_0 = 1, c_k = c_{k−1}·(2k − 1)/(2k)), and P = M·M.  Measuring
A = M and answering W = P through W A⁻¹ = M gives every prefix the variance Σ_{k≤i} c_k²
at sensitivity ‖A‖₂² = Σ_k c_k² ≈ 1 + ln(n)/π: the factorisation of Fichtenberger,
Henzinger and Upadhyay ("Constant matters: fine-grained error bound on differentially
private continual observation", ICML 2023), within 1.08–1.15× of the SVD bound for
n = 10³…10⁶ (bench/fine.py), where the best weighted tree is ~1.6×.

Everything stays O(n log n): products by FFT convolution, the inverse's coefficients by
Newton iteration on power series (:func:`series_inverse`), and the measured product of
integer coefficients with integer counts *exactly*, by FFT convolutions of 8-bit limbs
whose every partial sum is an integer far below 2^53 (:func:`exact_convolve`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpsql.errors import ProgrammingError
from dpsql.linalg.base import QueryMatrix

__all__ = ["LowerToeplitz", "sqrt_prefix_coefficients", "series_inverse", "convolve",
           "exact_convolve"]


def sqrt_prefix_coefficients(n: int) -> np.ndarray:
    """c_k = binom(2k, k)/4^k, k < n: the Toeplitz square root of the prefix matrix."""
    k = np.arange(1, n, dtype=np.float64)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


def _fft_size(m: int) -> int:
    return 1 << max(1, int(m - 1).bit_length())


def convolve(a: np.ndarray, X: np.ndarray, n: int) -> np.ndarray:
    """The first n terms of a * X (a: coefficients, X: n × k columns), by real FFT."""
    size = _fft_size(a.size + X.shape[0])
    fa = np.fft.rfft(a, size)
    return np.fft.irfft(fa[:, None] * np.fft.rfft(X, size, axis=0), size, axis=0)[:n]


def series_inverse(a: np.ndarray, n: int) -> np.ndarray:
    """The first n coefficients of 1/a(z) (a_0 ≠ 0), by Newton's iteration
    b ← b·(2 − a·b) mod z^(2m), each step two FFT products."""
    if a[0] == 0:
        raise ProgrammingError("a power series with a zero constant term has no inverse")
    b = np.array([1.0 / a[0]])
    while b.size < n:
        m = min(2 * b.size, n)
        ab = convolve(a[:m], b[:, None], m)[:, 0]
        corr = -ab
        corr[0] += 2.0
        b = convolve(b, corr[:, None], m)[:, 0]
    return b[:n]


#: Limb width for exact products: 8-bit limbs of both operands keep every partial
#: convolution below 2^16 · n ≤ 2^37 for n ≤ 2^21, where FFT rounding is < 10⁻³.
_LIMB = 8


def exact_convolve(a: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """The first n terms of a * x exactly, for non-negative int64 a and x with a·x sums
    below 2^62: both split into 8-bit limbs, every limb pair convolved by FFT (exact after
    rounding: each partial result is an integer below 2^37), recombined in int64."""
    a = np.asarray(a, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    if a.size and (a.min() < 0 or x.min(initial=0) < 0):
        raise ProgrammingError("exact_convolve takes non-negative integers")
    if max(a.size, x.size) > 1 << 21:
        raise ProgrammingError("exact_convolve is exact up to 2^21 terms")
    if int(a.max(initial=0)) * int(x[:n].sum(dtype=object)) >= 1 << 62:
        raise ArithmeticError("the convolution could overflow int64")

    def limbs(v: np.ndarray) -> list[np.ndarray]:
        out, v = [], v.copy()
        while np.any(v):
            out.append((v & 0xFF).astype(np.float64))
            v >>= _LIMB
        return out or [np.zeros(v.size)]

    la, lx = limbs(a[:n]), limbs(x[:n])
    size = _fft_size(min(a.size, n) + min(x.size, n))
    fa = [np.fft.rfft(v, size) for v in la]
    fx = [np.fft.rfft(v, size) for v in lx]
    total = np.zeros(n, dtype=np.int64)
    for i, A in enumerate(fa):
        for j, X in enumerate(fx):
            part = np.fft.irfft(A * X, size)[:n]
            r = np.rint(part)
            if np.abs(part - r).max(initial=0.0) > 0.25:      # cannot happen below 2^21 terms
                raise ArithmeticError("limb convolution lost exactness")
            total += r.astype(np.int64) << (_LIMB * (i + j))
    return total


class LowerToeplitz(QueryMatrix):
    """T[i, j] = a[i − j] for j ≤ i, else 0 (n×n); products by FFT, never n×n."""

    def __init__(self, coeffs: npt.ArrayLike) -> None:
        a = np.asarray(coeffs, dtype=np.float64)
        if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)):
            raise ProgrammingError("LowerToeplitz needs a finite 1-D coefficient vector")
        self.a = a
        self.n = a.size
        self._shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return convolve(self.a, X, self.n)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return convolve(self.a, Y[::-1], self.n)[::-1]

    def _column_norms(self, p: int) -> np.ndarray:
        # column j holds a[0 .. n−1−j]
        return np.cumsum(np.abs(self.a) ** p)[::-1] ** (1.0 / p)

    def _sensitivity(self, p: int) -> float:
        return float(np.sum(np.abs(self.a) ** p) ** (1.0 / p))

    def _trace(self) -> float:
        return float(self.n * self.a[0])

    def _diag(self) -> np.ndarray:
        return np.full(self.n, self.a[0])

    def _sum(self) -> float:
        return float(np.sum(self.a * np.arange(self.n, 0, -1)))

    def _dense(self) -> np.ndarray:
        i = np.arange(self.n)
        d = i[:, None] - i[None, :]
        return np.where(d >= 0, self.a[np.clip(d, 0, None)], 0.0)

    def __repr__(self) -> str:
        return f"LowerToeplitz({self.n})"
