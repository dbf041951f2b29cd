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
           "exact_convolve", "EXACT_MAX"]


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

#: The largest value ``exact_convolve`` returns: every entry is exact below it (and
#: saturates at it), so that noise added in int64 cannot overflow either.
EXACT_MAX = 1 << 62


def _limbs(v: np.ndarray, count: int) -> list[np.ndarray]:
    """``count`` 8-bit limbs of non-negative int64 v, least significant first."""
    return [((v >> (_LIMB * k)) & 0xFF).astype(np.float64) for k in range(count)]


def exact_convolve(a: np.ndarray, x: np.ndarray, n: int, *, bound: int) -> np.ndarray:
    """The first n terms of a * x exactly, for non-negative int64 coefficients a and counts
    x whose total is at most ``bound``, a public number (a table's declared rows times the
    rows one privacy unit may add).

    Both are split into 8-bit limbs, the limb products of each weight convolved by one FFT
    (exact after rounding: each partial sum is an integer below 2^40) and recombined with
    carries.  Nothing depends on the data but the values: the refusal
    (max(a)·bound ≥ 2^62, which could overflow) and the number of limbs come from ``a``
    and ``bound`` alone; each count is clipped to ``bound`` (so its limbs suffice), and an
    entry that would reach :data:`EXACT_MAX` (only when the data exceed ``bound``)
    saturates at it.  Clipping and saturating are coordinate-wise 1-Lipschitz, so neither
    raises a measurement's sensitivity.  Before issue 35's review the overflow check read
    the counts' total: a refusal that depended on the data."""
    a = np.asarray(a, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    bound = int(bound)
    if bound < 1:
        raise ProgrammingError("exact_convolve needs a positive bound on the counts' total")
    if a.size and int(a.min()) < 0:
        raise ProgrammingError("exact_convolve takes non-negative coefficients")
    if max(a.size, x.size) > 1 << 21:
        raise ProgrammingError("exact_convolve is exact up to 2^21 terms")
    if int(a.max(initial=0)) * bound >= EXACT_MAX:
        raise ArithmeticError(f"the convolution with counts totalling up to {bound:,} could "
                              "overflow int64")
    # counts are non-negative by construction (COUNT(*) per cell); the clip keeps them
    # within the limbs the public bound gives
    xs = np.clip(x[:n], 0, bound)
    la = _limbs(a[:n], max(1, -(-int(a.max(initial=0)).bit_length() // _LIMB)))
    lx = _limbs(xs, max(1, -(-bound.bit_length() // _LIMB)))
    size = _fft_size(min(a.size, n) + min(x.size, n))
    fa = [np.fft.rfft(v, size) for v in la]
    fx = [np.fft.rfft(v, size) for v in lx]
    value = np.zeros(n, dtype=np.int64)
    over = np.zeros(n, dtype=bool)
    carry = np.zeros(n, dtype=np.int64)
    top = EXACT_MAX.bit_length() - 1          # 62: bits kept exactly
    digits = len(la) + len(lx) - 1
    # a carry is below 2^33, so five more digit places take what is left of it
    for s in range(digits + 5):
        if s < digits:
            spec = sum(fa[i] * fx[s - i] for i in range(len(la)) if 0 <= s - i < len(lx))
            part = np.fft.irfft(spec, size)[:n]
            r = np.rint(part)
            if np.abs(part - r).max(initial=0.0) > 0.25:    # cannot happen below 2^21 terms
                raise ArithmeticError("limb convolution lost exactness")
            t = r.astype(np.int64) + carry
        else:
            t = carry
        digit, carry = t & 0xFF, t >> _LIMB
        shift = _LIMB * s
        if shift >= top:
            over |= digit != 0
        else:
            keep = min(_LIMB, top - shift)
            value += (digit & ((1 << keep) - 1)) << shift
            over |= (digit >> keep) != 0
    over |= carry != 0
    return np.where(over, EXACT_MAX, value)


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
