"""Noise calibration for the error model: Laplace scale and Gaussian standard deviation.

The planner reports expected error at unit noise (thesis Prop. 9) and converts it to an RMSE
for a concrete privacy budget here, so that every number the planner prints uses one
convention.  Two Gaussian calibrations are offered:

* ``"analytic"`` -- the analytic Gaussian mechanism of Balle & Wang (ICML 2018, Theorem 8):
  the smallest sigma with ``Phi(D/2s - e s/D) - exp(e) Phi(-D/2s - e s/D) <= delta``.  The
  thesis tables (§3.10, tables 3.3 and 3.5) use it: sigma = 4.2247 at eps = 1, delta = 1e-6.
* ``"zcdp"`` -- sigma = D / sqrt(2 rho), with rho the largest zCDP budget that converts to
  (eps, delta) under the Canonne-Kamath-Steinke bound (thesis ch. 2), which is what the
  engine's ledger charges.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from scipy.special import log_ndtr, ndtr

from dpsql.errors import ConfigError

__all__ = ["laplace_scale", "gaussian_sigma", "analytic_gaussian_sigma", "zcdp_sigma",
           "epsilon_delta_to_rho"]


def _check_budget(epsilon: float, delta: float | None) -> None:
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if delta is not None and not (0 < delta < 1):
        raise ConfigError(f"delta must lie in (0, 1), got {delta!r}")


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """Laplace scale b = sensitivity / epsilon (thesis Definition 6)."""
    _check_budget(epsilon, None)
    return sensitivity / epsilon


def _analytic_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    # exp(eps) * Phi(.) overflows for large eps; combine in log space instead.
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma satisfying Balle & Wang's exact (eps, delta) condition, by bisection.

    The privacy-loss tail is monotone decreasing in sigma, so bisection on a bracket that
    is doubled until it holds converges to the exact calibration (relative tol 1e-12).
    """
    _check_budget(epsilon, delta)
    lo, hi = 1e-6 * sensitivity, sensitivity
    while _analytic_delta(hi, epsilon, sensitivity) > delta:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _analytic_delta(mid, epsilon, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def _cks_epsilon(rho: float, delta: float) -> float:
    """epsilon achieved by rho-zCDP at delta (Canonne, Kamath, Steinke 2020, Prop. 12)."""
    # The optimum over the Renyi order alpha is unimodal; a log grid plus golden refinement
    # is accurate to ~1e-10 and needs no special cases for tiny rho.
    alphas = 1.0 + np.logspace(-6, 6, 2000)
    vals = (alphas * rho + (math.log(1.0 / delta) + (alphas - 1) * np.log1p(-1.0 / alphas)
                            - np.log(alphas)) / (alphas - 1))
    k = int(np.argmin(vals))
    best = float(vals[k])
    lo, hi = alphas[max(k - 1, 0)], alphas[min(k + 1, len(alphas) - 1)]
    g = (math.sqrt(5) - 1) / 2

    def f(a: float) -> float:
        return a * rho + (math.log(1.0 / delta) + (a - 1) * math.log1p(-1.0 / a)
                          - math.log(a)) / (a - 1)

    for _ in range(80):
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        if f(x1) < f(x2):
            hi = x2
        else:
            lo = x1
    return min(best, f(0.5 * (lo + hi)))


def epsilon_delta_to_rho(epsilon: float, delta: float) -> float:
    """Largest rho whose CKS conversion gives at most epsilon at delta.

    Uses :func:`dpsql.privacy.accountant.epsilon_delta_to_rho` when that module exists so
    the planner and the ledger agree exactly; otherwise bisects the same bound locally.
    """
    _check_budget(epsilon, delta)
    accountant_rho: Callable[[float, float], Fraction] | None
    try:
        from dpsql.privacy.accountant import epsilon_delta_to_rho as accountant_rho
    except ImportError:
        accountant_rho = None
    if accountant_rho is not None:
        return float(accountant_rho(epsilon, delta))
    lo, hi = 0.0, max(epsilon, 1.0)
    while _cks_epsilon(hi, delta) < epsilon:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _cks_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo


def zcdp_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """sigma = sensitivity / sqrt(2 rho) for the rho that (eps, delta) buys under zCDP."""
    rho = epsilon_delta_to_rho(epsilon, delta)
    return sensitivity / math.sqrt(2.0 * rho)


def gaussian_sigma(epsilon: float, delta: float, calibration: str = "analytic",
                   sensitivity: float = 1.0) -> float:
    """Gaussian noise scale for (eps, delta) under the named calibration."""
    if calibration == "analytic":
        return analytic_gaussian_sigma(epsilon, delta, sensitivity)
    if calibration == "zcdp":
        return zcdp_sigma(epsilon, delta, sensitivity)
    raise ConfigError(f"unknown Gaussian calibration {calibration!r}",
                      hint="use 'analytic' or 'zcdp'")
