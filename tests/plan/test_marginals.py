import itertools

import numpy as np
import pytest
from scipy.optimize import check_grad

from dpsql.domain import Domain
from dpsql.linalg import Identity, Kron, Marginals, Prefix, Total, Union, Weighted
from dpsql.plan import Workload, expected_error, svd_bound
from dpsql.plan.marginals import (
    MarginalSpace, closed_form, marginal_loss_grad, marginal_svd_bound, workload_kappa,
)
from dpsql.plan.svd_bound import gram_svd_bound


def _space(W):
    T = W.terms
    return MarginalSpace.of(T.shape, [t.support for t in T.terms]), T


def test_eigenvalues_match_dense_spectrum(workloads):
    # Theorem 7: κ_w(a) with multiplicity Π_{i∈a}(n_i − 1) is the whole spectrum of WᵀW
    # for a marginal workload.
    W = workloads["marginals"]
    space, T = _space(W)
    kw = workload_kappa(space, T)
    mult = space.mult().astype(int)
    predicted = np.sort(np.concatenate([np.full(m, k) for k, m in zip(kw, mult)]
                                       + [np.zeros(T.size - mult.sum())]))
    np.testing.assert_allclose(predicted, np.linalg.eigvalsh(T.dense_gram()), atol=1e-9)


def test_theorem10_svd_bound_matches_dense(workloads):
    W = workloads["marginals"]
    # Dense square roots of the zero eigenvalues add ~1e-8 of rounding noise.
    assert svd_bound(W) == pytest.approx(gram_svd_bound(W.terms.dense_gram()), rel=1e-6)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_loss_gradient_matches_finite_differences(workloads, noise):
    space, T = _space(workloads["range-union"])
    kw = workload_kappa(space, T)
    Y, mult = space.Y(), space.mult()
    theta = np.random.default_rng(0).random(space.size) + 0.5
    f = lambda t: marginal_loss_grad(t, kw, Y, mult, noise)[0]   # noqa: E731
    g = lambda t: marginal_loss_grad(t, kw, Y, mult, noise)[1]   # noqa: E731
    assert check_grad(f, g, theta) < 1e-6 * np.linalg.norm(g(theta))


def test_closed_form_attains_svd_bound_for_all_marginals():
    # Theorem 11 on the CPS-like workload of all 2^d marginals (real θ exists).
    D = Domain(["a", "b", "c"], [5, 3, 2])
    cliques = [c for k in range(4) for c in itertools.combinations(D.attributes, k)]
    W = Workload(D, Marginals(D, cliques))
    space, T = _space(W)
    kw = workload_kappa(space, T)
    theta = closed_form(space, kw)
    loss = marginal_loss_grad(theta, kw, space.Y(), space.mult(), "gaussian")[0]
    assert loss == pytest.approx(marginal_svd_bound(space, kw), rel=1e-9)
    A = Union([Weighted(th, Kron([Identity(n) if i in s else Total(n)
                                  for i, n in enumerate(D.shape)]))
               for s, th in zip(space.subsets, theta) if th > 0])
    assert expected_error(W, A, "gaussian") == pytest.approx(loss, rel=1e-9)


def test_downward_closure_keeps_parameters_small():
    sizes = {f"x{i}": 3 for i in range(15)}
    D = Domain.from_sizes(sizes)
    cliques = [c for k in range(4) for c in itertools.combinations(D.attributes, k)]
    W = Workload(D, Marginals(D, cliques))
    space, _ = _space(W)
    assert space.size == 1 + 15 + 105 + 455          # not 2^15


def test_prefix_marginals_use_the_projection():
    D = Domain(["a", "b"], [6, 3])
    W = Workload(D, Union([Weighted(1.0, Kron([Prefix(6), Identity(3)])),
                           Weighted(1.0, Kron([Prefix(6), Total(3)]))]))
    space, T = _space(W)
    kw = workload_kappa(space, T)
    # Theorem 8: the I/1 projection preserves tr[G(u) WᵀW] for every marginal gram G(u).
    u = np.random.default_rng(4).random(space.size)
    Gu = sum(uk * np.kron(*(np.eye(n) if i in s else np.ones((n, n))
                            for i, n in enumerate(D.shape)))
             for uk, s in zip(u, space.subsets))
    lhs = float(np.sum(Gu * T.dense_gram()))
    rhs = float(np.sum(space.mult() * kw * (space.Y() @ u)))
    assert lhs == pytest.approx(rhs, rel=1e-10)
