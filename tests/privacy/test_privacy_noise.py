"""Goodness of fit and exactness checks for the discrete samplers (CKS20).

Seeds are fixed through the injectable bit source, so every test is deterministic; the
negative controls show the same tests do reject a wrong distribution.
"""

from __future__ import annotations

import ast
import math
import pathlib
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.errors import ConfigError
from dpsql.privacy import noise
from dpsql.privacy.expbounds import (exp_bounds, exp_neg_bounds, gaussian_acceptance_table,
                                     geometric_table)
from dpsql.privacy.noise import (SeededBitSource, discrete_gaussian, discrete_laplace,
                                 lattice_release, lattice_sensitivity2, round_to_grid)

ALPHA = 1e-4  # deterministic seeds: a correct sampler passes, a wrong one fails by far


def _exp_decimal(x: Fraction, precision: int) -> Decimal:
    getcontext().prec = precision // 3 + 40
    return (-(Decimal(x.numerator) / Decimal(x.denominator))).exp()


def _pmf(kind: str, param: Fraction, support: np.ndarray) -> np.ndarray:
    # Decimal-free float pmf is enough for chi-square expectations; normalised over a
    # support wide enough that the omitted mass is < 1e-12.
    p = float(param)
    y = support.astype(float)
    logw = -(y * y) / (2 * p) if kind == "gauss" else -np.abs(y) / p
    w = np.exp(logw - logw.max())
    return w / w.sum()


def _chi_square(sample: np.ndarray, kind: str, param: Fraction) -> float:
    spread = math.sqrt(float(param)) if kind == "gauss" else float(param)
    half = int(40 * spread) + 40
    support = np.arange(-half, half + 1)
    probs = _pmf(kind, param, support)
    counts = np.bincount(np.clip(sample, -half, half) + half, minlength=support.size)
    expected = probs * sample.size
    # Merge cells from the outside in until every cell expects >= 5 draws.
    keep_obs, keep_exp = [], []
    acc_o = acc_e = 0.0
    order = np.argsort(np.abs(support), kind="stable")[::-1]
    for i in order:
        acc_o += counts[i]
        acc_e += expected[i]
        if acc_e >= 5:
            keep_obs.append(acc_o)
            keep_exp.append(acc_e)
            acc_o = acc_e = 0.0
    keep_obs[-1] += acc_o
    keep_exp[-1] += acc_e
    obs, exp = np.array(keep_obs), np.array(keep_exp)
    exp *= obs.sum() / exp.sum()
    return stats.chisquare(obs, exp).pvalue


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(7, 3), 25.0,
                                    Fraction(10000), 2.5e7])
def test_discrete_gaussian_fits_exact_pmf(sigma2):
    sample = discrete_gaussian(sigma2, 200_000, rng=SeededBitSource(11))
    assert sample.dtype == np.int64
    assert _chi_square(sample, "gauss", Fraction(sigma2)) > ALPHA


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(37, 10), 50,
                                   Fraction(123457, 7)])
def test_discrete_laplace_fits_exact_pmf(scale):
    sample = discrete_laplace(scale, 200_000, rng=SeededBitSource(12))
    assert sample.dtype == np.int64
    assert _chi_square(sample, "laplace", Fraction(scale)) > ALPHA


def test_large_laplace_scale_uses_memoryless_redraws():
    # scale 2^40 exceeds both table caps, so V is redrawn many times; the empirical
    # mean absolute value must match E|Y| = 2q/((1-q)(1+q)) ~ scale.
    scale = Fraction(1 << 40)
    sample = discrete_laplace(scale, 20_000, rng=SeededBitSource(3)).astype(float)
    mean_abs = np.abs(sample).mean() / float(scale)
    assert abs(mean_abs - 1.0) < 4 * 1.0 / math.sqrt(sample.size)


def test_gaussian_with_sigma2_beyond_2_to_the_50():
    # A residual block of two 1,024-scaled integer factors at eps = 1 needs sigma2 ~ 4.9e17
    # in lattice units; it was refused ("too large") although only the proposal scale
    # t = floor(sigma) + 1 must stay inside int64's safe range.
    sigma2 = Fraction(485891705873528600)
    sample = discrete_gaussian(sigma2, 20_000, rng=SeededBitSource(13)).astype(float)
    sd = math.sqrt(float(sigma2))
    n = sample.size
    assert abs(sample.mean() / sd) < 4 / math.sqrt(n)
    assert abs(sample.std() / sd - 1.0) < 4 / math.sqrt(2 * n)
    with pytest.raises(ConfigError):
        discrete_gaussian(Fraction(1 << 102), 3)


def test_goodness_of_fit_rejects_a_wrong_distribution():
    sample = discrete_gaussian(Fraction(100), 200_000, rng=SeededBitSource(5))
    assert _chi_square(sample, "gauss", Fraction(104)) < ALPHA
    lap = discrete_laplace(Fraction(10), 200_000, rng=SeededBitSource(6))
    assert _chi_square(lap, "laplace", Fraction(21, 2)) < ALPHA
    # a (continuous) Gaussian rounded to integers is not the discrete Gaussian at tiny sigma
    rounded = np.rint(stats.norm(scale=0.5).rvs(200_000, random_state=1)).astype(np.int64)
    assert _chi_square(rounded, "gauss", Fraction(1, 4)) < ALPHA


def test_exact_path_alone_reproduces_the_distribution(monkeypatch):
    """Send a third of all comparisons to the exact lazy continuation and re-test fit.

    The continuation is otherwise reached with probability < 2^-60, so this is the only
    way to test it statistically.
    """
    original = noise._decide
    flip = np.random.default_rng(0)  # test-only choice of which comparisons to divert

    def diverted(u, lo, hi):
        success, undecided = original(u, lo, hi)
        forced = flip.random(u.shape) < 0.35
        return success & ~forced, undecided | forced

    monkeypatch.setattr(noise, "_decide", diverted)
    gauss = discrete_gaussian(Fraction(9, 2), 30_000, rng=SeededBitSource(21))
    lap = discrete_laplace(Fraction(5, 2), 30_000, rng=SeededBitSource(22))
    assert _chi_square(gauss, "gauss", Fraction(9, 2)) > ALPHA
    assert _chi_square(lap, "laplace", Fraction(5, 2)) > ALPHA


def test_gaussian_beyond_its_acceptance_table(monkeypatch):
    """A table shorter than sigma2/t (as for sigma > 2^18) must not cut corners.

    Between cap and sigma2/t the acceptance probability still grows, so the shortcut
    "reject when u exceeds A(cap-1)" would be wrong there; those draws take the exact path.
    """
    monkeypatch.setattr(noise, "_MAX_GAUSS_TABLE", 1)
    noise._gaussian_plan.cache_clear()
    try:
        sample = discrete_gaussian(Fraction(3601), 20_000, rng=SeededBitSource(31))
        assert _chi_square(sample, "gauss", Fraction(3601)) > ALPHA
        monkeypatch.setattr(noise, "_MAX_GAUSS_TABLE", 3 * 61)  # now cap-1 >= sigma2/t
        noise._gaussian_plan.cache_clear()
        sample = discrete_gaussian(Fraction(3601), 20_000, rng=SeededBitSource(32))
        assert _chi_square(sample, "gauss", Fraction(3601)) > ALPHA
    finally:
        noise._gaussian_plan.cache_clear()


def test_lazy_comparison_matches_high_precision_exp():
    bits = SeededBitSource(8)
    rng = np.random.default_rng(1)
    for _ in range(300):
        x = Fraction(int(rng.integers(0, 5000)), int(rng.integers(1, 1000)))
        p = _exp_decimal(x, 256)
        # a prefix right next to the threshold forces several refinements
        u = int(p * (1 << 64))
        for delta in (-1, 0, 1):
            lazy = noise._LazyUniform(max(u + delta, 0), bits)
            decision = lazy.less_than_exp(x.numerator, x.denominator)
            v = Decimal(lazy.prefix) / Decimal(2) ** lazy.nbits
            width = Decimal(1) / Decimal(2) ** lazy.nbits
            if decision:
                assert v + width <= p
            else:
                assert v >= p


@pytest.mark.parametrize("n,d", [(0, 1), (1, 1), (3, 7), (100, 3), (5, 100000),
                                 (10**16 + 7, 3 * 10**14)])
def test_exp_bounds_bracket_the_true_value(n, d):
    for precision in (64, 128, 300):
        lo, hi = exp_neg_bounds(n, d, precision)
        p = _exp_decimal(Fraction(n, d), precision) * Decimal(2) ** precision
        assert lo <= p <= hi
        assert hi - lo <= 2
    lo, hi = exp_bounds(-7, 3, 64)
    p = (Decimal(7) / Decimal(3)).exp() * Decimal(2) ** 64
    assert lo <= p <= hi


def test_tables_bracket_the_true_values():
    los, his = geometric_table(3, 1001, 500)
    for k in (0, 1, 250, 499):
        p = _exp_decimal(Fraction(3 * k, 1001), 200) * Decimal(2) ** 64
        assert los[k] <= p <= his[k] + 1 and his[k] - los[k] <= 2
    a, b, t = 70, 3, 5  # sigma2 = 70/3
    los, his = gaussian_acceptance_table(a, b, t, 200)
    for y in (0, 4, 23, 199):
        gamma = Fraction((y * b * t - a) ** 2, 2 * a * b * t * t)
        p = _exp_decimal(gamma, 200) * Decimal(2) ** 64
        assert los[y] <= p <= his[y] and his[y] - los[y] <= 2


def test_default_source_is_the_os_csprng(monkeypatch):
    calls = []
    real = noise.os.urandom

    def counting(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(noise.os, "urandom", counting)
    discrete_gaussian(4, 100)
    discrete_laplace(2, 100)
    assert calls, "production path must draw from os.urandom"


def test_noise_module_has_no_float_inverse_cdf_or_numpy_random():
    _assert_no_float_sampling(pathlib.Path(noise.__file__))
    _assert_no_float_sampling(pathlib.Path(noise.__file__).with_name("expbounds.py"))


def _assert_no_float_sampling(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    forbidden = {"log", "log1p", "log2", "exp", "expm1", "random", "default_rng", "uniform",
                 "laplace", "normal", "geometric", "randbits"}
    assert not names & forbidden
    imports = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    assert "random" not in imports
    assert "np.random" not in path.read_text()


def test_tiny_parameters_are_fast_and_exact():
    # exp(-x) for huge x is bounded by [0, 1] units without a huge power (1/(2 sigma2) = 5e5)
    g = discrete_gaussian(Fraction(1, 10**6), 50_000, rng=SeededBitSource(4))
    lap = discrete_laplace(1e-6, 50_000, rng=SeededBitSource(5))
    # P(|Y| >= 1) is about 2 exp(-1/(2 sigma2)) resp. 2 exp(-1/scale): never observed
    assert not g.any() and not lap.any()
    assert exp_neg_bounds(10**9, 3, 64) == (0, 1)


def test_shapes_seeds_and_errors():
    a = discrete_gaussian(3, (4, 5), rng=SeededBitSource(1))
    b = discrete_gaussian(3, (4, 5), rng=SeededBitSource(1))
    assert a.shape == (4, 5) and np.array_equal(a, b)
    assert discrete_laplace(1, 0).shape == (0,)
    for bad in (0, -1, "x", float("nan"), float("inf"), None):
        with pytest.raises(ConfigError):
            discrete_gaussian(bad, 3)
    with pytest.raises(ConfigError):
        discrete_laplace(2.0**60, 3)
    with pytest.raises(ConfigError):  # a numpy Generator is not a bit source
        discrete_gaussian(3, 3, rng=np.random.default_rng(0))


def test_grid_rounding_and_lattice_release():
    q = np.array([[0.5, 0.26, -1.0], [0.0, 0.74, 0.333]])
    k = round_to_grid(q, Fraction(1, 4))
    assert k.dtype == np.int64
    assert np.array_equal(k, [[2, 1, -4], [0, 3, 1]])
    assert np.all(np.abs(q - k / 4) <= 1 / 8)
    # the sensitivity is the rounded matrix's: max column sum of squares, exactly
    assert lattice_sensitivity2(k) == max(4 + 0, 1 + 9, 16 + 1)
    x = np.array([3, 0, 7])
    values = k @ x
    released = lattice_release(values, 50, rng=SeededBitSource(2))
    assert released.dtype == np.int64 and released.shape == values.shape
    with pytest.raises(ConfigError):
        lattice_release(values.astype(float), 50)
    with pytest.raises(ConfigError):
        round_to_grid([[1e12]], Fraction(1, 1000))


# --- no int64 overflow, whatever the bits (docs/privacy.md, "No overflow") ---------------

def test_a_laplace_draw_beyond_int64_is_exact_not_wrapped(monkeypatch):
    """scale (or sigma) up to 2^50: a draw past 2^63 has probability ~exp(-8192) but is
    possible.  It used to wrap around in int64 (G = L V + U), coming out as a small or
    negative number; now it is the exact Python integer (an object array).  The rare event
    is forced: the deepest block count V returns 2^48 (at scale 2^50 the split has levels
    of blocks 2^16, 2^16, 2^16 and 4, so G = 2^50 V + a part below 2^50)."""
    forced = 1 << 48
    monkeypatch.setattr(noise, "_block_count", lambda bits, plan, num, den, n: np.full(n, forced, dtype=np.int64))
    sample = discrete_laplace(Fraction(1 << 50), 5, rng=SeededBitSource(5))
    assert sample.dtype == object
    assert all(isinstance(v, int) and abs(v) >> 50 == forced for v in sample)
    assert len({abs(v) for v in sample}) == 5          # the low parts are random


def test_a_gaussian_proposal_beyond_int64_is_decided_exactly(monkeypatch):
    """Proposals past int64 are compared exactly and rejected (acceptance below exp(-2^20)),
    never wrapped into a small value that the acceptance step could take; the batch's other
    proposals are decided by the same exact comparison."""
    real = noise._laplace_int
    calls = []

    def proposals(bits, num, den, n):
        y = real(bits, num, den, n)
        if not calls:
            y = y.astype(object)
            y[::2] = [(-1) ** i * (1 << 70) for i in range(len(y[::2]))]
        calls.append(n)
        return y
    monkeypatch.setattr(noise, "_laplace_int", proposals)
    sample = discrete_gaussian(Fraction(1 << 40), 200, rng=SeededBitSource(6))
    assert sample.dtype == np.int64 and len(calls) >= 1
    assert np.all(np.abs(sample) < 12 * 2 ** 20)


def test_add_exact_and_lattice_release_never_wrap():
    big = np.array([2 ** 62, -(2 ** 62), 5], dtype=np.int64)
    total = noise.add_exact(big, np.array([2 ** 62, -(2 ** 62), 1], dtype=np.int64))
    assert total.dtype == object and list(total) == [2 ** 63, -(2 ** 63), 6]
    assert noise.add_exact(np.array([1, 2]), np.array([3, -4])).dtype == np.int64
    assert float(total.astype(np.float64)[0]) == 2.0 ** 63
    with pytest.raises(TypeError):
        noise.add_exact(np.array([0.5]), np.array([1]))


@pytest.mark.parametrize("scale", [Fraction(3 * 2 ** 20 + 12345, 7), Fraction(2 ** 41 + 3)])
def test_large_laplace_scales_fit_the_exact_tail(scale):
    """Scales above the 2^16 block draw V by the same split again (one or two levels here):
    the tail P(|Y| >= k) = 2 q^k / (1 + q), q = exp(-1/scale), in bins of |Y|/scale."""
    sample = discrete_laplace(scale, 100_000, rng=SeededBitSource(21))
    assert sample.dtype == np.int64
    s = float(scale)
    mag = np.abs(sample).astype(float)
    cuts = np.array([1.0, s / 16, s / 4, s / 2, s, 1.5 * s, 2 * s, 3 * s, 5 * s])
    q = math.exp(-1 / s)
    tail = np.array([1.0] + [2 * q ** math.ceil(c) / (1 + q) for c in cuts] + [0.0])
    probs = tail[:-1] - tail[1:]
    counts = np.histogram(mag, bins=np.concatenate([[0.0], np.ceil(cuts), [np.inf]]))[0]
    assert stats.chisquare(counts, probs * sample.size).pvalue > ALPHA
    assert abs(np.mean(sample > 0) - np.mean(sample < 0)) < 4 / math.sqrt(sample.size)


@pytest.mark.parametrize("sigma2", [Fraction(485891705873528600), Fraction(1 << 80), Fraction((1 << 80) - 1, 3)])
def test_large_gaussian_fits_the_normal_cdf(sigma2):
    """sigma ~ 7e8 (a residual block in lattice units): the proposal's scale t takes two
    levels of the geometric split; sigma = 2^40, the largest lattice noise
    (``release.MAX_LATTICE_SIGMA``, issue 32), and a non-dyadic one below it: three levels.
    At these sigmas the discrete Gaussian's cdf equals the normal one to far below the
    test's resolution."""
    draws = discrete_gaussian(sigma2, 50_000, rng=SeededBitSource(22))
    assert draws.dtype == np.int64
    sample = draws.astype(float)
    sd = math.sqrt(float(sigma2))
    edges = np.array([-np.inf, -2.5, -1.5, -1, -0.5, -0.2, 0.2, 0.5, 1, 1.5, 2.5, np.inf])
    probs = np.diff(stats.norm.cdf(edges))
    counts = np.histogram(sample / sd, bins=edges)[0]
    assert stats.chisquare(counts, probs * sample.size).pvalue > ALPHA
