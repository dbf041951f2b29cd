import itertools

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError
from dpsql.linalg import Identity, Kron, Marginals, Prefix, Total, Union, Weighted
from dpsql.plan import (
    Caps, StrategyCache, Workload, expected_error, opt_0, opt_kron, opt_marginals, opt_union,
    optimize,
)

from plan_oracles import dense_tse, supports

OPERATORS = [opt_kron, opt_union, opt_marginals]


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("op", OPERATORS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", ["marginals", "prefix-kron", "range-union"])
def test_every_operator_supports_its_workload(workloads, kind, op, noise):
    W = workloads[kind]
    s = op(W, noise, restarts=1, seed=0)
    Wd, A = W.matrix.dense(), s.dense()
    assert supports(Wd, A)
    # Union strategies on this small domain are evaluated exactly (global least squares).
    assert s.expected_error == pytest.approx(dense_tse(Wd, A, noise), rel=1e-7)
    assert expected_error(W, s.matrix, noise) == pytest.approx(s.expected_error, rel=1e-7)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_opt0_on_a_one_dimensional_workload(noise):
    s = opt_0(Prefix(32), noise, restarts=2, seed=1)
    assert supports(Prefix(32).dense(), s.dense())
    assert s.expected_error < expected_error(Prefix(32), Identity(32), noise)


def test_optimize_is_deterministic_for_a_seed(workloads):
    W = workloads["range-union"]
    a = optimize(W, "laplace", restarts=2, seed=7)
    b = optimize(W, "laplace", restarts=2, seed=7)
    assert a.operator == b.operator and a.expected_error == b.expected_error
    np.testing.assert_array_equal(a.dense(), b.dense())


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_blocks_reproduce_the_strategy_on_marginals(workloads, noise):
    W = workloads["range-union"]
    s = optimize(W, noise, restarts=1, seed=0)
    x = np.random.default_rng(0).integers(0, 5, size=W.domain.shape).astype(float)
    rows = []
    for blk in s.blocks:
        axes = tuple(i for i, a in enumerate(W.domain.attributes) if a not in blk.clique)
        marginal = x.sum(axis=axes).reshape(-1)
        q = blk.query.dense()
        assert np.allclose(q / blk.grid, np.round(q / blk.grid))     # values on a lattice
        rows.append(blk.weight * (q @ marginal))
    np.testing.assert_allclose(np.concatenate(rows), s.dense() @ x.reshape(-1), atol=1e-9)


def test_rounding_recomputes_the_error(workloads):
    W = workloads["prefix-kron"]
    exact = opt_kron(W, "gaussian")
    coarse = exact.rounded(2.0 ** -3)
    assert coarse.expected_error == pytest.approx(
        dense_tse(W.matrix.dense(), coarse.dense(), "gaussian"), rel=1e-7)
    assert coarse.expected_error != exact.expected_error


def test_caps_restructure_high_dimensional_workloads():
    D = Domain.from_sizes({f"x{i}": 4 for i in range(12)})
    cliques = list(itertools.combinations(D.attributes, 2))
    W = Workload(D, Marginals(D, cliques))
    s = optimize(W, "gaussian", restarts=1, seed=0)
    assert s.operator in ("OPT_M", "OPT_+")
    assert "OPT_kron skipped" in s.explanation
    assert max(len(c) for c in s.cliques) <= 2
    # A junction tree over the cap is flagged, not refused; a marginal over the cap is.
    flagged = optimize(W, "gaussian", restarts=1, caps=Caps(model_size=100))
    assert "approximate (region-graph) inference" in flagged.explanation
    with pytest.raises(ModelTooLargeError):
        optimize(W, "gaussian", caps=Caps(marginal_cells=8))


def test_progress_and_cache(tmp_path, workloads):
    W = workloads["marginals"]
    calls = []
    cache = StrategyCache(tmp_path)
    s = optimize(W, "gaussian", restarts=1, seed=0, cache=cache,
                 progress=lambda op, it, err: calls.append((op, it, err)))
    assert calls and all(isinstance(c[1], int) for c in calls)
    assert list(tmp_path.glob("*.npz")) and list(tmp_path.glob("*.json"))
    again = optimize(W, "gaussian", restarts=1, seed=0, cache=cache,
                     progress=lambda *a: pytest.fail("cache hit must not optimise"))
    assert again.operator == s.operator and again.expected_error == s.expected_error
    np.testing.assert_array_equal(again.dense(), s.dense())
    other = optimize(W, "laplace", restarts=1, seed=0, cache=cache)   # different key
    assert other.noise == "laplace"


def test_bare_one_dimensional_matrix_and_structured_view():
    from dpsql.linalg import AllRange

    s = optimize(AllRange(24), "gaussian", restarts=1, seed=0)
    assert s.operator == "OPT_0" and s.attributes == ("x",)
    np.testing.assert_allclose(s.matrix.dense(), s.dense())
    assert s.sensitivity(2) == pytest.approx(np.sqrt((s.dense() ** 2).sum(axis=0).max()))
    assert s.expected_error == pytest.approx(dense_tse(AllRange(24).dense(), s.dense(),
                                                       "gaussian"), rel=1e-7)


def test_dense_optimiser_cap_is_explained(workloads):
    W = workloads["range-union"]
    s = optimize(W, "gaussian", restarts=1, caps=Caps(opt0_cells=3))
    assert s.operator == "OPT_M"
    assert "dense OPT_0 cap" in s.explanation
