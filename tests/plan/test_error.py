import numpy as np
import pytest

from dpsql.linalg import AllRange, Explicit, Identity, Kron, Prefix, Total, Union, Weighted
from dpsql.plan import expected_error, per_query_variance, rmse
from dpsql.plan.calibration import analytic_gaussian_sigma

from plan_oracles import dense_tse


def _random_kron(shape, rng):
    return Kron([Explicit(rng.random((n + 1, n)) + np.eye(n + 1, n)) for n in shape])


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("kind", ["marginals", "prefix-kron", "range-union"])
def test_kron_strategy_matches_dense_formula(workloads, kind, noise):
    W = workloads[kind]
    A = _random_kron(W.domain.shape, np.random.default_rng(1))
    assert expected_error(W, A, noise) == pytest.approx(
        dense_tse(W.matrix.dense(), A.dense(), noise), rel=1e-9)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("kind", ["marginals", "prefix-kron", "range-union"])
def test_marginal_strategy_matches_dense_formula(workloads, kind, noise):
    W = workloads[kind]
    n = W.domain.shape
    blocks = [Weighted(0.3, Kron([Identity(n[0]), Identity(n[1]), Total(n[2])])),
              Weighted(0.7, Kron([Total(n[0]), Identity(n[1]), Identity(n[2])])),
              Weighted(0.2, Kron([Identity(n[0]), Total(n[1]), Identity(n[2])]))]
    A = Union(blocks)
    assert expected_error(W, A, noise) == pytest.approx(
        dense_tse(W.matrix.dense(), A.dense(), noise), rel=1e-9)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_general_union_matches_dense_formula(workloads, noise):
    W = workloads["range-union"]
    rng = np.random.default_rng(2)
    A = Union([Weighted(0.5, _random_kron(W.domain.shape, rng)),
               Weighted(1.5, _random_kron(W.domain.shape, rng))])
    assert expected_error(W, A, noise) == pytest.approx(
        dense_tse(W.matrix.dense(), A.dense(), noise), rel=1e-8)


def test_unsupported_strategy_has_infinite_error(workloads):
    W = workloads["prefix-kron"]
    A = Kron([Total(4), Identity(3), Total(2)])       # cannot answer prefixes over a
    assert expected_error(W, A, "gaussian") == np.inf


def test_one_dimensional_structured_workloads():
    for Wm in (Prefix(16), AllRange(16)):
        A = Explicit(np.tril(np.ones((16, 16))) + np.eye(16))
        for noise in ("laplace", "gaussian"):
            assert expected_error(Wm, A, noise) == pytest.approx(
                dense_tse(Wm.dense(), A.dense(), noise), rel=1e-9)


def test_rmse_conventions():
    W = Prefix(8)
    A = Identity(8)
    tse = expected_error(W, A, "laplace")
    assert rmse(W, A, "laplace", epsilon=2.0) == pytest.approx(np.sqrt(tse / 4 / 8))
    g = expected_error(W, A, "gaussian")
    s = analytic_gaussian_sigma(1.0, 1e-6)
    assert rmse(W, A, "gaussian", 1.0, 1e-6) == pytest.approx(np.sqrt(g * s * s / 8))


def _kron_strategy(shape):
    return _random_kron(shape, np.random.default_rng(3))


def _union_strategy(shape):
    # the union path's stacked rows (error._dense_union, shared with the dense traces)
    rng = np.random.default_rng(2)
    return Union([Weighted(0.5, _random_kron(shape, rng)), Weighted(1.5, _random_kron(shape, rng))])


@pytest.mark.parametrize("strategy", [_kron_strategy, _union_strategy])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_per_query_variance_matches_dense(workloads, noise, strategy):
    W = workloads["range-union"]
    A = strategy(W.domain.shape)
    var = per_query_variance(W, A, noise, epsilon=1.0, delta=1e-6)
    Wd, Ad = W.matrix.dense(), A.dense()
    if noise == "laplace":
        scale = 2.0 * np.abs(Ad).sum(axis=0).max() ** 2
    else:
        scale = analytic_gaussian_sigma(1.0, 1e-6) ** 2 * (Ad * Ad).sum(axis=0).max()
    np.testing.assert_allclose(var, scale * np.diag(Wd @ np.linalg.pinv(Ad.T @ Ad) @ Wd.T), rtol=1e-8)
