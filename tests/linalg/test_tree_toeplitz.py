"""Implicit tree and Toeplitz strategies (issue 35) against dense brute force on small n."""

import numpy as np
import pytest

from dpsql.linalg import AllRange, Prefix, Suffix
from dpsql.linalg.toeplitz import (LowerToeplitz, exact_convolve, series_inverse,
                                   sqrt_prefix_coefficients)
from dpsql.linalg.tree import Tree, semiseparable_norms


def _padded(tree: Tree, weights) -> np.ndarray:
    """The tree over all N padded cells, built from Kronecker products of ones."""
    return np.vstack([w * np.kron(np.eye(tree.nodes[lv]), np.ones((1, tree.sizes[lv])))
                      for lv, w in enumerate(weights)])


@pytest.mark.parametrize("n, radices", [(23, (3, 3, 3)), (16, (2, 2, 2, 2)), (30, (4, 8)),
                                        (7, (7,))])
def test_tree_implicit_equals_dense(n, radices):
    t = Tree(n, radices)
    w = np.linspace(0.5, 2.0, t.levels)
    A = _padded(t, w)
    assert np.array_equal(t.matrix(w).dense(), A[:, :n])
    x = np.random.default_rng(0).integers(0, 50, n)
    sums = t.sums(x)
    assert all(s.dtype == x.dtype for s in sums)          # exact integer level sums
    assert np.array_equal(np.concatenate([w[lv] * s for lv, s in enumerate(sums)]),
                          A[:, :n] @ x)


@pytest.mark.parametrize("n, radices", [(23, (3, 3, 3)), (30, (4, 8)), (16, (2, 2, 2, 2))])
def test_tree_least_squares_and_variances_equal_dense(n, radices):
    rng = np.random.default_rng(1)
    t = Tree(n, radices)
    w = rng.uniform(0.3, 2.0, t.levels)
    v = 1.0 / w ** 2                       # unit noise on each weighted row
    A = _padded(t, w)
    ys = [s + rng.normal(size=s.shape) for s in t.sums(rng.integers(0, 9, n))]
    y = np.concatenate([w[lv] * ys[lv] for lv in range(t.levels)])
    ref = np.linalg.lstsq(A, y, rcond=None)[0]
    assert np.allclose(t.solve(ys, v), ref, atol=1e-10)
    G = np.linalg.inv(A.T @ A)
    Q = np.vstack([Prefix(n).dense(), AllRange(n).dense(), rng.normal(size=(3, n))])
    Qp = np.pad(Q, ((0, 0), (0, t.N - n)))
    want = np.einsum("ij,jk,ik->i", Qp, G, Qp)
    assert np.allclose(t.variance(t.norms(Q), v), want, rtol=1e-10)
    assert np.allclose(t.prefix_norms(np.arange(n)), t.norms(Prefix(n).dense()), rtol=1e-12)
    # a level not measured: its eigen-directions still covered by the levels below
    v2 = list(v)
    v2[0] = np.inf
    A2 = _padded(t, [0.0] + list(w[1:]))
    assert np.allclose(t.variance(t.norms(Q), v2),
                       np.einsum("ij,jk,ik->i", Qp, np.linalg.pinv(A2.T @ A2), Qp), rtol=1e-8)


@pytest.mark.parametrize("leaf", [Prefix, Suffix, AllRange])
def test_semiseparable_level_traces_equal_row_sums(leaf):
    n = 29
    t = Tree(n, (2, 4, 4))
    g = leaf(n).gram()
    assert np.allclose(semiseparable_norms(t, g.a, g.b), t.norms(leaf(n).dense()).sum(axis=0),
                       rtol=1e-12)


def test_toeplitz_square_root_of_the_prefix_matrix():
    n = 40
    M = LowerToeplitz(sqrt_prefix_coefficients(n))
    D = M.dense()
    assert np.allclose(D @ D, Prefix(n).dense(), atol=1e-12)
    X = np.random.default_rng(2).normal(size=(n, 3))
    assert np.allclose(M.matmat(X), D @ X) and np.allclose(M.rmatmat(X), D.T @ X)
    assert np.allclose(M.column_norms(2), np.linalg.norm(D, axis=0))
    assert M.sensitivity(1) == pytest.approx(np.abs(D).sum(axis=0).max())
    assert np.allclose(LowerToeplitz(series_inverse(M.a, n)).dense(), np.linalg.inv(D), atol=1e-10)


def test_exact_convolution_matches_python_integers():
    rng = np.random.default_rng(3)
    n = 5000
    a = rng.integers(0, 1 << 16, n)
    x = rng.integers(0, 1 << 24, n)
    y = exact_convolve(a, x, n, bound=int(x.sum()))
    for i in (0, 1, 17, 2500, n - 1):
        assert int(y[i]) == sum(int(a[k]) * int(x[i - k]) for k in range(i + 1))
    with pytest.raises(ArithmeticError):
        exact_convolve(np.full(10, 1 << 40), np.full(10, 1 << 30), 10, bound=10 << 30)


def test_exact_convolution_refuses_by_the_public_bound_alone():
    """Review of issue 35: the overflow refusal read the counts' total (a refusal that
    depended on the data).  It depends on the coefficients and the declared bound only:
    zero counts are refused under a bound that could overflow, and counts beyond the bound
    saturate instead of being refused."""
    a = np.full(8, 1 << 16, dtype=np.int64)
    with pytest.raises(ArithmeticError):
        exact_convolve(a, np.zeros(8, dtype=np.int64), 8, bound=1 << 46)
    big = np.full(8, 1 << 47, dtype=np.int64)          # a total far above 2^62 / 2^16
    y = exact_convolve(a, big, 8, bound=1000)
    assert y.dtype == np.int64 and np.all(y >= 0)
    # clipped to the bound per count, then exact: 2^16 · 1000 · (i + 1)
    assert [int(v) for v in y] == [(1 << 16) * 1000 * (i + 1) for i in range(8)]


def test_exact_convolution_saturates_instead_of_overflowing():
    a = np.array([1 << 16, 1 << 16], dtype=np.int64)
    x = np.array([1 << 45, 1 << 45], dtype=np.int64)
    y = exact_convolve(a, x, 2, bound=(1 << 45) + 1)
    assert int(y[0]) == 1 << 61                     # exact below 2^62
    assert int(y[1]) == 1 << 62                     # 2^62 exactly: saturated, not wrapped
