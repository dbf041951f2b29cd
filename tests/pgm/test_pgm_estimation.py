"""Estimation (the engine's adaptive method) against a full-data-vector reference solver; the
thesis's Algorithms 2 and 3 (``dpsql.pgm.experimental``) are tested in test_experimental.py."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError
from dpsql.linalg import Explicit, Identity, Kron, Prefix, Total
from dpsql.pgm import Measurement, estimate, model_size
from dpsql.pgm.measurement import estimate_total
from pgm_brute import (joint_from_model, loss_full, marginal, measure, problem, random_cliques, random_data,
                       random_domain, solve_full)


@pytest.mark.parametrize("seed", range(6))
def test_estimate_reaches_the_full_vector_optimum(seed):
    """The default method, the engine's "adaptive" (Algorithm 2, "md": test_experimental)."""
    dom, data, ms = problem(seed)
    total = float(data.sum())
    _, best = solve_full(dom, ms, total)
    model = estimate(dom, ms, iters=12000, total=total, tol=1e-13)
    got = loss_full(dom, ms, joint_from_model(model))
    # The loss the estimator tracks is the same function of μ as the brute-force loss of p.
    assert got == pytest.approx(model.loss[-1], rel=1e-9)
    assert abs(got - best) <= 1e-6 * best


@pytest.mark.parametrize("seed", range(200, 206))
def test_adaptive_reaches_the_optimum_with_four_valued_attributes(seed):
    # Up to 4⁵ = 1024 cells.  Prefix-Kron blocks stay on pairs: over three 4-valued
    # attributes their Gram has condition number ~3·10⁴, where any first-order
    # method (mbi's included) needs tens of thousands of iterations for 1e-6.
    rng = np.random.default_rng(seed)
    dom = random_domain(rng, 5, 4)
    data = random_data(rng, dom, 5000)
    cliques = random_cliques(rng, dom, int(rng.integers(3, 6)))
    queries = []
    for i, c in enumerate(cliques):
        n = dom.size(c)
        if i % 3 == 1 and len(c) == 2:
            queries.append(Kron([Prefix(dom[a]) for a in c]))
        elif i % 3 == 2:
            queries.append(Explicit(rng.integers(-1, 3, size=(n + 2, n)).astype(float)))
        else:
            queries.append(Identity(n))
    ms = measure(rng, dom, data, cliques, queries, [float(rng.uniform(1, 5)) for _ in cliques])
    total = float(data.sum())
    _, best = solve_full(dom, ms, total)
    model = estimate(dom, ms, iters=4000, total=total, tol=1e-14, method="adaptive")
    got = loss_full(dom, ms, joint_from_model(model))
    assert abs(got - best) <= 1e-6 * best


def test_noiseless_measurements_are_reproduced_exactly():
    rng = np.random.default_rng(11)
    dom = random_domain(rng, 6, 4)
    data = random_data(rng, dom, 5000) + 1.0  # strictly positive: an interior optimum
    cliques = [("a3", "a0"), ("a0", "a1"), ("a1", "a3"), ("a5", "a2", "a4")]
    queries = [Identity(dom.size(cliques[0])), Kron([Prefix(dom["a0"]), Prefix(dom["a1"])]),
               Identity(dom.size(cliques[2])), Identity(dom.size(cliques[3]))]
    ms = measure(rng, dom, data, cliques, queries, [1e-12] * 4)
    model = estimate(dom, ms, iters=5000, tol=1e-15)
    assert model.total == pytest.approx(data.sum(), rel=1e-12)
    for c in cliques:
        np.testing.assert_allclose(model.marginal(c).values, marginal(dom, data, c),
                                   rtol=1e-6, atol=1e-6)


def test_total_is_inverse_variance_weighted_when_unknown():
    dom = Domain.from_sizes({"a": 3, "b": 2})
    y1 = np.array([10.0, 20.0, 30.0])  # Identity: m = 60, var = 3·σ²
    y2 = np.array([55.0])              # Total:    m = 55, var = σ²
    y3 = np.array([5.0, 7.0])          # Prefix:   last row is the total, m = 7, var = σ²
    ms = [Measurement(("a",), Identity(3), y1, 2.0), Measurement(("b",), Total(2), y2, 1.0),
          Measurement(("b",), Prefix(2), y3, 3.0)]
    est, var = estimate_total(ms)
    w = np.array([1 / 12, 1 / 1, 1 / 9])
    assert est == pytest.approx((w @ np.array([60.0, 55.0, 7.0])) / w.sum(), rel=1e-10)
    assert var == pytest.approx(1 / w.sum(), rel=1e-10)
    assert estimate(dom, ms, iters=5).total == pytest.approx(est)
    no_total = [Measurement(("a",), Explicit(np.array([[1.0, -1.0, 0.0]])), np.array([1.0]), 1.0)]
    assert estimate_total(no_total) is None
    with pytest.raises(ValueError):
        estimate(dom, no_total, iters=5)
    assert estimate(dom, no_total, iters=5, total=40.0).total == 40.0


def test_warm_start_continues_from_the_previous_model():
    dom, data, ms = problem(4)
    total = float(data.sum())
    first = estimate(dom, ms, iters=300, total=total)
    again = estimate(dom, ms, iters=300, total=total, warm_start=first)
    assert again.loss[0] == pytest.approx(first.loss[-1], rel=1e-12)
    assert again.loss[-1] <= first.loss[-1]
    # A structure that does not contain the old cliques starts from the old marginals.
    extra = measure(np.random.default_rng(0), dom, data, [dom.attributes[:3]],
                    [Identity(dom.size(dom.attributes[:3]))], [2.0])
    grown = estimate(dom, ms + extra, iters=1, total=total, warm_start=first)
    start = loss_full(dom, ms + extra, joint_from_model(first))
    assert grown.loss[0] <= start * (1 + 1e-9)


def test_model_too_large_is_refused_before_fitting():
    dom = Domain([f"x{i}" for i in range(5)], [10] * 5)
    cliques = [("x0", "x1"), ("x1", "x2"), ("x2", "x3"), ("x3", "x4"), ("x4", "x0")]
    size = model_size(dom, cliques)
    ms = [Measurement(c, Identity(100), np.zeros(100), 1.0) for c in cliques]
    with pytest.raises(ModelTooLargeError) as err:
        estimate(dom, ms, iters=1, capacity=size - 1)
    assert err.value.size == size and err.value.hint
    assert err.value.cliques and all(len(c) == 3 for c in err.value.cliques)
    assert err.value.sqlstate == "54000"
    estimate(dom, ms, iters=1, capacity=size, total=1.0)


def test_callback_sees_progress_and_can_stop():
    dom, data, ms = problem(1)
    seen = []
    model = estimate(dom, ms, iters=100, total=float(data.sum()),
                     callback=lambda p: seen.append(p) or p.iteration == 7)
    assert [p.iteration for p in seen] == list(range(1, 8))
    assert len(model.loss) == 8
    assert all(b.loss <= a.loss for a, b in zip(seen, seen[1:]))  # Armijo: monotone


def test_bad_measurements_are_rejected():
    dom = Domain.from_sizes({"a": 3, "b": 2})
    with pytest.raises(ValueError):
        Measurement(("a",), Identity(3), np.zeros(2), 1.0)
    with pytest.raises(ValueError):
        Measurement(("a",), Identity(3), np.zeros(3), 0.0)
    with pytest.raises(ValueError):
        Measurement(("a", "a"), Identity(9), np.zeros(9), 1.0)
    with pytest.raises(ValueError):
        estimate(dom, [Measurement(("a",), Identity(2), np.zeros(2), 1.0)], iters=1)
    with pytest.raises(ValueError):
        estimate(dom, [Measurement(("z",), Identity(2), np.zeros(2), 1.0)], iters=1)
    with pytest.raises(ValueError):
        estimate(dom, [Measurement(("a",), Identity(3), np.ones(3), 1.0)], iters=1, method="newton")


def test_structured_queries_work_without_materialising(monkeypatch):
    """Union/Weighted/Kron blocks as a planner emits them, applied through matvec/rmatvec."""
    from dpsql.linalg import Union, Weighted
    from dpsql.pgm import measurement
    monkeypatch.setattr(measurement, "DENSE_LIMIT", 0)  # force the structured path
    rng = np.random.default_rng(21)
    dom = Domain(["a", "b", "c"], [3, 4, 2])
    data = random_data(rng, dom, 2000) + 1.0
    block = Union([Weighted(0.5, Kron([Prefix(4), Identity(3)])), Kron([Total(4), Identity(3)])])
    cliques = [("b", "a"), ("c", "b")]
    queries = [block, Weighted(2.0, Kron([Identity(2), Prefix(4)]))]
    ms = [Measurement(m.clique, m.query, m.values, 1.0)  # noiseless values, unit weights
          for m in measure(rng, dom, data, cliques, queries, [1e-12, 1e-12])]
    model = estimate(dom, ms, iters=3000, method="adaptive", tol=1e-15)
    assert model.total == pytest.approx(data.sum(), rel=1e-9)  # from the Union's Total rows
    for c in cliques:
        np.testing.assert_allclose(model.marginal(c).values, marginal(dom, data, c), rtol=1e-6,
                                   atol=1e-6)


def test_total_from_a_badly_scaled_measurement_is_exact():
    """Issue 28: a light prefix (2⁻¹⁴) under a heavy pair of cells (2⁸): lstsq's SVD gave
    the total's variance 3e-9 off and, from noise-free values, a total 4e-8 off.  The
    variance 1ᵀ(QᵀQ)⁺1 is checked against exact rationals."""
    from fractions import Fraction

    n, s, b = 30, 2.0 ** -14, 2.0 ** 8
    Q = np.vstack([s * np.tril(np.ones((n, n))), b * (np.eye(n)[0] + np.eye(n)[1])[None]])
    # exact: solve QᵀQ z = 1 in rationals (QᵀQ is invertible: the prefix alone has rank n)
    rows = [[Fraction(float(v)) for v in row] for row in Q]
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [Fraction(1)] for i in range(n)]
    for c in range(n):
        a[c] = [x / a[c][c] for x in a[c]]
        for i in range(n):
            if i != c and a[i][c]:
                a[i] = [x - a[i][c] * y for x, y in zip(a[i], a[c])]
    exact = float(sum(a[i][n] for i in range(n)))
    x = np.arange(n, dtype=float)
    est, var = estimate_total([Measurement(("a",), Explicit(Q), Q @ x, 1.0)])
    assert var == pytest.approx(exact, rel=1e-12)
    assert est == pytest.approx(x.sum(), rel=1e-12)
