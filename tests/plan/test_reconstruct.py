"""A plan's strategy answered by least squares: the engine's one implementation
(``dpsql.engine.variance.VarianceModel.least_squares``, factorised by
``dpsql.linalg.rowscaled.GramPinv``: numerics that do not depend on the BLAS kernel).

``dpsql.plan.reconstruct`` held a second one (``np.linalg.pinv`` per factor and LSQR on the
stacked blocks) that only these tests reached; it is gone (issue 36 item 4) and its tests run
on the engine's: noiseless measurements answer every supported query exactly, and for one
Kronecker block (where local and global least squares coincide) the planner's expected
variance is the estimator's reported one and its empirical one."""

import numpy as np
import pytest

from dpsql.engine.variance import SupportBlock, VarianceModel
from dpsql.plan import opt_kron, opt_marginals, opt_union, per_query_variance


def _measure(strategy, x, noise_sd, rng):
    """Each block's query on its marginal plus noise of sd noise_sd / weight (query units)."""
    blocks = []
    for blk in strategy.blocks:
        axes = tuple(i for i, a in enumerate(strategy.attributes) if a not in blk.clique)
        marginal = x.sum(axis=axes).reshape(-1)
        q = blk.query.dense()
        y = q @ marginal
        sd = (noise_sd if noise_sd else 1.0) / blk.weight
        if noise_sd:
            y = y + rng.normal(0, sd, y.shape)
        blocks.append(SupportBlock(tuple(blk.clique), (q,), sd, 1.0, y))
    return blocks


def _model(strategy, blocks):
    return VarianceModel(strategy.attributes, dict(zip(strategy.attributes, strategy.shape)), blocks)


@pytest.mark.parametrize("op", [opt_kron, opt_union, opt_marginals], ids=lambda f: f.__name__)
def test_noiseless_measurements_reconstruct_the_workload(workloads, op):
    W = workloads["range-union"]
    s = op(W, "gaussian")
    x = np.random.default_rng(1).integers(0, 9, size=W.domain.shape).astype(float)
    answers, _ = _model(s, _measure(s, x, 0.0, None)).least_squares(W.matrix)
    np.testing.assert_allclose(answers, W.matrix.dense() @ x.reshape(-1), atol=1e-6)


def test_empirical_error_matches_per_query_variance(workloads):
    W = workloads["prefix-kron"]
    s = opt_kron(W, "gaussian")
    assert len(s.blocks) == 1
    x = np.random.default_rng(3).integers(0, 9, size=W.domain.shape).astype(float)
    truth = W.matrix.dense() @ x.reshape(-1)
    rng = np.random.default_rng(4)
    # Unit-σ Gaussian per unit-sensitivity strategy: σ_block = σ / weight.
    sens = s.sensitivity(2)
    errs, reported = [], None
    for _ in range(400):
        answers, stderr = _model(s, _measure(s, x, sens, rng)).least_squares(W.matrix)
        errs.append(answers - truth)
        reported = stderr
    var = per_query_variance(W, s, "gaussian", epsilon=1.0, delta=1e-6)
    from dpsql.plan.calibration import analytic_gaussian_sigma
    unit = var / analytic_gaussian_sigma(1.0, 1e-6) ** 2
    np.testing.assert_allclose(reported ** 2, unit, rtol=1e-9)
    emp = np.var(np.asarray(errs), axis=0)
    # 400 draws: the sample variance is within ~±25 % of the truth for every query.
    np.testing.assert_allclose(emp, unit, rtol=0.3)
