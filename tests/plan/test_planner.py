import itertools

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError
from dpsql.linalg import Identity, Kron, Marginals, Prefix, Total, Union, Weighted
from dpsql.plan import (
    Caps, StrategyCache, Workload, expected_error, opt_0, opt_kron, opt_marginals, opt_union,
    optimize, round_strategy,
)

from plan_oracles import dense_tse, supports

OPERATORS = [opt_kron, opt_union, opt_marginals]


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("op", OPERATORS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", ["marginals", "prefix-kron", "range-union"])
def test_every_operator_supports_its_workload(workloads, kind, op, noise):
    W = workloads[kind]
    s = op(W, noise, restarts=1, seed=0)
    Wd, A = W.matrix.dense(), s.dense()
    assert supports(Wd, A)
    # Union strategies on this small domain are evaluated exactly (global least squares).
    assert s.expected_error == pytest.approx(dense_tse(Wd, A, noise), rel=1e-7)
    assert expected_error(W, s.matrix, noise) == pytest.approx(s.expected_error, rel=1e-7)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_opt0_on_a_one_dimensional_workload(noise):
    s = opt_0(Prefix(32), noise, restarts=2, seed=1)
    assert supports(Prefix(32).dense(), s.dense())
    assert s.expected_error < expected_error(Prefix(32), Identity(32), noise)


def test_optimize_is_deterministic_for_a_seed(workloads):
    W = workloads["range-union"]
    a = optimize(W, "laplace", restarts=2, seed=7)
    b = optimize(W, "laplace", restarts=2, seed=7)
    assert a.operator == b.operator and a.expected_error == b.expected_error
    np.testing.assert_array_equal(a.dense(), b.dense())


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_blocks_reproduce_the_strategy_on_marginals(workloads, noise):
    W = workloads["range-union"]
    s = optimize(W, noise, restarts=1, seed=0)
    x = np.random.default_rng(0).integers(0, 5, size=W.domain.shape).astype(float)
    rows = []
    for blk in s.blocks:
        axes = tuple(i for i, a in enumerate(W.domain.attributes) if a not in blk.clique)
        marginal = x.sum(axis=axes).reshape(-1)
        q = blk.query.dense()
        assert np.allclose(q / blk.grid, np.round(q / blk.grid))     # values on a lattice
        rows.append(blk.weight * (q @ marginal))
    np.testing.assert_allclose(np.concatenate(rows), s.dense() @ x.reshape(-1), atol=1e-9)


def test_rounding_recomputes_the_error(workloads):
    W = workloads["prefix-kron"]
    exact = opt_kron(W, "gaussian")
    coarse = round_strategy(exact, 2.0 ** -3)
    assert coarse.expected_error == pytest.approx(
        dense_tse(W.matrix.dense(), coarse.dense(), "gaussian"), rel=1e-7)
    assert coarse.expected_error != exact.expected_error


def test_caps_restructure_high_dimensional_workloads():
    D = Domain.from_sizes({f"x{i}": 4 for i in range(12)})
    cliques = list(itertools.combinations(D.attributes, 2))
    W = Workload(D, Marginals(D, cliques))
    s = optimize(W, "gaussian", restarts=1, seed=0)
    assert s.operator in ("OPT_M", "OPT_+", "ResidualPlanner")
    assert "OPT_kron skipped" in s.explanation or "OPT_kron not run" in s.explanation
    assert max(len(c) for c in s.cliques) <= 2
    # A junction tree over the cap is flagged, not refused; a marginal over the cap is.
    flagged = optimize(W, "gaussian", restarts=1, caps=Caps(model_size=100))
    assert "approximate (region-graph) inference" in flagged.explanation
    with pytest.raises(ModelTooLargeError):
        optimize(W, "gaussian", caps=Caps(marginal_cells=8))


def test_progress_and_cache(tmp_path, workloads):
    W = workloads["marginals"]
    calls = []
    cache = StrategyCache(tmp_path)
    s = optimize(W, "gaussian", restarts=1, seed=0, cache=cache,
                 progress=lambda op, it, err: calls.append((op, it, err)))
    assert calls and all(isinstance(c[1], int) for c in calls)
    assert list(tmp_path.glob("*.npz")) and list(tmp_path.glob("*.json"))
    again = optimize(W, "gaussian", restarts=1, seed=0, cache=cache,
                     progress=lambda *a: pytest.fail("cache hit must not optimise"))
    assert again.operator == s.operator and again.expected_error == s.expected_error
    np.testing.assert_array_equal(again.dense(), s.dense())
    other = optimize(W, "laplace", restarts=1, seed=0, cache=cache)   # different key
    assert other.noise == "laplace"


def test_bare_one_dimensional_matrix_and_structured_view():
    from dpsql.linalg import AllRange

    s = optimize(AllRange(24), "gaussian", restarts=1, seed=0)
    assert s.operator == "OPT_0" and s.attributes == ("x",)
    np.testing.assert_allclose(s.matrix.dense(), s.dense())
    assert s.sensitivity(2) == pytest.approx(np.sqrt((s.dense() ** 2).sum(axis=0).max()))
    assert s.expected_error == pytest.approx(dense_tse(AllRange(24).dense(), s.dense(),
                                                       "gaussian"), rel=1e-7)


def test_dense_optimiser_cap_is_explained(workloads):
    W = workloads["range-union"]
    s = optimize(W, "gaussian", restarts=1, caps=Caps(opt0_cells=3))
    assert s.operator == "OPT_M"
    assert "dense OPT_0 cap" in s.explanation


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_opt_marginals_plus_supports_and_is_exact_on_a_small_domain(workloads, noise):
    from dpsql.plan.operators import opt_marginals_plus

    W = workloads["range-union"]          # one marginal term, two range terms
    s = opt_marginals_plus(W, noise, restarts=1, seed=0)
    assert s.operator == "OPT_M+"
    Wd, A = W.matrix.dense(), s.dense()
    assert supports(Wd, A)
    assert s.expected_error == pytest.approx(dense_tse(Wd, A, noise), rel=1e-7)


def test_opt_marginals_plus_needs_both_kinds_of_terms(workloads):
    from dpsql.errors import UnsupportedQueryError
    from dpsql.plan.operators import opt_marginals_plus

    for kind in ("marginals", "prefix-kron"):
        with pytest.raises(UnsupportedQueryError):
            opt_marginals_plus(workloads[kind], "gaussian")


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_mixed_error_equals_its_brute_force_definition(monkeypatch, noise):
    """On a domain too large for the dense path, OPT_M+'s error is joint least squares
    over the marginal blocks for the marginal terms plus each other term from its own
    block; checked here against that definition computed densely."""
    import sys

    from dpsql.plan.operators import opt_marginals_plus
    from dpsql.plan.strategy import union_sensitivity
    from dpsql.plan.workload import workload_terms

    err = sys.modules["dpsql.plan.error"]
    D = Domain(["a", "b", "c"], [6, 4, 3])
    W = Workload(D, Union([
        Weighted(1.0, Kron([Identity(6), Identity(4), Total(3)])),
        Weighted(1.0, Kron([Total(6), Identity(4), Identity(3)])),
        Weighted(1.0, Kron([Prefix(6), Total(4), Identity(3)])),
        Weighted(2.0, Kron([Total(6), Prefix(4), Total(3)]))]))
    s = opt_marginals_plus(W, noise, restarts=1, seed=0)
    monkeypatch.setattr(err, "DENSE_LIMIT", 0)
    terms = workload_terms(W)
    got = err.strategy_tse(terms, s.kron_blocks, noise, s.assignment)

    def dense(block):
        G = np.ones((1, 1))
        for F in block.factors:
            G = np.kron(G, F)
        return block.weight * G

    own = {a for a in s.assignment if a >= 0}
    A_m = np.vstack([dense(b) for i, b in enumerate(s.kron_blocks) if i not in own])
    Wds = [t.weight * np.kron(np.kron(t_f[0], t_f[1]), t_f[2]) for t, t_f in
           zip(terms.terms, [[np.asarray(f.dense()) for f in k.factors] for _, k in
                              [(w.weight, w.base) for w in W.matrix.blocks]])]
    trace = 0.0
    for Wd, a in zip(Wds, s.assignment):
        A = A_m if a < 0 else dense(s.kron_blocks[a])
        trace += float(np.trace(Wd @ np.linalg.pinv(A.T @ A) @ Wd.T))
    p = 1 if noise == "laplace" else 2
    sens = union_sensitivity(s.kron_blocks, terms.shape, p)
    want = (2.0 if noise == "laplace" else 1.0) * sens ** 2 * trace
    if err.algebra_form(list(s.kron_blocks), terms.shape) is None:
        assert got == pytest.approx(want, rel=1e-6)
        assert got >= s.expected_error * (1 - 1e-9)     # the dense (global) error is never larger
    else:
        # p-Identity chose identities (Laplace here): every block is a marginal, so the
        # joint least-squares error over all of them applies (Theorem 9), below the local one.
        assert noise == "laplace"
        assert got == pytest.approx(dense_tse(W.matrix.dense(), s.dense(), noise), rel=1e-7)
        assert got <= want * (1 + 1e-9)


def test_laplace_kron_strategy_for_disjoint_range_filters_is_finite():
    """Two one-sided filters on one attribute (``WHERE age < 25`` / ``WHERE age >= 60``
    GROUP BY income): p-Identity leaves the cells outside both ranges with tiny column
    scales; the support check must use the factor's own SVD (its gram squares the
    condition number, which made this supported group look unsupported: error inf)."""
    from dpsql.linalg import Explicit
    from dpsql.plan.error import kron_loss
    from dpsql.plan.kron import kron_strategy
    from dpsql.plan.workload import workload_terms

    n = 74
    lo, hi = np.zeros((1, n)), np.zeros((1, n))
    lo[0, :8], hi[0, 43:] = 1, 1
    W = Workload(Domain(["age", "income"], [n, 2]), Union([
        Weighted(1.0, Kron([Explicit(lo), Identity(2)])),
        Weighted(1.0, Kron([Explicit(hi), Identity(2)]))]))
    terms = workload_terms(W)
    for noise in ("laplace", "gaussian"):
        block, loss = kron_strategy(terms, noise, restarts=1, rng=np.random.default_rng(0))
        assert np.isfinite(loss)
        assert float(np.sum(kron_loss(block, terms))) == pytest.approx(loss, rel=1e-6)
        s = optimize(W, noise, restarts=1, seed=0, grid=None)
        assert supports(W.matrix.dense(), s.dense())


def test_cap_score_sums_each_querys_terms_against_its_cap():
    # the score both capped planners (OPT_M and ResidualPlanner) hand to their balancers
    from dpsql.plan.balance import cap_score

    owner = np.array([0, 0, 1, 2, 1])
    score = cap_score(owner, np.array([3.0, 2.0, np.inf]))
    assert score(np.array([1.0, 2.0, 0.5, 100.0, 1.5])) == (105.0, True)        # loads 3, 2, 100
    assert score(np.array([1.0, 2.0 + 1e-9, 0.5, 100.0, 1.5]))[1] is False     # query 0 over its cap
    assert score(np.array([0.0, 0.0, 1.0, 0.0, 1.0 + 1e-9]))[1] is False       # query 1 over its cap


def test_cache_keeps_a_large_attributes_integer_basis(tmp_path):
    """A thin factor on a large attribute is C·S with S an integer basis (plan/large.py) that
    the measure step keeps exact while rounding C.  The cache dropped S: a strategy read back
    was measured as a dense factor, another release (another ledger key) than the same plan
    made fresh, so a crashed measurement could not be completed under its charge."""
    from dpsql.linalg import Explicit, Product
    from dpsql.plan.gram import LARGE_CELLS

    n = LARGE_CELLS + 1000
    rows = np.zeros((2, n))
    rows[0, : n // 5] = 1.0
    rows[1, n // 10: n // 2] = 1.0
    W = Workload(Domain(["x", "s"], [n, 2]), Kron([Explicit(rows), Identity(2)]))
    cache = StrategyCache(tmp_path)
    fresh = optimize(W, "gaussian", restarts=1, seed=0, cache=cache)
    assert any(S is not None for b in fresh.kron_blocks for S in b.bases)
    again = optimize(W, "gaussian", restarts=1, seed=0, cache=cache,
                     progress=lambda *a: pytest.fail("cache hit must not optimise"))
    for a, b in zip(fresh.kron_blocks, again.kron_blocks):
        assert len(a.bases) == len(b.bases)
        for s, t in zip(a.bases, b.bases):
            assert (s is None) == (t is None) and (s is None or np.array_equal(s, t))
    for a, b in zip(fresh.blocks, again.blocks):
        assert [type(f).__name__ for f in a.query.factors] == [type(f).__name__ for f in b.query.factors]
        assert any(isinstance(f, Product) for f in b.query.factors)
        np.testing.assert_array_equal(a.query.dense(), b.query.dense())
