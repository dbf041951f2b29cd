"""Closed forms for grams in span{I, 1} on large categoricals (issue 35 item 2).

A GROUP BY over a 1,459-label column has the gram I, a sum over it 11ᵀ, and the planner's
surrogate grams are weighted sums of them.  ``dpsql plan`` on a 12-query dashboard took 65 s
CPU, nearly all in n³ eigendecompositions of such 1,459-square grams (the per-query SVD
floors, ``FactorPinv.trace``'s root of V, OPT_0's dual steps).  Each closed form here is
checked against the general path it replaces.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.linalg import Bucket, Identity
from dpsql.plan.gram import SPAN_CELLS, FactorPinv, psd_root, scaled_identity, span_coefficients
from dpsql.plan.opt0 import gaussian_dual, opt0
from dpsql.plan.svd_bound import gram_svd_bound

N = 200
assert N >= SPAN_CELLS


def span(b: float, c: float, n: int = N) -> np.ndarray:
    return b * np.eye(n) + c * np.ones((n, n))


def general_trace(pinv: FactorPinv, V: np.ndarray) -> float:
    """``FactorPinv.trace`` before the closed form: reduce, then a root of Ṽ by eigh."""
    Vt = pinv.reduce(V)
    if Vt is None:
        return math.inf
    if pinv.basis is not None:
        resid = Vt - (Vt @ pinv.basis) @ pinv.basis.T
        if np.abs(resid).max(initial=0.0) > 1e-7 * max(float(np.abs(Vt).max()), 1e-300):
            return math.inf
    R = psd_root(Vt)
    return float(np.sum((R @ pinv.root) ** 2))


def test_span_coefficients_accept_identity_total_and_their_sums_only():
    assert span_coefficients(np.eye(N)) == (1.0, 0.0)
    assert span_coefficients(np.ones((N, N))) == (0.0, 1.0)
    b, c = span_coefficients(0.3 ** 2 * np.eye(N) + 1.7 ** 2 * np.ones((N, N)))
    assert b == pytest.approx(0.09, rel=1e-12) and c == pytest.approx(2.89, rel=1e-12)
    rng = np.random.default_rng(1)
    off_diagonal = span(2.0, 1.0)
    off_diagonal[5, 7] += 1e-6
    diagonal = span(2.0, 1.0)
    diagonal[9, 9] += 1e-6
    prefix = np.minimum.outer(np.arange(1, N + 1), np.arange(1, N + 1)).astype(float)
    X = rng.standard_normal((N, N))
    for V in (off_diagonal, diagonal, prefix, X @ X.T):
        assert span_coefficients(V) is None
    # small grams keep the general path (and their plans every last bit)
    assert span_coefficients(np.eye(SPAN_CELLS - 1)) is None


def test_scaled_identity_without_building_one():
    assert scaled_identity(np.eye(N)) == 1.0
    assert scaled_identity(-2.5 * np.eye(3)) == -2.5
    bad = np.eye(N)
    bad[3, 4] = 1e-300
    assert scaled_identity(bad) is None
    assert scaled_identity(np.eye(N)[:-1]) is None
    assert scaled_identity(np.zeros((3, 3))) is None
    uneven = np.eye(4)
    uneven[2, 2] = 2.0
    assert scaled_identity(uneven) is None


def _factors(rng):
    """Strategy factors over N cells: identity, a dense one, one merging cells, a total,
    one that never sees some cells, and a rank-deficient one."""
    merged = np.zeros((N // 2, N))
    merged[np.arange(N) // 2, np.arange(N)] = 1.0
    blind = np.eye(N)[: N - 3]
    low = rng.standard_normal((5, N))
    low = np.vstack([low, low[:2]])
    dense = 0.8 * np.eye(N) + 0.01 * np.ones((N, N))
    return {"identity": np.eye(N), "dense": dense, "merged": merged,
            "total": np.ones((1, N)), "blind": blind, "rank-deficient": low,
            "random": rng.standard_normal((N + 5, N))}


@pytest.mark.parametrize("b,c", [(1.0, 0.0), (0.0, 1.0), (0.25, 3.0), (2.0, 1e-9), (0.0, 0.0)])
def test_trace_of_a_span_gram_equals_the_general_path(b, c):
    rng = np.random.default_rng(2)
    V = span(b, c)
    for name, F in _factors(rng).items():
        pinv = FactorPinv.of(F)
        want, got = general_trace(pinv, V), pinv.trace(V)
        if math.isinf(want):
            assert math.isinf(got), name
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), name


def test_svd_bound_of_a_span_gram_is_exact():
    for b, c in [(1.0, 0.0), (0.0, 1.0), (0.3, 2.0), (5.0, 1e-4)]:
        V = span(b, c)
        ev = np.linalg.eigvalsh(V)
        dense = float(np.sqrt(np.clip(ev, 0.0, None)).sum() ** 2 / N)
        exact = ((N - 1) * math.sqrt(b) + math.sqrt(b + c * N)) ** 2 / N
        assert gram_svd_bound(V) == pytest.approx(exact, rel=1e-14)
        assert gram_svd_bound(V) == pytest.approx(dense, rel=1e-4)


@pytest.mark.parametrize("b,c", [(1.0, 0.0), (1.0, 0.5), (0.01, 4.0)])
def test_opt0_gaussian_on_a_span_gram_is_the_closed_form_optimum(b, c):
    """The optimum is X = V^½/d (module docstring of opt0.gaussian_span): its loss is the
    SVD bound, the iterative dual's never lower, and the matrix stays αI + β11ᵀ (the dual
    returned a dense eigenbasis of the (n − 1)-fold eigenvalue)."""
    V = span(b, c)
    res = opt0(V, "gaussian")
    A = res.matrix
    coeffs = span_coefficients(A)
    assert coeffs is not None, res.method
    assert res.loss == pytest.approx(gram_svd_bound(V), rel=1e-12)
    if c > 0:     # for V = I the identity ties and is listed first (lower bound unknown)
        assert res.method.startswith("gaussian (closed form")
        assert res.lower_bound == pytest.approx(res.loss, rel=1e-12)
    assert res.loss <= gaussian_dual(V).loss * (1 + 1e-12)
    X = A.T @ A
    assert np.allclose(np.diag(X), 1.0, rtol=1e-12)
    loss = float(np.diag(X).max()) * float(np.trace(np.linalg.solve(X, V)))
    assert loss == pytest.approx(res.loss, rel=1e-9)


def test_opt0_on_a_total_gram_is_one_row_of_ones():
    res = opt0(3.0 * np.ones((N, N)), "gaussian")
    assert res.method == "total" and res.matrix.shape == (1, N) and np.all(res.matrix == 1.0)
    assert res.loss == 3.0
    assert opt0(np.zeros((N, N)), "laplace").method == "empty"


def test_a_group_by_over_every_cell_has_the_identity_gram():
    perm = np.random.default_rng(3).permutation(N)
    assert isinstance(Bucket(N, perm).gram(), Identity)
    assert isinstance(Bucket(N, np.arange(N), buckets=N + 2).gram(), Identity)
    mapping = np.arange(N) % 7
    mapping[:5] = -1
    B = Bucket(N, mapping)
    D = B.dense()
    assert np.array_equal(B.gram().dense(), D.T @ D)


def test_a_span_strategy_factor_is_inverted_in_closed_form():
    """The closed-form optimum a·I + b·11ᵀ as a strategy factor: its pseudo-inverse root is
    K^-½ in closed form (no n×n factorisation), with the traces of the general path."""
    from dpsql.linalg.rowscaled import GramPinv
    rng = np.random.default_rng(6)
    F = opt0(span(1.0, 0.5), "gaussian").matrix
    pinv = FactorPinv.of(F)
    g = GramPinv(F)
    assert pinv.trivial and pinv.basis is None
    assert np.allclose(pinv.root @ pinv.root.T, g.factor @ g.factor.T, rtol=1e-9, atol=1e-12)
    X = rng.standard_normal((N, N))
    for V in (span(1.0, 0.0), span(0.0, 1.0), span(2.0, 0.3), X @ X.T):
        want = float(np.sum((psd_root(V) @ g.factor) ** 2))
        assert pinv.trace(V) == pytest.approx(want, rel=1e-9)
