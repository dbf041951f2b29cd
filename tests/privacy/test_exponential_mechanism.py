"""The exact exponential mechanism (``noise.exponential_mechanism``, docs/privacy.md §4a).

Selection frequencies are tested against the definition P(i) ∝ exp(ε q_i / (2Δ)) with a
seeded bit source; negative controls show the same test rejects a mechanism with the
wrong temperature.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpsql.errors import ConfigError
from dpsql.privacy import noise
from dpsql.privacy.noise import SeededBitSource, exponential_mechanism

# chi-square critical values at p = 1e-4
_CHI2_CRIT = {1: 15.14, 2: 18.42, 3: 21.11, 4: 23.51, 5: 25.74, 6: 27.86, 7: 29.88}


def _definition(scores, eps, delta):
    z = [float(eps) * float(q) / (2 * float(delta)) for q in scores]
    top = max(z)
    w = [math.exp(v - top) for v in z]
    return np.array(w) / sum(w)


def _frequencies(scores, eps, delta, draws, seed):
    bits = SeededBitSource(seed)
    out = np.zeros(len(scores), dtype=np.int64)
    for _ in range(draws):
        out[exponential_mechanism(scores, eps, delta, rng=bits)] += 1
    return out


def _chi2(counts, probs):
    expected = probs * counts.sum()
    keep = expected >= 5  # pool tiny cells into one (standard chi-square practice)
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    mask = exp > 0
    return float(((obs[mask] - exp[mask]) ** 2 / exp[mask]).sum()), int(mask.sum()) - 1


@pytest.mark.parametrize("scores,eps,delta,seed", [
    ([0, 1, 2, 3.5], 1, 1, 1),
    ([Fraction(-7, 3), Fraction(5, 2), 0, 1, Fraction(11, 4)], 0.75, 2, 2),
    ([10.0, 9.0, 3.0], 2, 1, 3),          # one cell rare (pooled)
])
def test_selection_probabilities_match_the_definition(scores, eps, delta, seed):
    draws = 12_000
    counts = _frequencies(scores, eps, delta, draws, seed)
    stat, df = _chi2(counts, _definition(scores, eps, delta))
    assert stat < _CHI2_CRIT[df], (counts, stat)


def test_a_wrong_temperature_is_rejected_by_the_same_test():
    # negative control: frequencies drawn at eps are tested against the pmf at 2*eps
    scores, eps, delta = [0, 1, 2, 3.5], 1, 1
    counts = _frequencies(scores, eps, delta, 12_000, 1)
    stat, df = _chi2(counts, _definition(scores, 2 * eps, delta))
    assert stat > _CHI2_CRIT[df]


def test_equal_scores_are_uniform_and_shifts_do_not_matter():
    counts = _frequencies([3, 3, 3, 3, 3, 3], 1, 1, 6_000, 7)
    stat, df = _chi2(counts, np.full(6, 1 / 6))
    assert stat < _CHI2_CRIT[df]
    # The mechanism depends on score differences only: same bits, same choices.
    base = [Fraction(1, 3), 2, Fraction(-5, 7), 4]
    shifted = [v + Fraction(10**6, 3) for v in base]
    a, b = SeededBitSource(11), SeededBitSource(11)
    assert [exponential_mechanism(base, 1, 1, rng=a) for _ in range(200)] == \
        [exponential_mechanism(shifted, 1, 1, rng=b) for _ in range(200)]


def test_a_dominant_score_is_always_chosen_and_huge_gaps_are_cheap():
    scores = [0.0] * 500 + [1e6]
    bits = SeededBitSource(5)
    assert all(exponential_mechanism(scores, 1, 1, rng=bits) == 500 for _ in range(50))


def test_exact_path_alone_reproduces_the_distribution(monkeypatch):
    # Divert every fast-path comparison to the exact continuation: same distribution.
    def undecided(u, lo, hi):
        return np.zeros(u.shape, dtype=bool), np.ones(u.shape, dtype=bool)

    monkeypatch.setattr(noise, "_decide", undecided)
    scores, eps, delta = [0, 1, 2, 3.5], Fraction(3, 2), 1
    counts = _frequencies(scores, eps, delta, 4_000, 9)
    stat, df = _chi2(counts, _definition(scores, eps, delta))
    assert stat < _CHI2_CRIT[df]


def test_inputs_are_checked():
    with pytest.raises(ConfigError):
        exponential_mechanism([], 1, 1)
    with pytest.raises(ConfigError):
        exponential_mechanism([1, float("nan")], 1, 1)
    with pytest.raises(ConfigError):
        exponential_mechanism([1, 2], 0, 1)
    with pytest.raises(ConfigError):
        exponential_mechanism([1, 2], 1, -1)
    with pytest.raises(ConfigError):  # numpy generators are never a privacy bit source
        exponential_mechanism([1, 2], 1, 1, rng=np.random.default_rng(0))
    assert exponential_mechanism([42], 1, 1) == 0
