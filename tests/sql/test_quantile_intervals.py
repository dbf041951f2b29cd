"""Issue 29 item 2: a quantile's interval comes from the noisy CDF (its confidence band
inverted) plus the bin width, so `MEDIAN(arr_delay)` over 15-minute bins no longer reads
`-7.5 ± 0`.  Checked against a brute-force reading of the definition on small domains, and
by coverage of the true (unbinned) quantile over simulated releases.

The simulated noise is drawn here with numpy (test-side only; the product's noise comes
from dpsql.privacy)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.engine.variance import Z95 as ENGINE_Z95
from dpsql.sql.postprocess import Z95, quantile_from_histogram, quantile_interval, quantile_variance


def _brute_force(hist, var, starts, width, q, z=Z95):
    """The definition, value by value: an integer t of the domain is plausible when the band
    of the count of values in t's bin and below reaches q·N (within one count) and the band of
    the count strictly below t's bin does not surely pass it.  Every sum written out."""
    h = [float(x) for x in hist]      # as released: negative counts keep the sums unbiased
    n = sum(h)
    plausible = []
    for j, start in enumerate(starts):
        through = sum(h[:j + 1]) - q * n
        sd_through = math.sqrt((1 - q) ** 2 * sum(var[:j + 1]) + q ** 2 * sum(var[j + 1:]))
        below = sum(h[:j]) - q * n
        sd_below = math.sqrt((1 - q) ** 2 * sum(var[:j]) + q ** 2 * sum(var[j:]))
        reaches = through + z * sd_through >= -1
        surely_before = j > 0 and below - z * sd_below >= 1
        for t in range(start, start + width):
            if reaches and not surely_before:
                plausible.append(t)
    return min(plausible), max(plausible)


@pytest.mark.parametrize("seed", range(40))
def test_interval_matches_brute_force_on_a_small_domain(seed):
    rng = np.random.default_rng(seed)
    width, cells = int(rng.integers(1, 5)), int(rng.integers(2, 9))
    starts = [width * j for j in range(cells)]
    hist = rng.poisson(rng.uniform(0, 40), cells) + rng.normal(0, 3, cells)
    var = rng.uniform(0, 60, cells) * rng.integers(0, 2)       # some releases exact
    values = np.array([s + (width - 1) / 2 for s in starts])
    low, high = np.array(starts, float), np.array(starts, float) + width - 1
    for q in (0.1, 0.5, 0.9):
        if np.clip(hist, 0, None).sum() <= 0:
            continue
        assert quantile_interval(hist, var, values, q, low=low, high=high) == _brute_force(hist, var, starts, width, q)


def test_the_interval_holds_the_bin_and_is_zero_only_when_one_value_is_certain():
    # the report: every delay in the -15..0 bin, read at its midpoint -7.5 ("± 0" before)
    values, low, high = np.array([-22.5, -7.5, 7.5]), np.array([-30.0, -15, 0]), np.array([-15.0, 0, 15])
    hist, var = np.array([100.0, 5000, 100]), np.full(3, 25.0)
    x = quantile_from_histogram(hist, values, 0.5, "cont")
    assert x == -7.5 and quantile_interval(hist, var, values, 0.5, low=low, high=high) == (-15.0, 0.0)
    assert Z95 * math.sqrt(quantile_variance(hist, var, values, 0.5, x, low=low, high=high)) == pytest.approx(7.5)
    # one-value cells and a crossing beyond doubt: the confidence set is one value
    v = np.arange(5, dtype=float)
    assert quantile_variance(np.array([0.0, 10, 5, 0, 10]), np.zeros(5), v, 0.5, 2.0) == 0.0
    # percentile_cont between two cells: both ends are in the interval, even for exact counts
    assert quantile_interval(np.array([0.0, 10, 0, 0, 10]), np.zeros(5), v, 0.5) == (1.0, 4.0)
    # unsupported cells (infinite variance), unknown variances, no rows
    assert math.isinf(quantile_variance(np.ones(5), np.array([1, 1, np.inf, 1, 1.0]), v, 0.5, 2.0))
    assert math.isnan(quantile_variance(np.ones(5), np.full(5, np.nan), v, 0.5, 2.0))
    assert all(math.isnan(e) for e in quantile_interval(np.zeros(5), np.ones(5), v, 0.5))
    # overwhelming noise: the whole domain, never more
    assert quantile_interval(np.ones(5), np.full(5, 1e12), v, 0.5) == (0.0, 4.0)
    assert Z95 == pytest.approx(ENGINE_Z95, abs=1e-15)


def _coverage(rng, *, q, method, noise_sd, reps):
    """Share of simulated releases whose reported interval x ± Z95·se holds the true
    quantile of the unbinned data: skewed delays (lognormal, many near 0, a long tail)."""
    edges = np.arange(-60, 301, 15)                      # 15-minute bins, clamped ends
    values, low, high = (edges[:-1] + edges[1:]) / 2, edges[:-1].astype(float), edges[1:].astype(float)
    hits, widths = 0, []
    for _ in range(reps):
        raw = np.clip(np.round(rng.lognormal(3.0, 0.9, 3000) - 25), -60, 300)
        truth = np.quantile(raw, q, method="linear" if method == "cont" else "inverted_cdf")
        counts = np.histogram(raw, bins=edges)[0].astype(float)
        noisy = counts + rng.normal(0, noise_sd, counts.size)
        x = quantile_from_histogram(noisy, values, q, method)
        half = Z95 * math.sqrt(quantile_variance(noisy, np.full(counts.size, noise_sd ** 2), values, q, x,
                                                 low=low, high=high))
        hits += abs(truth - x) <= half + 1e-9
        widths.append(half)
    return hits / reps, min(widths)


@pytest.mark.parametrize("noise_sd", [1.0, 30.0, 150.0])
@pytest.mark.parametrize("q,method", [(0.5, "cont"), (0.9, "cont"), (0.5, "disc"), (0.1, "disc")])
def test_coverage_of_the_true_quantile_over_simulated_releases(q, method, noise_sd):
    reps = 300
    rate, narrowest = _coverage(np.random.default_rng(29), q=q, method=method, noise_sd=noise_sd, reps=reps)
    # at a true 95% the observed rate falls below 95% - 3 binomial standard deviations
    # with probability ~0.1%; the interval is conservative (union bound), so ~99% is usual
    assert rate >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / reps), rate
    assert narrowest >= 7.5 - 1e-9          # never narrower than the bin it reads
