"""The budget split across views (dpsql/plan/views.py): exact, and optimal against brute force."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from dpsql.plan.views import even_total, expected_total, split_budget


@pytest.mark.parametrize("seed", range(20))
def test_the_closed_form_split_beats_every_random_split_and_sums_exactly(seed):
    rng = random.Random(seed)
    rho = Fraction(rng.randint(1, 100), rng.randint(1, 1000))
    costs = {f"v{i}": rng.choice([0.0, rng.uniform(0.01, 1e4)]) for i in range(rng.randint(1, 5))}
    shares = split_budget(rho, costs)
    assert sum(shares.values(), Fraction(0)) == rho
    best = expected_total(costs, shares)
    assert best <= even_total(rho, costs) * (1 + 1e-12)
    for _ in range(300):
        w = {v: rng.random() for v in costs}
        total = sum(w.values())
        other = {v: rho * Fraction(x) / Fraction(total) for v, x in w.items()}
        assert best <= expected_total(costs, other) * (1 + 1e-12)


def test_shares_are_proportional_to_the_square_root_of_the_cost():
    shares = split_budget(Fraction(1), {"a": 1.0, "b": 4.0, "c": 0.0})
    assert shares == {"a": Fraction(1, 3), "b": Fraction(2, 3), "c": 0}
    # total = (Σ√c)² / (2ρ) = 9/2; even: (1 + 4)·3/2 = 7.5
    assert expected_total({"a": 1.0, "b": 4.0}, shares) == pytest.approx(4.5)
    assert even_total(Fraction(1), {"a": 1.0, "b": 4.0, "c": 0.0}) == pytest.approx(7.5)


def test_all_zero_costs_split_evenly_and_bad_costs_are_refused():
    assert split_budget(Fraction(1, 2), {"a": 0.0, "b": 0.0}) == {"a": Fraction(1, 4), "b": Fraction(1, 4)}
    with pytest.raises(ValueError):
        split_budget(Fraction(1), {"a": float("nan")})
    with pytest.raises(ValueError):
        split_budget(Fraction(0), {"a": 1.0})
