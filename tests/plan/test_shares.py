"""The binning offsets' share as the planner sees it (plan/shares.py, issue 35 item 6).

A SUM over a binned column is its bin query (the strategy, at 1 − t of ρ) plus measured
offsets (at t): c/(1 − t) + o/t per row.  The planner judged its candidates by c ≤ b alone,
and chose a strategy that left no share t keeping every query within its baseline.
"""

from dataclasses import replace

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import Identity, Indicator, Kron, Total, Values
from dpsql.plan import QuerySpec, Workload, optimize, shares
from dpsql.plan.error import query_tse


def test_intervals_common_share_and_the_queries_above():
    # a count at 0.8 of its baseline (t ≤ 0.2) and a SUM between the roots of t² − 0.55·t + 0.05
    c, o, b = np.array([0.8, 0.5]), np.array([0.0, 0.05]), np.array([1.0, 1.0])
    ends = shares.intervals(c, o, b)
    assert ends[0] == (-np.inf, pytest.approx(0.2))
    assert ends[1] == (pytest.approx((0.55 - 0.1025 ** 0.5) / 2), pytest.approx((0.55 + 0.1025 ** 0.5) / 2))
    meet = shares.common(ends)
    assert meet is not None and meet[0] == pytest.approx(ends[1][0]) and meet[1] == pytest.approx(0.2)
    assert shares.above(c, o, b) == []
    # the count at 0.99 leaves t ≤ 0.01, where the SUM is at 0.5/0.99 + 5: the SUM is above
    assert shares.above(np.array([0.99, 0.5]), o, b) == [1]
    # the SUM's bin query at its baseline: no share keeps it, whatever the counts
    assert shares.above(np.array([0.5, 1.0]), o, b) == [1]


@pytest.mark.parametrize("need", [1e-7, 1e-3, 0.0018, 0.05, 0.3])
def test_tightened_baselines_keep_every_query_within_at_their_share(need):
    rng = np.random.default_rng(int(need * 1e7))
    b = rng.uniform(0.5, 3.0, 20)
    o = np.where(np.arange(20) % 4 == 0, need * b, 0.0)
    t, tight = shares.tightened(o, b)
    assert shares.LO <= t <= shares.HI and np.all(tight > 0)
    # any strategy below the tightened baselines keeps every query at t
    for c in (tight * (1 - 1e-6), tight * rng.uniform(0, 1, 20)):
        assert np.all(c / (1 - t) + o / t <= b * (1 + 1e-12))
        assert shares.above(c, o, b) == []
    # t maximises the least b'/b: a little off it, some query has less room
    for s in (t * 0.9, min(t * 1.1, shares.HI)):
        if s != t and s >= shares.LO:
            assert np.min((1 - s) * (b - o / s) / b) <= np.min(tight / b) + 1e-12


def _workload():
    D = Domain(["a", "b", "c"], [6, 4, 5])
    return Workload.of_queries(D, [
        QuerySpec("a", Kron([Identity(6), Total(4), Total(5)])),
        QuerySpec("b", Kron([Total(6), Identity(4), Total(5)])),
        QuerySpec("ab", Kron([Identity(6), Identity(4), Total(5)])),
        QuerySpec("a<3", Kron([Indicator(6, [0, 1, 2]), Total(4), Total(5)])),
        QuerySpec("b by c<2", Kron([Total(6), Identity(4), Indicator(5, [0, 1])])),
        QuerySpec("sum c by b", Kron([Total(6), Identity(4), Values(5, [1, 3, 5, 7, 9])]))])


def _above(strategy, parts):
    tse = query_tse(strategy)
    c = np.array([e / p.rows for e, p in zip(tse, parts)])
    return shares.above(c, np.array([p.offsets for p in parts]), np.array([p.baseline for p in parts]))


def test_the_planner_leaves_the_offsets_a_share_that_keeps_every_baseline():
    W = _workload()
    # the SUM's offsets at 3% of its baseline variance (adult's capital_gain: 0.18%)
    parts = tuple(replace(p, offsets=0.03 * p.baseline) if p.name.startswith("sum") else p for p in W.parts)
    W2 = Workload(W.domain, W.matrix, parts)
    plain = optimize(W, restarts=1)
    assert _above(plain, parts) == [5]            # the choice that knew nothing of them
    got = optimize(W2, restarts=1)
    assert _above(got, parts) == []
    assert got.operator != "per-query"
    assert "tightened" in got.explanation
    # its strategy's workload keeps the real baselines (the engine's report compares with them)
    assert [p.baseline for p in got.workload.parts] == [p.baseline for p in parts]
    # the price: a few % of the objective, not the per-query mechanism's
    per_query = optimize(W, restarts=1, operators=("per-query",))
    assert got.expected_error <= 1.15 * plain.expected_error < per_query.expected_error
    # no offsets, no change
    assert optimize(W, restarts=1).expected_error == plain.expected_error
