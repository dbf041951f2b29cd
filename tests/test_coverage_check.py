"""The false-alarm rate of tests/coverage.py's interval-coverage check, computed exactly.

A trial's answers share one release, so in the worst case they all hit or all miss
together and the number of hit trials is binomial(T, 0.95).  The check must then fail a
correct release with probability at most ALPHA; the normal approximation it used before
failed one in 6,000 (T = 80), and the two ordered coverage tests run it on every CI run."""

from __future__ import annotations

import pytest
from scipy import stats

from coverage import ALPHA, check_coverage, coverage_floor


def _trials(hit: int, miss: int) -> list[dict]:
    # every answer of a trial hits (error 0) or misses (error 3 se) together
    return [{"quantile": [(0.0, 1.0)] * 4}] * hit + [{"quantile": [(3.0, 1.0)] * 4}] * miss


@pytest.mark.parametrize("trials", [40, 60, 80, 100, 300])
def test_a_correct_release_fails_with_at_most_alpha_however_correlated(trials):
    floor = coverage_floor(trials)
    # the largest number of hit trials the check rejects, and its chance at 95% coverage
    rejected = sum(1 for k in range(trials + 1) if k / trials < floor) - 1
    assert stats.binom.cdf(rejected, trials, 0.95) <= ALPHA
    # and the check can fail: a coverage of 75% over 300 trials (or far below over fewer)
    assert floor > 0.7


def test_67_fully_correlated_hits_of_80_pass():
    """P(binomial(80, 0.95) <= 67) = 1.6e-4: a rate a 1e-5 check must accept (it failed it)."""
    assert stats.binom.cdf(67, 80, 0.95) > ALPHA
    check_coverage(_trials(67, 13))


def test_a_coverage_far_below_95_percent_fails():
    with pytest.raises(AssertionError):
        check_coverage(_trials(60, 20))          # 75% of 80 trials
    with pytest.raises(AssertionError):
        check_coverage(_trials(255, 45))         # 85% of 300
