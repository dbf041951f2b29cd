import numpy as np
import pytest

from dpsql.linalg import AllRange, Identity, Kron, Prefix, Total, Union, Weighted
from dpsql.plan import Workload, expected_error, optimize, svd_bound
from dpsql.plan.svd_bound import gram_svd_bound


def test_theorem3_kron_bound_is_the_dense_bound(domain3):
    W = Workload(domain3, Union([Weighted(1.5, Kron([Prefix(4), AllRange(3), Identity(2)]))]))
    assert svd_bound(W) == pytest.approx(gram_svd_bound(W.terms.dense_gram()), rel=1e-9)


def test_definition12_on_a_bare_matrix():
    W = AllRange(32)
    s = np.linalg.svd(W.dense(), compute_uv=False)
    assert svd_bound(W) == pytest.approx(s.sum() ** 2 / 32, rel=1e-9)


@pytest.mark.parametrize("kind", ["marginals", "prefix-kron", "range-union"])
def test_bound_lies_below_every_strategy(workloads, kind):
    W = workloads[kind]
    bound = svd_bound(W)
    assert bound is not None
    for noise, factor in (("gaussian", 1.0), ("laplace", 2.0)):
        s = optimize(W, noise, restarts=1, seed=0, grid=None)
        assert bound * factor <= s.expected_error * (1 + 1e-9)
    assert bound <= expected_error(W, Kron([Identity(n) for n in W.domain.shape]), "gaussian")
