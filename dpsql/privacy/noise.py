"""Exact discrete noise: the only place dpsql draws privacy noise.

Implements the discrete Laplace and discrete Gaussian distributions of Canonne, Kamath
and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020; CKS20):

* ``discrete_laplace(scale)`` has pmf proportional to exp(-|y|/scale) on the integers;
  it satisfies (Delta/scale)-DP for integer queries of L1 sensitivity Delta.
* ``discrete_gaussian(sigma2)`` has pmf proportional to exp(-y^2/(2 sigma2)); it
  satisfies Delta^2/(2 sigma2)-zCDP for L2 sensitivity Delta (CKS20 §2, the privacy
  of the discrete Gaussian).

Every random decision is made *exactly*: all randomness is uniform bits from a
:class:`BitSource` (the OS CSPRNG in production), all Bernoulli(exp(-x)) events are
decided by comparing a lazily refined uniform real with rigorous integer bounds on
exp(-x) (:mod:`dpsql.privacy.expbounds`), and no floating-point arithmetic touches a
sampled value.  The structure follows CKS20: a geometric variable is split as
G = L*V + U (their Algorithm 2), and the Gaussian is obtained from a discrete Laplace
proposal accepted with probability exp(-(|Y| - sigma2/t)^2 / (2 sigma2)) (their
Algorithm 3).  Speed comes from vectorising the *fast path* -- a 64-bit uniform
compared with precomputed 64-bit bounds -- with an exact scalar continuation in the
rare (probability < 2^-60 per comparison) case the first 64 bits do not decide.  The
argument is written out in ``docs/privacy.md`` ("Exact sampling").

``exponential_mechanism`` selects an index with probability proportional to
exp(epsilon q_i / (2 Delta)) exactly (thesis Def. 8), by rejection from a uniform proposal
with the same exact Bernoulli(exp(-x)) events (``docs/privacy.md``, "Exponential
mechanism").

``round_to_grid``/``lattice_release`` implement the grid convention for real-valued
strategy rows (``docs/privacy.md``, "Real-valued strategy rows").
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Protocol, cast

import numpy as np
import numpy.typing as npt

from dpsql.errors import ConfigError
from dpsql.privacy.expbounds import (U64_MAX, exp_neg_bounds, gaussian_acceptance_table,
                                     geometric_table)

__all__ = ["BitSource", "SystemBitSource", "SeededBitSource", "discrete_laplace",
           "discrete_gaussian", "exponential_mechanism", "round_to_grid", "lattice_sensitivity2", "lattice_release",
           "add_exact", "as_fraction"]

_MAX_BLOCK = 1 << 16          # largest table for the uniform part U of G = L*V + U
_MAX_V_TABLE = 1 << 16        # largest table of thresholds exp(-v L/scale)
_MAX_GAUSS_TABLE = 1 << 18    # largest acceptance table (16 t up to sigma ~ 16,000)
_MAX_SCALE = Fraction(1 << 50)  # samples then leave int64 with probability ~exp(-8192) at most
_I64_MAX = (1 << 63) - 1

# A parameter taken at its exact rational value (an int or a float is its exact binary value).
Rational = Fraction | float | str
# (block L, U's acceptance bounds lo and hi, V's thresholds lo and hi, V's cap): _geometric_plan
_GeometricPlan = tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]


# --- bit sources -------------------------------------------------------------------------

class BitSource(Protocol):
    """Where uniform random bytes come from."""

    def random_bytes(self, n: int) -> bytes: ...


class SystemBitSource:
    """The OS CSPRNG (``os.urandom``); the only source used in production."""

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)


class SeededBitSource:
    """Deterministic bytes from SHAKE-256(seed, counter), for reproducible tests only.

    Never used unless a caller passes it explicitly: the samplers default to
    :class:`SystemBitSource`.
    """

    def __init__(self, seed: int) -> None:
        self._key = hashlib.sha256(b"dpsql-test-bits:" + str(int(seed)).encode()).digest()
        self._counter = 0

    def random_bytes(self, n: int) -> bytes:
        block = hashlib.shake_256(self._key + self._counter.to_bytes(8, "little")).digest(n)
        self._counter += 1
        return block


_SYSTEM = SystemBitSource()


def _source(rng: BitSource | None) -> BitSource:
    if rng is None:
        return _SYSTEM
    if not callable(getattr(rng, "random_bytes", None)):
        # In particular numpy Generators are refused: privacy noise never comes from them.
        raise ConfigError(f"rng must be a BitSource, got {type(rng).__name__}",
                          hint="omit rng in production (OS CSPRNG); tests pass "
                               "dpsql.privacy.noise.SeededBitSource(seed)")
    return rng


def _u64(bits: BitSource, n: int) -> np.ndarray:
    return np.frombuffer(bits.random_bytes(8 * n), dtype="<u8").astype(np.uint64, copy=False)


def _signs(bits: BitSource, n: int) -> np.ndarray:
    raw = np.frombuffer(bits.random_bytes((n + 7) // 8), dtype=np.uint8)
    return np.unpackbits(raw)[:n].astype(bool)


def _uniform_below(bits: BitSource, m: int, n: int) -> np.ndarray:
    """n exact uniform integers in [0, m), m <= 2**32, by rejection from 32-bit words.

    Accepting r >= 2**32 mod m leaves a range whose size is a multiple of m, so r mod m
    is exactly uniform.
    """
    if m == 1:
        return np.zeros(n, dtype=np.int64)
    floor = (1 << 32) % m
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        r = np.frombuffer(bits.random_bytes(4 * (need + need // 8 + 8)), dtype="<u4")
        r = r[r >= floor][:need]
        out[filled:filled + r.size] = r % m
        filled += r.size
    return out


# --- exact comparison of a uniform real with exp(-x) -----------------------------------

class _LazyUniform:
    """A uniform real in [0, 1) whose first 64 bits are ``u``; more bits on demand.

    Several comparisons against the same real share the extension, so nested events
    (V >= 1, V >= 2, ...) stay consistent.
    """

    def __init__(self, u: int, bits: BitSource) -> None:
        self.prefix = int(u)
        self.nbits = 64
        self._bits = bits

    def less_than_exp(self, n: int, d: int) -> bool:
        """Exactly decide V < exp(-n/d)."""
        while True:
            lo, hi = exp_neg_bounds(n, d, self.nbits)
            # V lies in [prefix, prefix + 1) / 2**nbits.
            if self.prefix + 1 <= lo:
                return True
            if self.prefix >= hi:
                return False
            extra = int.from_bytes(self._bits.random_bytes(8), "little")
            self.prefix = (self.prefix << 64) | extra
            self.nbits += 64


def _decide(u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fast path of V < p with lo <= p 2^64 <= hi: (success, undecided) boolean arrays.

    V < p surely when u + 1 <= lo; surely not when u >= hi.  u = 2^64 - 1 is always sent
    to the exact path so that clipping hi = 2^64 to the u64 range cannot fake a failure.
    """
    success = u < lo
    undecided = ~success & ((u < hi) | (u == np.uint64(U64_MAX)))
    return success, undecided


# --- exact integer arithmetic past int64 ------------------------------------------------
# A sample is an exact integer whatever its size (docs/privacy.md, "No overflow").  Arrays
# are int64 whenever every value fits, which is always in practice; the arithmetic that
# could leave int64 checks first and falls back to numpy object arrays of Python ints, so a
# value beyond 2^63 is never wrapped into a small one (which the Gaussian's acceptance step
# could then accept).

def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` as int64 when every value fits, else unchanged (an object array)."""
    if a.dtype != object or a.size == 0 or max(abs(int(v)) for v in a.flat) <= _I64_MAX:
        return a.astype(np.int64)
    return a


def _scaled_add(v: np.ndarray, scale: int, u: np.ndarray) -> np.ndarray:
    """``v * scale + u`` exactly, for v, u >= 0 (G = L V + U of CKS20 Alg. 2)."""
    if v.dtype != object and (v.size == 0 or int(v.max()) <= (_I64_MAX - int(u.max())) // scale):
        fits: np.ndarray = v * scale + u
        return fits
    return _narrow(v.astype(object) * scale + u.astype(object))


def _max_abs(a: np.ndarray) -> int:
    """max |a| as a Python int (np.abs of int64's minimum would wrap)."""
    return max(int(a.max()), -int(a.min())) if a.size else 0


def add_exact(values: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``values + noise`` for integer arrays, exactly: int64 when every sum fits, else an
    object array of Python ints (``astype(float)`` then rounds each exact sum once)."""
    values, noise = np.asarray(values), np.asarray(noise)
    if values.dtype.kind not in "iuO" or noise.dtype.kind not in "iO":
        raise TypeError("add_exact adds integer arrays")
    if values.dtype != object and noise.dtype != object:
        big = _max_abs(values) + _max_abs(noise)
        if big <= _I64_MAX:
            fits: np.ndarray = values.astype(np.int64) + noise
            return fits
    return _narrow(values.astype(object) + noise.astype(object))


class _Filler:
    """Collects accepted samples into an int64 array, widened to Python ints only if an
    accepted sample does not fit."""

    def __init__(self, n: int) -> None:
        self.out = np.empty(n, dtype=np.int64)
        self.filled = 0

    def add(self, got: np.ndarray) -> None:
        got = _narrow(got) if got.dtype == object else got
        if got.dtype == object and self.out.dtype != object:
            self.out = self.out.astype(object)
        self.out[self.filled:self.filled + got.size] = got
        self.filled += got.size


# --- parameters ------------------------------------------------------------------------

def as_fraction(value: Rational, name: str) -> Fraction:
    """Exact rational value of a positive int/float/Fraction/str parameter."""
    try:
        frac = Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name} must be a number, got {value!r}",
                          hint=f"pass {name} as an int, float or fractions.Fraction") from None
    if not frac > 0:
        raise ConfigError(f"{name} must be positive, got {value!r}",
                          hint=f"choose a finite {name} > 0")
    return frac


def _check_size(size: int | Sequence[int]) -> tuple[tuple[int, ...], int]:
    # np.ndim, not isinstance: a numpy integer or a 0-d array is a size too
    shape = (int(cast(int, size)),) if np.ndim(size) == 0 else tuple(int(s) for s in cast(Sequence[int], size))
    if any(s < 0 for s in shape):
        raise ConfigError(f"noise size must be non-negative, got {size!r}")
    return shape, math.prod(shape)


# --- geometric and discrete Laplace ----------------------------------------------------

@functools.lru_cache(maxsize=64)
def _geometric_plan(num: int, den: int) -> _GeometricPlan:
    """Tables for G >= 0 with P(G >= k) = exp(-k den/num) (scale = num/den).

    G = L V + U with U on [0, L) having P(U = u) proportional to exp(-u/scale) and V
    with P(V >= v) = exp(-v L/scale), independent: exactly the split of CKS20 Alg. 2
    (there L = t), with L capped so tables stay small.
    """
    block = max(1, min(num // den, _MAX_BLOCK))
    u_lo, u_hi = geometric_table(den, num, block)
    # Enough V thresholds that P(V >= vcap) < 2^-70; beyond that the memoryless
    # property lets us add vcap and draw V again, so the cap never truncates.
    vcap = min(_MAX_V_TABLE, -(-70 * num // (block * den)) + 1)
    v_lo, v_hi = geometric_table(block * den, num, vcap + 1)
    return (block,
            np.array(u_lo, dtype=np.uint64), np.array(u_hi, dtype=np.uint64),
            # thresholds for v = 1..vcap, stored ascending for searchsorted
            np.array(v_lo[1:][::-1], dtype=np.uint64), np.array(v_hi[1:][::-1], dtype=np.uint64),
            vcap)


def _truncated_part(bits: BitSource, plan: _GeometricPlan, num: int, den: int, n: int) -> np.ndarray:
    """U in [0, L) with P(U = u) proportional to exp(-u den/num): uniform + accept."""
    block, u_lo, u_hi = plan[0], plan[1], plan[2]
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        batch = need + need // 2 + 16
        cand = _uniform_below(bits, block, batch)
        u = _u64(bits, batch)
        ok, undecided = _decide(u, u_lo[cand], u_hi[cand])
        for i in np.flatnonzero(undecided):
            ok[i] = _LazyUniform(u[i], bits).less_than_exp(int(cand[i]) * den, num)
        got = cand[ok][:need]
        out[filled:filled + got.size] = got
        filled += got.size
    return out


def _block_count(bits: BitSource, plan: _GeometricPlan, num: int, den: int, n: int) -> np.ndarray:
    """V >= 0 with P(V >= v) = exp(-v L den/num), by exact inverse comparison."""
    block, v_lo, v_hi, vcap = plan[0], plan[3], plan[4], plan[5]
    total = np.zeros(n, dtype=np.int64)
    active = np.arange(n)
    rounds = 0
    while active.size:
        rounds += 1
        if total.dtype != object and rounds * vcap > _I64_MAX:
            total = total.astype(object)   # each round adds at most vcap: the sum stays exact
        u = _u64(bits, active.size)
        # number of thresholds surely above V, and number not surely below it
        sure = v_lo.size - np.searchsorted(v_lo, u, side="right")
        maybe = v_hi.size - np.searchsorted(v_hi, u, side="right")
        v = sure.astype(np.int64)
        for i in np.flatnonzero((sure != maybe) | (u == np.uint64(U64_MAX))):
            lazy = _LazyUniform(u[i], bits)
            k = 0
            while k < vcap and lazy.less_than_exp((k + 1) * block * den, num):
                k += 1
            v[i] = k
        total[active] += v
        # V reached the table end: by memorylessness V = vcap + (a fresh copy of V).
        active = active[v == vcap]
    return total


def _geometric(bits: BitSource, num: int, den: int, n: int) -> np.ndarray:
    """G >= 0 with P(G >= k) = exp(-k den/num): G = L V + U (CKS20 Alg. 2).

    V has P(V >= v) = exp(-v L den/num): it is itself geometric, of scale num/(den L).  When
    that scale is large (the scale exceeds the largest block L = 2^16) V is drawn by the same
    split, recursively (each level divides the scale by 2^16: three levels at 2^50), instead
    of by ~scale/2^32 rounds of the threshold table.  The last level's scale is below 2."""
    plan = _geometric_plan(num, den)
    block = plan[0]
    if num // den > _MAX_BLOCK:
        v = _geometric(bits, num, den * block, n)
    else:
        v = _block_count(bits, plan, num, den, n)
    u = _truncated_part(bits, plan, num, den, n)
    return _scaled_add(v, block, u)


def _laplace_int(bits: BitSource, num: int, den: int, n: int) -> np.ndarray:
    """n draws with P(y) proportional to exp(-|y| den/num): signed geometric, CKS20 Alg. 2.

    A negative sign with magnitude 0 is rejected so that 0 is not counted twice.
    """
    out = _Filler(n)
    while out.filled < n:
        need = n - out.filled
        batch = need + need // 4 + 16
        g = _geometric(bits, num, den, batch)
        neg = _signs(bits, batch)
        keep = ~(neg & (g == 0))
        out.add(np.where(neg, -g, g)[keep][:need])
    return out.out


def discrete_laplace(scale: Rational, size: int | Sequence[int], *, rng: BitSource | None = None) -> np.ndarray:
    """Exact samples with P(y) proportional to exp(-|y|/scale), y an integer (int64).

    ``scale`` is taken as the exact rational value of the argument (a float is its exact
    binary value).  Adding it to an integer query of L1 sensitivity Delta gives
    (Delta/scale)-DP, i.e. (Delta/scale)^2/2-zCDP (``accountant.rho_pure``).
    """
    b = as_fraction(scale, "scale")
    if b > _MAX_SCALE:
        raise ConfigError(f"discrete Laplace scale {float(b):g} is too large",
                          hint="scales above 2**50 are not supported: such noise would not fit int64 counts")
    shape, n = _check_size(size)
    bits = _source(rng)
    return _laplace_int(bits, b.numerator, b.denominator, n).reshape(shape)


# --- discrete Gaussian -----------------------------------------------------------------

@functools.lru_cache(maxsize=32)
def _gaussian_plan(a: int, b: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Proposal scale t and acceptance bounds for sigma2 = a/b (CKS20 Alg. 3)."""
    t = math.isqrt(a // b) + 1  # floor(sigma) + 1, as CKS20 recommend
    cap = min(_MAX_GAUSS_TABLE, 16 * t)  # P(|Y| >= 16t) < 2e-7; beyond: see below
    lo, hi = gaussian_acceptance_table(a, b, t, cap)
    return t, np.array(lo, dtype=np.uint64), np.array(hi, dtype=np.uint64)


def discrete_gaussian(sigma2: Rational, size: int | Sequence[int], *, rng: BitSource | None = None) -> np.ndarray:
    """Exact samples with P(y) proportional to exp(-y^2/(2 sigma2)), y an integer (int64).

    ``sigma2`` is the exact rational variance parameter.  Adding it to an integer query of
    L2 sensitivity Delta gives Delta^2/(2 sigma2)-zCDP (CKS20 §2;
    ``accountant.rho_gaussian``).
    """
    s2 = as_fraction(sigma2, "sigma2")
    a, b = s2.numerator, s2.denominator
    # The int64 bound is on the Laplace proposal's scale t = floor(sigma) + 1 (its L*V + U),
    # not on sigma2: a residual block over two 1,024-scaled integer factors (plan/residual)
    # legitimately needs sigma2 ~ 10^17-10^18 in lattice units, and such draws are as cheap.
    if math.isqrt(a // b) + 1 > _MAX_SCALE:
        raise ConfigError(f"discrete Gaussian sigma2 {float(s2):g} is too large",
                          hint="sigma above 2**50 is not supported: such noise would not fit int64 counts")
    shape, n = _check_size(size)
    bits = _source(rng)
    t, acc_lo, acc_hi = _gaussian_plan(a, b)
    cap = acc_lo.size
    coarse = (cap - 1) * t * b >= a
    denom = 2 * a * b * t * t
    out = _Filler(n)
    while out.filled < n:
        need = n - out.filled
        # acceptance is about 0.6-0.75 (CKS20 §5.3); over-draw to avoid many rounds
        batch = need + need // 2 + need // 4 + 16
        y = _laplace_int(bits, t, 1, batch)
        mag = np.abs(y)
        u = _u64(bits, batch)
        if y.dtype == object:
            # a proposal beyond int64 (P < exp(-2^13) per draw at t = 2^50): every one of
            # this batch is decided by the exact comparison, in Python integers
            ok = np.array([_LazyUniform(u[i], bits).less_than_exp((int(mag[i]) * b * t - a) ** 2, denom)
                           for i in range(batch)], dtype=bool)
            out.add(y[ok][:need])
            continue
        inside = mag < cap
        idx = np.where(inside, mag, cap - 1)
        ok, undecided = _decide(u, acc_lo[idx], acc_hi[idx])
        ok &= inside
        # Beyond the table (|Y| >= cap): if cap-1 >= sigma2/t, A is non-increasing there,
        # so u >= hi(A(cap-1)) proves rejection; everything else takes the exact path.
        if coarse:
            surely_out = ~inside & (u >= acc_hi[cap - 1])
        else:
            surely_out = np.zeros(batch, dtype=bool)
        undecided = (undecided & inside) | (~inside & ~surely_out)
        for i in np.flatnonzero(undecided):
            gamma_num = (int(mag[i]) * b * t - a) ** 2
            ok[i] = _LazyUniform(u[i], bits).less_than_exp(gamma_num, denom)
        out.add(y[ok][:need])
    return out.out.reshape(shape)


# --- exponential mechanism ---------------------------------------------------------------

def _exact_score(value: Rational, i: int) -> Fraction:
    try:
        frac = Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"score {i} must be a finite number, got {value!r}",
                          hint="scores are ints, finite floats or fractions.Fraction") from None
    return frac


def exponential_mechanism(scores: Iterable[Rational], epsilon: Rational, sensitivity: Rational, *,
                          rng: BitSource | None = None) -> int:
    """Index i with probability exactly exp(eps q_i/(2 Delta)) / sum_j exp(eps q_j/(2 Delta)).

    The exponential mechanism of the thesis (Def. 8, McSherry & Talwar 2007): for scores
    ``q_i(D)`` that each change by at most ``sensitivity`` = Delta between neighbouring
    databases it is epsilon-DP and epsilon^2/8-zCDP (thesis Prop. 5;
    ``accountant.rho_exponential``).  Scores, epsilon and Delta are taken at their exact
    rational values (a float is its exact binary value).

    Sampling is exact: with q* = max q and x_i = eps (q* - q_i)/(2 Delta) >= 0, repeat
    { draw i uniformly from the candidates; accept with probability exp(-x_i) }.  Each
    trial returns i with probability exp(-x_i)/k, so the first accepted i has
    probability exp(-x_i) / sum_j exp(-x_j) -- the definition -- and the argmax (x = 0)
    is always accepted, so a trial succeeds with probability >= 1/k.  The Bernoulli
    events are the exact comparisons of ``docs/privacy.md`` §4: a 64-bit fast path
    against rigorous bounds on exp(-x_i), and the lazy exact continuation otherwise.
    Trials are drawn in batches but examined in order, which is the same procedure.
    """
    eps = as_fraction(epsilon, "epsilon")
    delta = as_fraction(sensitivity, "sensitivity")
    q = [_exact_score(s, i) for i, s in enumerate(scores)]
    k = len(q)
    if k == 0:
        raise ConfigError("the exponential mechanism needs at least one candidate")
    if k > 1 << 32:
        raise ConfigError("the exponential mechanism supports at most 2**32 candidates")
    bits = _source(rng)
    if k == 1:
        return 0
    top = max(q)
    coef = eps / (2 * delta)
    xs = [coef * (top - v) for v in q]
    lo = np.empty(k, dtype=np.uint64)
    hi = np.empty(k, dtype=np.uint64)
    for i, x in enumerate(xs):
        a, b = exp_neg_bounds(x.numerator, x.denominator, 64)
        lo[i], hi[i] = min(a, U64_MAX), min(b, U64_MAX)
    batch = min(1 << 14, max(64, 2 * k))
    while True:
        cand = _uniform_below(bits, k, batch)
        u = _u64(bits, batch)
        ok, undecided = _decide(u, lo[cand], hi[cand])
        for j in np.flatnonzero(ok | undecided):
            i = int(cand[j])
            if ok[j] or _LazyUniform(u[j], bits).less_than_exp(xs[i].numerator,
                                                                xs[i].denominator):
                return i


# --- real-valued strategy rows on a grid -------------------------------------------------

def round_to_grid(matrix_values: npt.ArrayLike, grid: Rational) -> np.ndarray:
    """Integer matrix K = round(Q / grid); the measured strategy is Q' = grid * K.

    Measuring K x (x the integer count vector) with lattice noise and scaling the result
    by ``grid`` is post-processing, so the privacy cost is that of K, whose L2
    sensitivity is ``lattice_sensitivity2(K)`` -- the sensitivity of the *rounded*
    matrix, never the unrounded one.  Entrywise |Q - Q'| <= grid/2.
    """
    g = as_fraction(grid, "grid")
    values = np.asarray(matrix_values, dtype=float)
    if not np.all(np.isfinite(values)):
        raise ConfigError("strategy entries must be finite to be rounded to a grid")
    # Division by an exact dyadic/rational grid in float only chooses *which* lattice
    # point is used; the privacy argument depends on K alone, which is then exact.
    k = np.rint(values / float(g))
    if np.any(np.abs(k) > 2.0 ** 31):
        raise ConfigError("grid too fine for the strategy entries",
                          hint="use a coarser grid (entries/grid must stay below 2**31)")
    return k.astype(np.int64)


def lattice_sensitivity2(k_matrix: npt.ArrayLike) -> int:
    """Exact squared L2 sensitivity of an integer matrix: max column sum of squares."""
    k = np.asarray(k_matrix)
    if k.dtype.kind not in "iu":
        raise ConfigError("lattice sensitivity needs an integer matrix",
                          hint="round the strategy with round_to_grid first")
    cols = k.reshape(k.shape[0], -1) if k.ndim > 1 else k.reshape(-1, 1)
    if cols.size == 0:
        return 0
    # Exact in int64 when no column sum can reach 2**63: each square is at most top², a
    # column holds rows of them.  Python's int is exact but 2,000× slower on a 1,459-square
    # factor (0.4 s, issue 35 item 2); top is computed in Python ints (|int64 min| overflows).
    top = max(abs(int(cols.max())), abs(int(cols.min())))
    if top * top * cols.shape[0] < 2 ** 63:
        c64 = cols.astype(np.int64)
        return int((c64 * c64).sum(axis=0).max())
    return max((sum(int(v) * int(v) for v in col) for col in cols.T), default=0)


def lattice_release(values_int: npt.ArrayLike, sigma2: Rational, *, rng: BitSource | None = None) -> np.ndarray:
    """Integer answers plus independent discrete Gaussian noise of parameter sigma2.

    The caller has already charged Delta^2/(2 sigma2) for Delta^2 =
    ``lattice_sensitivity2(K)``; this function only adds the noise.
    """
    values = np.asarray(values_int)
    if values.dtype.kind not in "iu":
        raise ConfigError("lattice_release needs integer values",
                          hint="measure K x with the integer matrix from round_to_grid")
    return add_exact(values.astype(np.int64), discrete_gaussian(sigma2, values.shape, rng=rng))
