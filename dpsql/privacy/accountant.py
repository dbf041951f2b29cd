"""Privacy accounting in rho-zCDP, dpsql's internal currency.

Costs (McKenna thesis §2.3, Props. 3-6; Bun & Steinke 2016; CKS20):

* Gaussian or discrete Gaussian noise of standard deviation sigma on a query of L2
  sensitivity Delta costs Delta^2 / (2 sigma^2)  (Prop. 4; CKS20 §2 for the
  discrete Gaussian on integer-valued queries);
* any pure epsilon-DP mechanism (Laplace, discrete Laplace) costs epsilon^2 / 2  (Prop. 3);
* the exponential mechanism costs epsilon^2 / 8  (Prop. 5);
* adaptive composition adds costs (Prop. 6) -- done with exact :class:`Fraction` sums.

Conversions: ``rho_to_epsilon`` uses the tight bound of Canonne, Kamath & Steinke
(thesis Prop. 7), ``epsilon_delta_to_rho`` inverts it by bisection and then *verifies*
the answer converts back within (epsilon, delta).  Every conversion rounds toward more
privacy: epsilon and delta up, rho down.  The (very small) binary64 rounding in the
logarithms is covered by an explicit safety margin; see ``docs/privacy.md``
("Accounting").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from dpsql.errors import ConfigError

__all__ = ["rho_gaussian", "rho_gaussian_sq", "rho_pure", "rho_exponential",
           "sigma2_for_rho", "compose", "rho_to_epsilon", "rho_to_delta",
           "epsilon_delta_to_rho", "simple_rho_to_epsilon", "Budget", "to_rho", "budget_rho",
           "format_rho"]

# Relative margin added to every binary64 evaluation of a conversion formula.  The
# formula has < 20 floating-point operations, each with relative error 2^-53, so the
# accumulated error is below 10^-14 of the magnitude of its terms; 10^-10 is generous.
_MARGIN = 1e-10

# A privacy parameter taken at its exact rational value (an int or a float is its exact
# binary value).
Rational = Fraction | float | str


def _exact(value: Rational, name: str, *, allow_zero: bool = False) -> Fraction:
    try:
        frac = Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name} must be a number, got {value!r}",
                          hint=f"pass {name} as an int, float or fractions.Fraction") from None
    if frac < 0 or (frac == 0 and not allow_zero):
        raise ConfigError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, "
                          f"got {value!r}", hint=f"choose {name} > 0")
    return frac


def to_rho(value: Rational) -> Fraction:
    """Exact non-negative rho from an int/float/Fraction/str."""
    return _exact(value, "rho", allow_zero=True)


def budget_rho(value: Rational) -> Fraction:
    """A configured budget rho as an exact Fraction, rounded toward more privacy.

    A float such as ``0.1`` stands for what the operator wrote (the decimal 1/10) but is
    stored as the nearest binary64, which may lie above it: the budget is the smaller of
    the two readings, so it is never more than either.
    """
    exact = _exact(value, "rho")
    if isinstance(value, float):
        return min(exact, Fraction(repr(value)))
    return exact


def format_rho(value: Fraction | float, rounding: Literal["down", "up"], digits: int = 6) -> str:
    """``value`` in at most ``digits`` significant decimal digits, rounded ``down`` (what
    is left, a budget) or ``up`` (what is spent, a cost): a displayed number never claims
    more privacy budget than there is.  Exactly 0 shows as ``0``."""
    x = Fraction(value)
    if x < 0:
        raise ValueError("format_rho needs a non-negative value")
    if x == 0:
        return "0"
    # the exponent of the leading digit, exactly: the float estimate is corrected by at most one
    exponent = math.floor(math.log10(float(x))) if float(x) > 0 else -400
    while Fraction(10) ** exponent > x:
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= x:
        exponent += 1
    unit = Fraction(10) ** (exponent - digits + 1)
    scaled = x / unit
    n = math.floor(scaled) if rounding == "down" else math.ceil(scaled)
    # n·10^k has at most ``digits`` digits: its nearest float prints back as exactly that
    # decimal, in the usual ``g`` notation
    return format(float(Decimal(n).scaleb(exponent - digits + 1)), f".{digits}g")


def rho_gaussian(sensitivity2: Rational, sigma: Rational) -> Fraction:
    """Delta^2 / (2 sigma^2) for (discrete) Gaussian noise of std. dev. ``sigma``."""
    delta = _exact(sensitivity2, "sensitivity2", allow_zero=True)
    s = _exact(sigma, "sigma")
    return delta * delta / (2 * s * s)


def rho_gaussian_sq(sensitivity2_squared: Rational, sigma2: Rational) -> Fraction:
    """Delta^2 / (2 sigma2) from the *squared* sensitivity and variance parameter.

    The form used with ``noise.discrete_gaussian(sigma2)`` and
    ``noise.lattice_sensitivity2``, where both inputs are exact.
    """
    sens = _exact(sensitivity2_squared, "squared sensitivity", allow_zero=True)
    return sens / (2 * _exact(sigma2, "sigma2"))


def sigma2_for_rho(sensitivity2_squared: Rational, rho: Rational) -> Fraction:
    """The variance parameter that makes a query of squared sensitivity cost ``rho``."""
    return _exact(sensitivity2_squared, "squared sensitivity") / (2 * _exact(rho, "rho"))


def rho_pure(epsilon: Rational) -> Fraction:
    """epsilon-DP implies epsilon^2/2-zCDP (thesis Prop. 3; Bun & Steinke 2016 Prop. 1.4)."""
    e = _exact(epsilon, "epsilon", allow_zero=True)
    return e * e / 2


def rho_exponential(epsilon: Rational) -> Fraction:
    """The exponential mechanism with parameter epsilon is epsilon^2/8-zCDP (thesis Prop. 5)."""
    e = _exact(epsilon, "epsilon", allow_zero=True)
    return e * e / 8


def compose(rhos: Iterable[Rational]) -> Fraction:
    """Adaptive composition (thesis Prop. 6): the exact sum of the costs."""
    return sum((to_rho(r) for r in rhos), Fraction(0))


# --- conversions ------------------------------------------------------------------------

def _epsilon_at(alpha: float, rho: float, log_inv_delta: float) -> float:
    """Prop. 7 solved for epsilon at one order alpha, rounded up by the margin."""
    a1 = alpha - 1.0
    first = alpha * rho
    second = (log_inv_delta + a1 * math.log1p(-1.0 / alpha) - math.log(alpha)) / a1
    value = first + second
    return value + _MARGIN * (abs(first) + abs(second)) + 5e-324


def _log_delta_at(alpha: float, rho: float, epsilon: float) -> float:
    """log of Prop. 7's delta at one order alpha, rounded up by the margin."""
    a1 = alpha - 1.0
    terms = (a1 * (alpha * rho - epsilon), -math.log(a1), alpha * math.log1p(-1.0 / alpha))
    value = math.fsum(terms)
    return value + _MARGIN * sum(abs(t) for t in terms)


def _minimise(fn: Callable[[float], float], lo: float = 1e-9, hi: float = 1e9) -> float:
    """Minimum of a unimodal fn(alpha) over alpha = 1 + exp(z), by golden-section on z.

    Every alpha yields a *valid* bound, so an imperfect search only costs tightness.
    """
    phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = math.log(lo), math.log(hi)
    c, d = b - phi * (b - a), a + phi * (b - a)
    fc, fd = fn(1.0 + math.exp(c)), fn(1.0 + math.exp(d))
    for _ in range(200):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - phi * (b - a)
            fc = fn(1.0 + math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + phi * (b - a)
            fd = fn(1.0 + math.exp(d))
    return min(fc, fd)


def _check_delta(delta: object) -> float:
    try:
        d = float(delta)  # type: ignore[arg-type]  # anything float() takes; the rest is refused
    except (TypeError, ValueError):
        d = float("nan")
    if not 0.0 < d < 1.0:
        raise ConfigError(f"delta must lie strictly between 0 and 1, got {delta!r}",
                          hint="typical values are 1e-6 .. 1e-9 (well below 1/rows)")
    return d


def rho_to_epsilon(rho: Rational, delta: float) -> float:
    """Smallest epsilon certified by thesis Prop. 7 (CKS20) for rho-zCDP at ``delta``.

    epsilon = inf over alpha > 1 of alpha rho + (log(1/delta) + (alpha-1) log(1-1/alpha)
    - log alpha) / (alpha - 1); computed at the best alpha found, rounded up.
    """
    r = float(to_rho(rho))
    d = _check_delta(delta)
    if r == 0.0:
        return 0.0
    lid = -math.log(d)
    return max(0.0, _minimise(lambda alpha: _epsilon_at(alpha, r, lid)))


def rho_to_delta(rho: Rational, epsilon: float) -> float:
    """Smallest delta certified by thesis Prop. 7 for rho-zCDP at ``epsilon``, rounded up."""
    r = float(to_rho(rho))
    e = float(_exact(epsilon, "epsilon", allow_zero=True))
    if r == 0.0:
        return 0.0
    log_delta = _minimise(lambda alpha: _log_delta_at(alpha, r, e))
    return min(1.0, math.exp(log_delta) * (1.0 + _MARGIN))


def simple_rho_to_epsilon(rho: Rational, delta: float) -> float:
    """The looser bound epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke Prop. 1.3)."""
    r = float(to_rho(rho))
    lid = -math.log(_check_delta(delta))
    value = r + 2.0 * math.sqrt(r * lid)
    return value * (1.0 + _MARGIN)


def epsilon_delta_to_rho(epsilon: Rational, delta: float) -> Fraction:
    """Largest rho (rounded down) whose Prop. 7 conversion is within (epsilon, delta).

    Bisection on rho using :func:`rho_to_epsilon`, then a verification that the result
    converts back to at most delta at epsilon; rho is shrunk until it does.
    """
    e = float(_exact(epsilon, "epsilon", allow_zero=True))  # (0, delta)-DP is meaningful
    d = _check_delta(delta)
    lo, hi = 0.0, e + 1.0
    while rho_to_epsilon(hi, d) <= e:  # pragma: no cover - only for delta close to 1
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if rho_to_epsilon(mid, d) <= e:
            lo = mid
        else:
            hi = mid
    rho = _round_down(lo)
    while rho > 0 and (rho_to_epsilon(rho, d) > e or rho_to_delta(rho, e) > d):
        rho = _round_down(float(rho) * (1.0 - 1e-9))
    if rho <= 0:
        raise ConfigError(f"(epsilon={epsilon}, delta={delta}) leaves no zCDP budget",
                          hint="increase epsilon or delta")
    return rho


def _round_down(value: float) -> Fraction:
    """value rounded down to 15 significant decimal digits, as an exact Fraction."""
    if value <= 0.0:
        return Fraction(0)
    exponent = math.floor(math.log10(value)) - 14
    scale = Fraction(10) ** exponent
    return Fraction(math.floor(Fraction(value) / scale)) * scale


# --- budgets --------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """A privacy budget, stored as exact rho; remembers the (epsilon, delta) it came from."""

    rho: Fraction
    epsilon: float | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", to_rho(self.rho))

    @classmethod
    def from_rho(cls, rho: Rational) -> Budget:
        return cls(to_rho(rho))

    @classmethod
    def from_epsilon_delta(cls, epsilon: Rational, delta: float) -> Budget:
        """The largest rho-zCDP budget that implies (epsilon, delta)-DP (Prop. 7)."""
        return cls(epsilon_delta_to_rho(epsilon, delta), float(epsilon), float(delta))

    def epsilon_at(self, delta: float) -> float:
        return rho_to_epsilon(self.rho, delta)

    def __str__(self) -> str:
        text = f"rho={float(self.rho):.6g}"
        if self.epsilon is not None:
            text += f" (from epsilon={self.epsilon:g}, delta={self.delta:g})"
        return text
