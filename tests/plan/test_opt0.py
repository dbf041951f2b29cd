import numpy as np
import pytest
from scipy.optimize import check_grad

from dpsql.linalg import AllRange, Prefix, WidthRange
from dpsql.plan.opt0 import (
    _dual_eval, factor_loss, gaussian_dual, gaussian_primal_loss, opt0, pidentity,
    pidentity_loss,
)
from dpsql.plan.svd_bound import gram_svd_bound


def _gram(M):
    return M.gram().dense()


def test_pidentity_gradient_matches_finite_differences():
    V = _gram(AllRange(12))
    x = np.random.default_rng(0).random(3 * 12)
    f = lambda t: pidentity_loss(t, V, 3)[0]          # noqa: E731
    g = lambda t: pidentity_loss(t, V, 3)[1]          # noqa: E731
    assert check_grad(f, g, x) < 1e-5 * np.linalg.norm(g(x))


def test_pidentity_loss_is_the_matrix_mechanism_loss():
    V = _gram(Prefix(10))
    T = np.random.default_rng(1).random((2, 10))
    s = 1 + T.sum(axis=0)
    A = np.vstack([np.eye(10), T]) / s
    assert pidentity_loss(T.ravel(), V, 2)[0] == pytest.approx(factor_loss(V, A, 1), rel=1e-10)


def test_gaussian_primal_gradient_matches_finite_differences():
    V = _gram(Prefix(8))
    rng = np.random.default_rng(2)
    n = 8
    il = np.tril_indices(n, -1)
    v = 0.1 * rng.standard_normal(len(il[0]))
    f = lambda t: gaussian_primal_loss(t, V)[0]       # noqa: E731
    g = lambda t: gaussian_primal_loss(t, V)[1]       # noqa: E731
    assert check_grad(f, g, v) < 1e-5 * np.linalg.norm(g(v))


def test_dual_gradient_is_diag_minus_one():
    # d/dη of 2 tr((Λ^½VΛ^½)^½) − 1ᵀλ at λ = e^η equals λ ∘ (diag X(λ) − 1) (Danskin).
    V = _gram(AllRange(9))
    eta = np.random.default_rng(3).normal(size=9) * 0.3

    def dual(e):
        lam = np.exp(e)
        return 2 * _dual_eval(V, lam)[1] - lam.sum()

    def grad(e):
        lam = np.exp(e)
        return lam * (_dual_eval(V, lam)[0] - 1)

    assert check_grad(dual, grad, eta) < 1e-5 * max(np.linalg.norm(grad(eta)), 1.0)


@pytest.mark.parametrize("W", [AllRange(64), Prefix(64), WidthRange(64, 8)])
def test_gaussian_dual_reaches_the_svd_bound(W):
    V = _gram(W)
    res = gaussian_dual(V)
    # The reported loss is the loss of the returned matrix, which supports W ...
    assert res.loss == pytest.approx(factor_loss(V, res.matrix, 2), rel=1e-8)
    # ... is certified optimal by the dual bound (duality gap below 0.1 %) ...
    assert res.lower_bound <= res.loss <= 1.001 * res.lower_bound
    # ... and the SVD bound lies below the optimum, within the thesis' gap (table 3.3:
    # RMSE ratio 1.011 for ALL RANGE, 1.029 for PREFIX at n = 64).
    assert gram_svd_bound(V) <= res.lower_bound * (1 + 1e-9)
    assert res.loss <= 1.035 ** 2 * gram_svd_bound(V)


def test_gaussian_dual_handles_unqueried_cells_and_rank_one():
    V = np.zeros((5, 5))
    V[:3, :3] = _gram(Prefix(3))
    res = gaussian_dual(V)
    assert np.all(res.matrix[:, 3:] == 0)
    assert res.loss == pytest.approx(factor_loss(V, res.matrix, 2), rel=1e-8)
    ones = opt0(np.ones((6, 6)), "gaussian")
    assert ones.method == "total" and ones.loss == pytest.approx(1.0)


def test_pidentity_beats_identity_and_supports():
    V = _gram(AllRange(64))
    res = pidentity(V, 4, np.random.default_rng(0))
    assert res.loss == pytest.approx(factor_loss(V, res.matrix, 1), rel=1e-8)
    best = opt0(V, "laplace", restarts=3, rng=np.random.default_rng(0))
    assert best.loss <= np.trace(V)           # never worse than Identity
    assert best.loss < 0.8 * np.trace(V)      # and p-Identity finds a real improvement


def test_semiseparable_product_matches_dense():
    from dpsql.plan.opt0 import semiseparable_right

    for W in (AllRange(40), Prefix(40)):
        G = W.gram()
        T = np.random.default_rng(5).random((3, 40))
        np.testing.assert_allclose(semiseparable_right(G.a, G.b)(T), T @ G.dense(), rtol=1e-12)
        x = T.ravel()
        dense = pidentity_loss(x, G.dense(), 3)
        fast = pidentity_loss(x, G.dense(), 3, semiseparable_right(G.a, G.b))
        assert fast[0] == pytest.approx(dense[0], rel=1e-12)
        np.testing.assert_allclose(fast[1], dense[1], rtol=1e-9, atol=1e-12)


def test_projected_lbfgs_solves_a_nonnegative_least_squares_problem():
    """NNLS min ½‖Mx − b‖² over x ≥ 0 against scipy's active-set NNLS (exact optimum)."""
    from scipy.optimize import nnls

    from dpsql.plan.opt0 import projected_lbfgs

    rng = np.random.default_rng(3)
    M = rng.standard_normal((60, 25))
    b = rng.standard_normal(60)
    ref, _ = nnls(M, b)
    assert 0 < np.count_nonzero(ref) < 25          # some bounds active, some not

    def fun(x):
        r = M @ x - b
        return 0.5 * float(r @ r), M.T @ r

    x, f, it = projected_lbfgs(fun, np.ones(25), ftol=1e-14, maxiter=5000)
    assert x.min() >= 0.0
    assert f == pytest.approx(fun(ref)[0], rel=1e-9)
    np.testing.assert_allclose(x, ref, atol=1e-5)


def test_projected_lbfgs_reports_progress_monotonically():
    from dpsql.plan.opt0 import projected_lbfgs

    V = _gram(Prefix(48))
    seen = []
    x, f, it = projected_lbfgs(lambda t: pidentity_loss(t, V, 3),
                               np.random.default_rng(1).random(3 * 48),
                               callback=lambda i, loss: seen.append(loss))
    assert len(seen) == it and seen[-1] == f
    assert all(b <= a for a, b in zip(seen, seen[1:]))   # Armijo: never an increase
