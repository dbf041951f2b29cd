"""CDF, range and quantile workloads on large ordered attributes (issue 35 item 4).

Reproduced: a prefix (CDF) workload over a 100,000-cell integer column was refused with
``LargeAttributeError: a workload query asks for 100,000 values …``.  The exactness tests
lower ``LARGE_CELLS`` so that a 40-cell attribute takes the same paths and every closed
form is compared with the dense matrices.
"""

import math

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError
from dpsql.linalg import AllRange, Identity, Indicator, Kron, Prefix, Suffix, Total
from dpsql.plan import OrderedStrategy, QuerySpec, Workload, optimize, query_errors, svd_bound
from dpsql.plan.gram import RangeGram
from dpsql.plan.ordered import (candidate_trees, level_traces, toeplitz_errors,
                                toeplitz_strategy, tree_error)


from plan_oracles import dense_tse


@pytest.fixture
def small_large(monkeypatch):
    import dpsql.plan.gram as gram
    import dpsql.plan.workload as workload
    monkeypatch.setattr(gram, "LARGE_CELLS", 20)
    monkeypatch.setattr(workload, "LARGE_CELLS", 20)
    return 40


def _queries(n, k=2):
    return [QuerySpec("cdf", Kron([Prefix(n), Total(k)])),
            QuerySpec("ranges", Kron([AllRange(n), Total(k)]), 0.5),
            QuerySpec("tail", Kron([Suffix(n), Total(k)])),
            QuerySpec("between", Kron([Indicator(n, range(n // 4, n // 2)), Total(k)])),
            QuerySpec("count", Kron([Total(n), Total(k)]))]


def _padded_tree(tree, weights, k):
    rows = [w * np.kron(np.eye(tree.nodes[lv]), np.ones((1, tree.sizes[lv])))
            for lv, w in enumerate(weights) if w > 0]
    return np.kron(np.vstack(rows), np.ones((1, k)))


def _padded_workload(W, n, N, k):
    """The workload's dense rows with the tree's N − n phantom cells as zero columns."""
    Wd = W.matrix.dense().reshape(-1, n, k)
    return np.pad(Wd, ((0, 0), (0, N - n), (0, 0))).reshape(Wd.shape[0], -1)


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_every_tree_error_equals_the_dense_recomputation(small_large, noise):
    n, k = small_large, 2
    W = Workload.of_queries(Domain(["x", "k"], [n, k]), _queries(n, k), noise)
    assert isinstance(W.terms.terms[0].grams[0], RangeGram)
    rng = np.random.default_rng(0)
    for tree in candidate_trees(n):
        w = rng.uniform(0.2, 1.0, tree.levels)
        tau = level_traces(tree, W.terms, 0)
        got = tree_error(tree, tau, w, noise)
        Wd = _padded_workload(W, n, tree.N, k)
        want = dense_tse(Wd, _padded_tree(tree, w, k), noise)
        assert got.sum() == pytest.approx(want, rel=1e-9), tree


def test_toeplitz_error_equals_the_dense_recomputation(small_large):
    n, k = small_large, 2
    W = Workload.of_queries(Domain(["x", "k"], [n, k]), _queries(n, k))
    s = toeplitz_strategy(W.terms)
    assert s.operator == "toeplitz"
    A = s.dense()
    assert np.array_equal(A * 2 ** 16, np.round(A * 2 ** 16))      # measured on a lattice
    assert s.expected_error == pytest.approx(dense_tse(W.matrix.dense(), A, "gaussian"), rel=1e-8)
    # per query: the objective's scales divided out, against each query's own rows
    per = query_errors(s)
    assert len(per) == 5
    for (tse, _baseline, floor), q in zip(per, _queries(n, k)):
        assert tse == pytest.approx(dense_tse(q.matrix.dense(), A, "gaussian"), rel=1e-8)
        assert floor is None or floor <= tse * (1 + 1e-9)
    assert toeplitz_errors(s.coeffs * s.scale, W.terms, 0).sum() == pytest.approx(s.expected_error)


def test_optimize_plans_laplace_with_the_best_tree(small_large):
    n, k = small_large, 2
    W = Workload.of_queries(Domain(["x", "k"], [n, k]), _queries(n, k), "laplace")
    s = optimize(W, noise="laplace")
    assert isinstance(s, OrderedStrategy) and s.operator == "tree"
    A = s.dense()
    Wd = _padded_workload(W, n, s.tree.N, k)
    assert s.expected_error == pytest.approx(
        dense_tse(Wd, _padded_tree(s.tree, s.weights, k), "laplace"), rel=1e-9)
    # no worse than the uniform weights of H_b on the same shape
    tau = level_traces(s.tree, W.terms, 0)
    assert s.expected_error <= tree_error(s.tree, tau, np.ones(s.tree.levels), "laplace").sum()
    assert s.sensitivity(1) == pytest.approx(np.abs(A).sum(axis=0).max())


@pytest.mark.parametrize("leaf", [Prefix, Suffix, AllRange])
def test_range_gram_svd_bound_in_closed_form(leaf):
    n = 37
    g = leaf(n).gram()
    G = RangeGram({Prefix: "prefix", Suffix: "suffix", AllRange: "allrange"}[leaf], g.a, g.b)
    assert np.allclose(G.dense(), g.dense())
    ev = np.sqrt(np.clip(np.linalg.eigvalsh(g.dense()), 0, None))
    assert np.allclose(np.sort(G.singular_values()), np.sort(ev), rtol=1e-9)
    assert G.trace() == pytest.approx(np.trace(g.dense()))
    assert G.total() == pytest.approx(g.dense().sum())


@pytest.mark.parametrize("n", [100_000, 1_000_000])
def test_cdf_and_ranges_over_a_million_cells_plan_near_the_svd_bound(n):
    """Refused before (LargeAttributeError); now within 1.3x of the SVD bound."""
    for leaf in (Prefix, AllRange):
        W = Workload.of_queries(Domain(["income"], [n]), [QuerySpec("cdf", leaf(n))])
        s = optimize(W)
        bound = svd_bound(W)
        assert math.isfinite(s.expected_error) and bound is not None
        assert bound <= s.expected_error <= 1.3 * bound, (leaf, s.explanation)


def test_a_cdf_per_group_is_planned_per_group_cell():
    """Refused before ("… also ask about ['sex']"): a CDF per sex over 100,000 cells is the
    ordered strategy Kron'd with the identity on sex, within 1.3x of the SVD bound."""
    n = 100_000
    D = Domain(["income", "sex"], [n, 2])
    W = Workload.of_queries(D, [QuerySpec("cdf by sex", Kron([Prefix(n), Identity(2)]))])
    s = optimize(W)
    assert isinstance(s, OrderedStrategy) and s.groups == ("sex",) and s.clique == ("income", "sex")
    assert "per cell of 'sex'" in s.explanation
    bound = svd_bound(W)
    assert bound is not None and bound <= s.expected_error <= 1.3 * bound, s.explanation


def test_too_many_group_cells_are_refused_from_public_metadata_with_a_hint():
    n = 100_000
    D = Domain(["income", "zip"], [n, 300])
    W = Workload.of_queries(D, [QuerySpec("cdf by zip", Kron([Prefix(n), Identity(300)]))])
    with pytest.raises(ModelTooLargeError) as err:
        optimize(W)
    assert err.value.sqlstate == "54000"
    assert "'income'" in err.value.message and "'zip' (300)" in err.value.message
    assert "at most 83 fit" in err.value.message and err.value.hint
    # the groups' cells times the column's: 100 groups fit the group cap, not the cell cap
    D = Domain(["income", "zip"], [n, 100])
    with pytest.raises(ModelTooLargeError):
        optimize(Workload.of_queries(D, [QuerySpec("cdf", Kron([Prefix(n), Identity(100)]))]))


def _grouped_queries(n):
    return [QuerySpec("cdf by g", Kron([Prefix(n), Identity(3), Total(2)])),
            QuerySpec("cdf where g = 1", Kron([Prefix(n), Indicator(3, [1]), Total(2)])),
            QuerySpec("between by g", Kron([Indicator(n, range(n // 4, n // 2)), Identity(3), Total(2)]), 0.5),
            QuerySpec("count by g", Kron([Total(n), Identity(3), Total(2)])),
            QuerySpec("cdf", Kron([Prefix(n), Total(3), Total(2)]))]


def test_a_grouped_toeplitz_error_equals_the_dense_recomputation(small_large):
    """I_G ⊗ A: the error model's group factor tr(V_G) against the dense matrices, per query,
    and its sensitivity is A's (each cell's column lies in one group's copy)."""
    n = small_large
    W = Workload.of_queries(Domain(["x", "g", "k"], [n, 3, 2]), _grouped_queries(n))
    s = toeplitz_strategy(W.terms)
    assert s.groups == ("g",) and s.group_cells == 3
    A = s.dense()
    assert A.shape == (3 * n, 6 * n)
    assert s.sensitivity(2) ** 2 == pytest.approx((A * A).sum(axis=0).max(), rel=1e-12)
    assert s.expected_error == pytest.approx(dense_tse(W.matrix.dense(), A, "gaussian"), rel=1e-8)
    for (tse, _, _), q in zip(query_errors(s), _grouped_queries(n)):
        assert tse == pytest.approx(dense_tse(q.matrix.dense(), A, "gaussian"), rel=1e-8), q.name


def test_a_grouped_laplace_tree_error_equals_the_dense_recomputation(small_large):
    n = small_large
    W = Workload.of_queries(Domain(["x", "g", "k"], [n, 3, 2]), _grouped_queries(n), "laplace")
    s = optimize(W, noise="laplace")
    assert isinstance(s, OrderedStrategy) and s.operator == "tree" and s.groups == ("g",)
    Wd = _padded_workload(W, n, s.tree.N, 6)
    tree_rows = np.vstack([w * np.kron(np.eye(s.tree.nodes[lv]), np.ones((1, s.tree.sizes[lv])))
                           for lv, w in enumerate(s.weights) if w > 0])
    A = np.kron(tree_rows, np.kron(np.eye(3), np.ones((1, 2))))
    assert s.expected_error == pytest.approx(dense_tse(Wd, A, "laplace"), rel=1e-9)
    assert s.sensitivity(1) == pytest.approx(np.abs(s.dense()).sum(axis=0).max())


def test_queries_are_reweighted_to_stay_within_their_per_query_baseline():
    """A CDF with one BETWEEN over 100,000 cells: planned for the weighted total, the BETWEEN
    got 3.84 against its per-query baseline of 2 (the plan's promise, issue 16); reweighted,
    every query is within it, and where that fails the plan names the queries."""
    n = 100_000
    D = Domain(["income"], [n])
    W = Workload.of_queries(D, [QuerySpec("cdf", Prefix(n)),
                                QuerySpec("between", Indicator(n, range(n // 10, n // 5)))])
    s = optimize(W)
    assert all(tse <= base * (1 + 1e-9) for tse, base, _ in query_errors(s)), s.explanation
    many = [QuerySpec("cdf", Prefix(n)), QuerySpec("b1", Indicator(n, range(n // 10, n // 5))),
            QuerySpec("b2", Indicator(n, range(n // 2, n))), QuerySpec("count", Total(n))]
    s = optimize(Workload.of_queries(D, many))
    above = [q.name for q, (tse, base, _) in zip(many, query_errors(s)) if tse > base * (1 + 1e-9)]
    assert all(name in s.explanation for name in above)
    assert not above or "above the per-query baseline" in s.explanation
