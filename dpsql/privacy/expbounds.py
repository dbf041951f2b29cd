"""Rigorous integer bounds on exp(-x) for rational x, and tables of them.

The exact samplers in :mod:`dpsql.privacy.noise` decide Bernoulli(exp(-x)) events by
comparing a uniform real V in [0, 1) with exp(-x).  V is revealed 64 bits at a time and
exp(-x) is known only through an interval ``[lo, hi] / 2**P``; the comparison is
*decided* when the interval of V and the interval of exp(-x) do not overlap, and
otherwise more bits of both are produced.  Because the interval always contains the
true value, every decision equals the decision an infinitely precise comparison would
make, so the resulting Bernoulli has probability exactly exp(-x).  This module supplies
the intervals; it draws no randomness.

Bounds come from the alternating Taylor series of exp(-f) for 0 <= f <= 1, whose
consecutive partial sums bracket the limit (Leibniz criterion, terms f^k/k! are
non-increasing when f <= 1), evaluated in fixed-point integer arithmetic with every term
rounded outward, then raised to the m-th power for x = m f with directed (floor/ceil)
integer rounding.  See ``docs/privacy.md`` ("Exact sampling").
"""

from __future__ import annotations

__all__ = ["exp_neg_bounds", "exp_bounds", "geometric_table", "gaussian_acceptance_table",
           "to_u64_bounds"]

U64_MAX = (1 << 64) - 1


def _ceil_shift(value: int, shift: int) -> int:
    """ceil(value / 2**shift) for value >= 0."""
    return -((-value) >> shift)


def exp_neg_bounds(n: int, d: int, precision: int) -> tuple[int, int]:
    """Integers lo <= exp(-n/d) * 2**precision <= hi, for n >= 0, d > 0.

    hi - lo is a small number of units (the truncation is chosen well below one unit).
    """
    if n < 0 or d <= 0:
        raise ValueError("exp_neg_bounds needs n >= 0 and d > 0")
    if n == 0:
        one = 1 << precision
        return one, one
    if n >= precision * d:
        # x >= P implies exp(-x) 2^P <= (2/e)^P < 1: the bounds are 0 and 1 without the
        # series (whose m-th power would otherwise have P*x bits).
        return 0, 1
    m = -(-n // d)  # ceil(n/d) >= 1, so f = n/(d m) lies in (0, 1]
    # Raising to the m-th power multiplies the absolute error of the base by at most m
    # (the base is <= 1), so m.bit_length() guard bits plus slack keep the result tight.
    work = precision + m.bit_length() + 8
    # Fixed-point series with every term bracketed: term_k in [t_lo, t_hi] * 2^-guard.
    # Partial sums of an alternating series with non-increasing terms bracket the limit,
    # and the first omitted term bounds the remainder.
    guard = work + 16
    dm = d * m
    t_lo = t_hi = 1 << guard
    low = high = 1 << guard
    k = 0
    while True:
        k += 1
        t_lo = (t_lo * n) // (dm * k)
        t_hi = -((-t_hi * n) // (dm * k))
        if t_hi <= 1:
            low -= t_hi + 1
            high += t_hi + 1
            break
        if k % 2:
            low -= t_hi
            high -= t_lo
        else:
            low += t_lo
            high += t_hi
    base_lo = max(low, 0) >> (guard - work)
    base_hi = -((-high) >> (guard - work))
    if m == 1:
        lo, hi = base_lo, base_hi
    else:
        lo = (base_lo ** m) >> (work * (m - 1))
        hi = _ceil_shift(base_hi ** m, work * (m - 1))
    shift = work - precision
    return lo >> shift, _ceil_shift(hi, shift)


def exp_bounds(n: int, d: int, precision: int) -> tuple[int, int]:
    """Integers lo <= exp(-n/d) * 2**precision <= hi for any sign of n (d > 0)."""
    if n >= 0:
        return exp_neg_bounds(n, d, precision)
    # exp(+x) = 1/exp(-x); the reciprocal of an interval flips and widens it.
    extra = precision + 2 * (-n // d + 1) + 16  # exp(-x) >= 2**(-2x): lo stays positive
    lo, hi = exp_neg_bounds(-n, d, extra)
    top = 1 << (precision + extra)
    return top // hi, -(-top // lo)


def to_u64_bounds(lo: int, hi: int, precision: int) -> tuple[int, int]:
    """Re-express bounds at ``precision`` bits as 64-bit bounds, clipped to the u64 range."""
    shift = precision - 64
    lo64 = lo >> shift
    hi64 = _ceil_shift(hi, shift)
    return min(lo64, U64_MAX), min(hi64, U64_MAX)


def geometric_table(step_n: int, step_d: int, count: int) -> tuple[list[int], list[int]]:
    """64-bit bounds of exp(-k * step_n/step_d) for k = 0 .. count-1.

    Successive powers of one rigorous interval for exp(-step) with floor on the lower
    and ceil on the upper end: each product keeps the true value inside.
    """
    work = 64 + max(count, 1).bit_length() + 24
    step_lo, step_hi = exp_neg_bounds(step_n, step_d, work)
    lo = hi = 1 << work
    los: list[int] = []
    his: list[int] = []
    for _ in range(count):
        a, b = to_u64_bounds(lo, hi, work)
        los.append(a)
        his.append(b)
        lo = (lo * step_lo) >> work
        hi = _ceil_shift(hi * step_hi, work)
    return los, his


def gaussian_acceptance_table(a: int, b: int, t: int, count: int) -> tuple[list[int], list[int]]:
    """64-bit bounds of A(y) = exp(-(y - s/t)^2 / (2 s)) for y = 0 .. count-1, s = a/b.

    This is the acceptance probability of CKS20 Algorithm 3 for a discrete Laplace
    proposal of scale t.  With c = s/t, A(y+1)/A(y) = exp(-(2(y - c) + 1)/(2s)) =: R(y)
    and R(y+1)/R(y) = exp(-1/s), so the table is two running interval products.
    Writing everything over the common denominator 2abt^2 keeps the exponents exact.
    """
    work = 64 + max(count, 1).bit_length() * 2 + 32
    denom = 2 * a * b * t * t
    a_lo, a_hi = exp_bounds(a * a, denom, work)                       # A(0)
    r_lo, r_hi = exp_bounds((b * t) ** 2 - 2 * a * b * t, denom, work)  # R(0)
    q_lo, q_hi = exp_bounds(b, a, work)                                # exp(-1/s)
    los: list[int] = []
    his: list[int] = []
    for _ in range(count):
        x, y = to_u64_bounds(a_lo, a_hi, work)
        los.append(x)
        his.append(y)
        a_lo = (a_lo * r_lo) >> work
        a_hi = _ceil_shift(a_hi * r_hi, work)
        r_lo = (r_lo * q_lo) >> work
        r_hi = _ceil_shift(r_hi * q_hi, work)
    return los, his
