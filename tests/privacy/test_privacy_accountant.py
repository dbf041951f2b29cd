"""zCDP accounting: mechanism costs, exact composition, and (epsilon, delta) conversions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.errors import ConfigError
from dpsql.privacy.accountant import (Budget, compose, epsilon_delta_to_rho, rho_exponential,
                                      rho_gaussian, rho_gaussian_sq, rho_pure, rho_to_delta,
                                      rho_to_epsilon, sigma2_for_rho, simple_rho_to_epsilon)


def _grid_delta(rho: float, epsilon: float) -> float:
    """Thesis Prop. 7 evaluated by brute force over a dense grid of alpha (reference)."""
    alpha = np.exp(np.linspace(math.log(1.0 + 1e-4), math.log(1e4), 400_000))
    log_d = (alpha - 1) * (alpha * rho - epsilon) - np.log(alpha - 1) \
        + alpha * np.log1p(-1 / alpha)
    return float(np.exp(log_d.min()))


def test_mechanism_costs_are_exact():
    assert rho_gaussian(1, 10) == Fraction(1, 200)
    assert rho_gaussian(Fraction(3), Fraction(1, 2)) == 18
    assert rho_gaussian_sq(5, Fraction(5, 2)) == 1
    assert rho_pure(Fraction(1, 2)) == Fraction(1, 8)
    assert rho_exponential(2) == Fraction(1, 2)
    assert sigma2_for_rho(3, Fraction(1, 10)) == 15
    assert rho_gaussian_sq(3, sigma2_for_rho(3, Fraction(1, 10))) == Fraction(1, 10)
    # floats are taken at their exact binary value, never rounded
    assert rho_pure(0.1) == Fraction(0.1) ** 2 / 2


def test_composition_of_many_small_charges_is_their_exact_sum():
    parts = [Fraction(1, 3 * k) for k in range(1, 400)] + [0.1] * 10
    total = compose(parts)
    assert total == sum(Fraction(p) for p in parts)
    assert compose([Fraction(1, 1000)] * 1000) == 1
    assert isinstance(total, Fraction)


def test_published_conversion_epsilon_1_delta_1e6():
    rho = epsilon_delta_to_rho(1, 1e-6)
    # CKS20 / thesis Prop. 7: rho ~ 0.02436 (the simple bound of Bun-Steinke gives 0.01747)
    assert 0.02435 < float(rho) < 0.02436
    assert _grid_delta(float(rho), 1.0) <= 1e-6
    assert _grid_delta(float(rho) * 1.001, 1.0) > 1e-6  # tight: 0.1% more would not fit
    simple = (math.sqrt(math.log(1e6) + 1) - math.sqrt(math.log(1e6))) ** 2
    assert abs(simple - 0.017469) < 1e-5
    assert simple_rho_to_epsilon(simple, 1e-6) >= 1.0
    assert simple_rho_to_epsilon(rho, 1e-6) > 1.0  # the simple bound cannot certify it


@pytest.mark.parametrize("rho,delta", [(0.5, 1e-5), (1.0, 1e-6), (0.01, 1e-9), (5.0, 1e-3)])
def test_rho_to_epsilon_matches_brute_force(rho, delta):
    eps = rho_to_epsilon(rho, delta)
    assert _grid_delta(rho, eps) <= delta * (1 + 1e-6)
    assert _grid_delta(rho, eps * (1 - 1e-3)) > delta
    assert eps <= simple_rho_to_epsilon(rho, delta)  # CKS is never worse than the simple bound
    assert rho_to_delta(rho, eps) <= delta * (1 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-4, 20), st.floats(1e-12, 0.1), st.floats(1.001, 3))
def test_conversions_are_monotone(rho, delta, factor):
    assert rho_to_epsilon(rho * factor, delta) >= rho_to_epsilon(rho, delta)
    assert rho_to_epsilon(rho, delta / factor) >= rho_to_epsilon(rho, delta)
    eps = rho_to_epsilon(rho, delta)
    assert epsilon_delta_to_rho(eps * factor, delta) >= epsilon_delta_to_rho(eps, delta)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.01, 10), st.floats(1e-12, 0.1))
def test_inverse_round_trip_errs_toward_privacy(epsilon, delta):
    rho = epsilon_delta_to_rho(epsilon, delta)
    assert isinstance(rho, Fraction) and rho > 0
    assert rho_to_epsilon(rho, delta) <= epsilon
    assert rho_to_delta(rho, epsilon) <= delta
    assert rho_to_epsilon(float(rho) * 1.01, delta) > epsilon  # and it is tight


def test_budget_value_type_and_errors():
    b = Budget.from_epsilon_delta(1, 1e-6)
    assert b.rho == epsilon_delta_to_rho(1, 1e-6) and b.epsilon == 1 and "delta=1e-06" in str(b)
    assert b.epsilon_at(1e-6) <= 1
    assert Budget.from_rho("1/10").rho == Fraction(1, 10)
    with pytest.raises(ConfigError):
        Budget(-1)
    with pytest.raises(ConfigError):
        rho_to_epsilon(0.1, 1.5)
    with pytest.raises(ConfigError):
        rho_gaussian(1, 0)
    for bad in (float("inf"), float("nan"), "abc", None):
        with pytest.raises(ConfigError):
            rho_pure(bad)
        with pytest.raises(ConfigError):
            rho_to_epsilon(0.1, bad)
    assert rho_to_epsilon(0, 1e-6) == 0.0


@settings(max_examples=300, deadline=None)
@given(num=st.integers(1, 10**30), den=st.integers(1, 10**30), digits=st.integers(1, 8))
def test_format_rho_rounds_toward_privacy(num, den, digits):
    """What is left is never shown as more than it is, what is spent never as less."""
    from dpsql.privacy.accountant import format_rho
    value = Fraction(num, den)
    down, up = format_rho(value, "down", digits), format_rho(value, "up", digits)
    assert Fraction(down) <= value <= Fraction(up)
    assert Fraction(up) - Fraction(down) <= value / 10 ** (digits - 1)   # only the last digit differs
    assert len(down.split("e")[0].replace(".", "").lstrip("0")) <= digits


def test_format_rho_shows_zero_and_plain_values():
    from dpsql.privacy.accountant import format_rho
    assert format_rho(Fraction(0), "down") == "0" == format_rho(0, "up")
    assert (format_rho(Fraction(1, 3), "down"), format_rho(Fraction(1, 3), "up")) == ("0.333333", "0.333334")
    assert format_rho(Fraction(1), "up") == "1" and format_rho(Fraction(10**9 - 1, 10**9), "up") == "1"
    assert format_rho(Fraction(24, 10**12), "down") == "2.4e-11"
