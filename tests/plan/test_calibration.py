import math

import pytest
from scipy.special import ndtr

from dpsql.errors import ConfigError
from dpsql.plan.calibration import (
    _cks_epsilon, analytic_gaussian_sigma, epsilon_delta_to_rho, gaussian_sigma, zcdp_sigma,
)


def _delta(sigma, eps):
    return ndtr(0.5 / sigma - eps * sigma) - math.exp(eps) * ndtr(-0.5 / sigma - eps * sigma)


def test_analytic_sigma_matches_thesis_tables():
    # Thesis tables 3.3/3.5 (ε = 1, δ = 1e-6) use σ ≈ 4.2247.
    assert analytic_gaussian_sigma(1.0, 1e-6) == pytest.approx(4.2247, abs=1e-4)


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-5), (1.0, 1e-6), (4.0, 1e-9)])
def test_analytic_sigma_is_the_smallest_private_sigma(eps, delta):
    s = analytic_gaussian_sigma(eps, delta)
    assert _delta(s, eps) <= delta * (1 + 1e-9)
    assert _delta(s * (1 - 1e-6), eps) > delta


def test_zcdp_sigma_round_trips_through_cks_bound():
    rho = epsilon_delta_to_rho(1.0, 1e-6)
    assert _cks_epsilon(rho, 1e-6) == pytest.approx(1.0, rel=1e-8)
    assert zcdp_sigma(1.0, 1e-6) == pytest.approx(1 / math.sqrt(2 * rho))
    # zCDP accounting is looser than the exact analytic calibration.
    assert zcdp_sigma(1.0, 1e-6) > analytic_gaussian_sigma(1.0, 1e-6)


def test_bad_parameters_raise_config_errors():
    with pytest.raises(ConfigError):
        gaussian_sigma(1.0, 1e-6, calibration="classic")
    with pytest.raises(ConfigError):
        analytic_gaussian_sigma(-1.0, 1e-6)
