import sys

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


def test_lower_bound_is_the_full_bound_when_computable(workloads):
    from dpsql.plan import svd_lower_bound

    for W in workloads.values():
        bound, exact = svd_lower_bound(W)
        assert exact and bound == pytest.approx(svd_bound(W), rel=1e-12)


def test_partial_lower_bound_lies_between_the_marginal_terms_and_every_strategy(monkeypatch, domain3):
    """Mixed workload (ranges + marginals) whose full SVDB we pretend is not computable:
    the marginal-only bound must stay below the true dense SVDB and below OPT_HDMM."""
    sb = sys.modules["dpsql.plan.svd_bound"]   # the package re-exports a function of that name
    from dpsql.plan import svd_lower_bound

    W = Workload(domain3, Union([
        Weighted(1.0, Kron([AllRange(4), Total(3), Identity(2)])),
        Weighted(2.0, Kron([Identity(4), Identity(3), Total(2)])),
        Weighted(1.0, Kron([Total(4), Identity(3), Identity(2)]))]))
    true_bound = gram_svd_bound(W.terms.dense_gram())
    marg = Workload(domain3, Union([
        Weighted(2.0, Kron([Identity(4), Identity(3), Total(2)])),
        Weighted(1.0, Kron([Total(4), Identity(3), Identity(2)]))]))
    monkeypatch.setattr(sb, "_DENSE_LIMIT", 0)
    bound, exact = svd_lower_bound(W)
    assert not exact
    # (dense eigenvalues near 0 lose digits under the square root, hence 1e-6)
    assert bound == pytest.approx(gram_svd_bound(marg.terms.dense_gram()), rel=1e-6)
    assert bound < true_bound            # the range term adds error no strategy avoids
    s = optimize(W, "gaussian", restarts=1, seed=0, grid=None)
    assert bound <= s.expected_error


def test_no_lower_bound_without_marginal_terms(monkeypatch, domain3):
    sb = sys.modules["dpsql.plan.svd_bound"]   # the package re-exports a function of that name
    from dpsql.plan import svd_lower_bound

    W = Workload(domain3, Union([Weighted(1.0, Kron([AllRange(4), Prefix(3), Identity(2)])),
                                 Weighted(1.0, Kron([Prefix(4), AllRange(3), Total(2)]))]))
    monkeypatch.setattr(sb, "_DENSE_LIMIT", 0)
    assert svd_lower_bound(W) is None
