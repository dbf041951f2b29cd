"""Issue 28: the planner's (FᵀF)⁺ of a strategy factor whose rows are far apart in weight
(a rounded strategy keeps light rows beside heavy ones: round_strategy evaluates the matrix
actually measured).  A Cholesky of FᵀF or an SVD of F is only accurate relative to the
heaviest row; these cases have closed forms, checked to rounding."""

import math

import numpy as np
import pytest

from dpsql.linalg import Explicit, Indicator, Kron, Total, Union, Weighted
from dpsql.plan.error import per_query_variance, strategy_blocks, term_errors
from dpsql.plan.gram import FactorPinv, LowRankGram, ThinPinv
from dpsql.plan.workload import workload_terms
from rational_oracles import exact_quad

S, B = 2.0 ** -14, 2.0 ** 8          # light and heavy row weights, 2²² apart


def _total_over_identity(n):
    """[B·1ᵀ; S·I]: G = B²11ᵀ + S²I, so 1ᵀG⁻¹1 = n/(S² + nB²), e_iᵀG⁻¹e_i = (1 − B²/(S² + nB²))/S²."""
    F = np.vstack([B * np.ones((1, n)), S * np.eye(n)])
    return F, n / (S * S + n * B * B), (1 - B * B / (S * S + n * B * B)) / (S * S)


def _edge_rows(n):
    """Lattice edge rows S·e_0, S·e_{n−1} beside the query row B·1 on cells 1..n−1: the query
    has variance 1/B², the cells 0..n−2 (= e_0 + row − e_{n−1}) 2/S² + 1/B²."""
    F = np.zeros((3, n))
    F[0, 0] = F[1, n - 1] = S
    F[2, 1:] = B
    return F


@pytest.mark.parametrize("n", [6, 74])
def test_factor_pinv_of_a_heavy_total_over_light_cells(n):
    F, total, cell = _total_over_identity(n)
    P = FactorPinv.of(F)
    ones = np.ones((1, n))
    assert P.diag_quadratic(ones)[0] == pytest.approx(total, rel=1e-12)
    assert P.trace(ones.T @ ones) == pytest.approx(total, rel=1e-12)
    assert np.allclose(P.diag_quadratic(np.eye(n)), cell, rtol=1e-12, atol=0)


def test_factor_pinv_of_lattice_edge_rows():
    n = 74
    P = FactorPinv.of(_edge_rows(n))
    q = np.vstack([np.arange(n) >= 1, np.arange(n) <= n - 2]).astype(float)
    want = [1 / (B * B), 2 / (S * S) + 1 / (B * B)]
    assert np.allclose(P.diag_quadratic(q), want, rtol=1e-12, atol=0)


def test_thin_pinv_keeps_the_light_rows_of_a_large_attribute():
    """More than 4096 cells: the eigenvalues of FFᵀ cut at 1e-12 dropped the light rows,
    and the second query was reported unsupported (trace inf)."""
    n = 5000
    P = FactorPinv.of(_edge_rows(n))
    assert isinstance(P, ThinPinv) and P.rank == 3
    q = np.vstack([np.arange(n) >= 1, np.arange(n) <= n - 2]).astype(float)
    want = [1 / (B * B), 2 / (S * S) + 1 / (B * B)]
    # the heavy query's error is (ε·√n·B/S)²-sized: the basis is orthonormal to ε·√n, and
    # the light directions amplify that by B/S = 2²² (measured 1.4e-11)
    assert np.allclose(P.diag_quadratic(q), want, rtol=1e-9, atol=0)
    assert P.trace(LowRankGram(n, 0.0, q[1:])) == pytest.approx(want[1], rel=1e-9)
    assert math.isinf(P.trace(LowRankGram(n, 0.0, np.eye(n)[1:2])))   # one cell: unsupported


def test_union_strategy_with_a_stiff_block():
    """A union (two blocks) on a small domain: the dense path took the eigenvalues of AᵀA
    cut at 1e-10·n, which dropped the light rows (2⁻⁴⁴ of the heavy ones there).  The
    per-query variance of the cells 0..n−2 came out 1e-3 of the truth, and term_errors
    called that query unsupported (inf)."""
    n = 12
    F = _edge_rows(n)
    A = Union([Kron([Explicit(F)]), Weighted(0.5, Kron([Total(n)]))])
    Ad = np.vstack([F, 0.5 * np.ones((1, n))])
    sens2 = float(np.abs(Ad).sum(axis=0).max()) ** 2
    cells = np.arange(n)
    qs = [cells >= 1, cells <= n - 2, cells >= 0]
    exact = [float(exact_quad(Ad, q.astype(float))) for q in qs]
    for q, want in zip(qs, exact):
        got = per_query_variance(Kron([Indicator(n, q)]), A, "laplace")[0]
        assert got == pytest.approx(2.0 * sens2 * want, rel=1e-10)       # Laplace: 2b², b = ‖A‖₁
    blocks, _ = strategy_blocks(A)
    W = Union([Kron([Indicator(n, q)]) for q in qs])
    sens2 = float((Ad * Ad).sum(axis=0).max())
    assert np.allclose(term_errors(workload_terms(W), blocks, "gaussian"),
                       sens2 * np.array(exact), rtol=1e-10, atol=0)
