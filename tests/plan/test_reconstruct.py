import numpy as np
import pytest

from dpsql.plan import least_squares, opt_kron, opt_marginals, opt_union, per_query_variance
from dpsql.plan.reconstruct import LeastSquaresEstimate, kron_apply


def _measure(strategy, x, noise_sd, rng):
    values = []
    for blk in strategy.blocks:
        axes = tuple(i for i, a in enumerate(strategy.attributes) if a not in blk.clique)
        marginal = x.sum(axis=axes).reshape(-1)
        y = blk.query.dense() @ marginal
        values.append(y + (rng.normal(0, noise_sd / blk.weight, y.shape) if noise_sd else 0))
    return values, [noise_sd / blk.weight if noise_sd else 1.0 / blk.weight
                    for blk in strategy.blocks]


def test_kron_apply_is_the_kronecker_product():
    rng = np.random.default_rng(0)
    F = [rng.random((2, 3)), rng.random((4, 2))]
    x = rng.random(6)
    np.testing.assert_allclose(kron_apply(F, x), np.kron(F[0], F[1]) @ x)


@pytest.mark.parametrize("op", [opt_kron, opt_union, opt_marginals], ids=lambda f: f.__name__)
def test_noiseless_measurements_reconstruct_the_workload(workloads, op):
    W = workloads["range-union"]
    s = op(W, "gaussian")
    x = np.random.default_rng(1).integers(0, 9, size=W.domain.shape).astype(float)
    values, sds = _measure(s, x, 0.0, None)
    est = least_squares(s, values, sds)
    np.testing.assert_allclose(est.answer(W), W.matrix.dense() @ x.reshape(-1), atol=1e-6)


def test_local_least_squares_for_union_strategies(workloads):
    W = workloads["range-union"]
    s = opt_union(W, "gaussian")
    x = np.random.default_rng(2).integers(0, 9, size=W.domain.shape).astype(float)
    values, _ = _measure(s, x, 0.0, None)
    est = LeastSquaresEstimate(s, None, tuple(np.asarray(v) for v in values))
    np.testing.assert_allclose(est.answer(W), W.matrix.dense() @ x.reshape(-1), atol=1e-8)


def test_empirical_error_matches_per_query_variance(workloads):
    W = workloads["prefix-kron"]
    s = opt_kron(W, "gaussian")
    x = np.random.default_rng(3).integers(0, 9, size=W.domain.shape).astype(float)
    truth = W.matrix.dense() @ x.reshape(-1)
    rng = np.random.default_rng(4)
    # Unit-σ Gaussian per unit-sensitivity strategy: σ_block = σ / weight.
    sens = s.sensitivity(2)
    errs = []
    for _ in range(400):
        values, sds = _measure(s, x, sens, rng)
        errs.append(least_squares(s, values, sds).answer(W) - truth)
    var = per_query_variance(W, s, "gaussian", epsilon=1.0, delta=1e-6)
    from dpsql.plan.calibration import analytic_gaussian_sigma
    unit = var / analytic_gaussian_sigma(1.0, 1e-6) ** 2
    emp = np.var(np.asarray(errs), axis=0)
    # 400 draws: the sample variance is within ~±25 % of the truth for every query.
    np.testing.assert_allclose(emp, unit, rtol=0.3)
