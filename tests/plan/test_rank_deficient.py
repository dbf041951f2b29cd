"""Rank-deficient workloads (issue 16): fewer independent queries than cells.

Window ranges, a few BETWEENs and SUM value rows have grams of low rank.  Gaussian OPT_0's
optimum then lies on the boundary of the PSD cone, and a strategy with exactly the
workload's row space loses support once rounded to the measurement grid: before the fix
every such candidate was reported with an infinite error.  Each test below failed then.
"""

import math

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import (
    Explicit, Identity, Indicator, Kron, Prefix, Total, Union, Values, Weighted, WidthRange,
)
from dpsql.plan import Workload, opt_kron, opt_union, optimize, round_strategy
from dpsql.plan.gram import FactorPinv, column_classes
from dpsql.plan.operators import opt_marginals_plus
from dpsql.plan.planner import DEFAULT_GRID

from plan_oracles import dense_tse, supports


def _between(n, lo, hi):
    return Indicator(n, np.arange(lo, hi + 1))


def _random_1d(rng, n):
    """A random rank-deficient 1-D workload: windows, BETWEENs and value rows."""
    parts = []
    kinds = rng.choice(["window", "between", "values"], size=rng.integers(1, 4))
    for kind in kinds:
        if kind == "window":
            parts.append(WidthRange(n, int(rng.integers(n // 4, n // 2))))
        elif kind == "between":
            for _ in range(int(rng.integers(1, 4))):
                lo = int(rng.integers(0, n - 1))
                parts.append(_between(n, lo, int(rng.integers(lo, n))))
        else:
            parts.append(Values(n, rng.integers(0, 50, size=n).astype(float)))
    rows = np.vstack([np.asarray(p.dense()) for p in parts])
    assert np.linalg.matrix_rank(rows) < n
    return Explicit(rows)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("seed", range(6))
def test_random_rank_deficient_1d_workloads_get_finite_exact_errors(noise, seed):
    rng = np.random.default_rng(seed)
    W = _random_1d(rng, int(rng.choice([16, 24, 40])))
    s = optimize(W, noise=noise, restarts=1, seed=seed)          # rounded to the grid
    assert math.isfinite(s.expected_error)
    Wd, A = np.asarray(W.dense()), s.dense()
    assert supports(Wd, A)
    assert s.expected_error == pytest.approx(dense_tse(Wd, A, noise), rel=1e-6)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_window_ranges_reproduced_from_the_issue(noise):
    for n, w in ((64, 32), (256, 8), (256, 50)):
        s = optimize(WidthRange(n, w), noise=noise, restarts=1)
        assert math.isfinite(s.expected_error)
        # Never worse than measuring the cells (the identity strategy).
        ident = (2.0 if noise == "laplace" else 1.0) * np.trace(np.asarray(WidthRange(n, w).gram().dense()))
        assert s.expected_error <= ident * (1 + 1e-9)


def _mixed_workload():
    """A BETWEEN, a SUM's value row and a GROUP BY over a 3-attribute domain."""
    D = Domain(["age", "hours", "sex"], [12, 10, 2])
    hours = Values(10, np.arange(10, dtype=float) * 7.0 + 3.0)
    return Workload(D, Union([
        Weighted(1.0, Kron([_between(12, 3, 7), Total(10), Identity(2)])),
        Weighted(1.0, Kron([Total(12), hours, Identity(2)])),
        Weighted(1.0, Kron([Identity(12), Total(10), Total(2)])),
        Weighted(1.0, Kron([WidthRange(12, 4), Total(10), Total(2)])),
    ]))


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("op", ["OPT_kron", "OPT_+", "OPT_M+"])
def test_every_operator_is_finite_on_rank_deficient_factors(noise, op):
    W = _mixed_workload()
    run = {"OPT_kron": opt_kron, "OPT_+": opt_union, "OPT_M+": opt_marginals_plus}[op]
    s = round_strategy(run(W, noise, restarts=1, seed=0), DEFAULT_GRID)
    assert math.isfinite(s.expected_error), s.explanation
    Wd, A = W.matrix.dense(), s.dense()
    assert supports(Wd, A)
    if op != "OPT_M+":      # OPT_M+ reports local least squares for its filtered terms
        assert s.expected_error == pytest.approx(dense_tse(Wd, A, noise), rel=1e-6)
    else:
        assert s.expected_error >= dense_tse(Wd, A, noise) * (1 - 1e-6)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_optimize_keeps_every_operator_on_a_mixed_workload(noise):
    s = optimize(_mixed_workload(), noise=noise, restarts=1)
    assert "inf" not in s.explanation
    for op in ("OPT_kron", "OPT_+", "OPT_M+"):
        assert f"{op}: expected error" in s.explanation


def test_one_between_on_a_large_attribute_is_a_one_cell_problem():
    """Cells the workload cannot tell apart collapse: the optimum measures the range."""
    n = 3000
    W = _between(n, 100, 2599)
    for noise in ("laplace", "gaussian"):
        s = optimize(W, noise=noise, restarts=1)
        (F,) = s.kron_blocks[0].factors
        assert F.shape[0] == 1
        assert np.array_equal(F[0] != 0, np.asarray(W.dense())[0] != 0)
        assert s.expected_error == pytest.approx(2.0 if noise == "laplace" else 1.0)


def test_column_classes_and_class_pinv_match_dense():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(5, 4))
    F = A[:, [0, 1, 1, 2, 3, 3, 3]]
    F = np.hstack([F, np.zeros((5, 2))])
    labels, reps = column_classes(F.T)
    assert labels.tolist() == [0, 1, 1, 2, 3, 3, 3, -1, -1]
    P = FactorPinv.of(F)
    assert not P.trivial
    np.testing.assert_allclose(P.dense(), np.linalg.pinv(F.T @ F), atol=1e-10)
    V = (F.T @ F) + np.outer(F[0], F[0])
    assert P.trace(V) == pytest.approx(np.trace(V @ np.linalg.pinv(F.T @ F)), rel=1e-10)
    bad = np.eye(9)
    assert P.trace(bad) == math.inf
    # Rank-deficient distinct columns go through the SVD path.
    G = np.hstack([F[:, :4], F[:, :1] + F[:, 3:4]])
    Q = FactorPinv.of(G)
    np.testing.assert_allclose(Q.dense(), np.linalg.pinv(G.T @ G), atol=1e-8)
    W = Prefix(5).dense()
    assert Q.trace(W.T @ W) == math.inf


@pytest.mark.parametrize("mids", [[2499.5 + 5000 * i for i in range(20)] + [102475.0],
                                  [2500.0 + 5000 * i for i in range(20)] + [102475.0]])
@pytest.mark.parametrize("scale", [1.0, 1 / 102475.0])
def test_a_sum_over_bins_cut_at_hi_keeps_its_value_row(mids, scale):
    """A price column lo = 0, hi = 104,950 in integer bins of 5,000: the midpoints are
    2,499.5, 7,499.5, …, 97,499.5 and, the last bin cut at hi, 102,475 (also with a
    numeric-style 2,500 … 97,500).  The value row (as the per-query mechanism measures a
    SUM, or OPT_0 on its rank-one gram, scaled) is no multiple of an integer row with a
    multiplier up to 64 and entries up to 2¹⁶: rounding put it on the planner's grid and
    tilted it out of its span, and the SUM was unsupported by the strategy planned for it
    (the TPC-H template bench: the per-query mechanism "does not support" the SUMs of
    prices)."""
    from dpsql.plan.strategy import KronBlock, round_blocks

    mids = np.array(mids)
    (block,) = round_blocks([KronBlock(1.0, (scale * mids[None, :], np.eye(3)))], DEFAULT_GRID)
    row = block.factors[0]
    assert row.shape == (1, 21) and np.allclose(row[0] / row[0, 0], mids / mids[0], rtol=0, atol=1e-12)
