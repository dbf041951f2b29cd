"""Relaxed Prox-PGM, out-of-model inference and the automatic choice (NeurIPS 2021 §4, App. B).

References: the exact estimator :func:`dpsql.pgm.estimate` (on junction-tree-shaped
clique sets the local polytope *is* the marginal polytope, so Problems 1 and 2 have
the same solution), the true marginals (noiseless measurements lie in M ⊆ L(G) and
give zero loss), and a generic QP solver for Problem 4's inner problem.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from dpsql.domain import Domain
from dpsql.errors import NotSupportedError
from dpsql.linalg import Identity, Kron, Prefix, Sum, Total, Union, Weighted
from dpsql.pgm import Measurement, estimate
from dpsql.pgm.appgm import ExactModel, RelaxedModel, fit, max_entropy_marginal
from dpsql.pgm.convex_gbp import ConvexGBP
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.out_of_model import consistency_targets
from dpsql.pgm.relaxed import estimate_relaxed

CHAIN = [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E")]


def _data(seed, shape, total, concentration):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    return rng.dirichlet(np.full(n, concentration)).reshape(shape) * total


def _marg(dom, p, clique):
    axes = tuple(i for i, a in enumerate(dom.attributes) if a not in clique)
    canon = [a for a in dom.attributes if a in clique]
    return p.sum(axis=axes).transpose([canon.index(a) for a in clique])


def _measure(dom, p, cliques, sigma, seed):
    rng = np.random.default_rng(seed)
    out = []
    for c in cliques:
        y = _marg(dom, p, c).ravel()
        out.append(Measurement(c, Identity(y.size), y + sigma * rng.normal(size=y.size), max(sigma, 1.0)))
    return out


def test_junction_tree_shaped_cliques_match_the_exact_estimate():
    # An interior optimum (every cell ≈ 170 records, noise σ = 3) so both solvers converge
    # fast; the L2 loss is strictly convex in the measured marginals, so the optimum is
    # unique on them and both estimators must find it.
    dom = Domain(list("ABCDE"), [3, 2, 4, 3, 2])
    p = _data(0, dom.shape, 25_000.0, 50.0)
    ms = _measure(dom, p, CHAIN, 3.0, 1)
    exact = estimate(dom, ms, iters=3000)
    relaxed = estimate_relaxed(dom, ms, iters=1500)
    assert relaxed.violation < 1e-9
    # Both iterates are within a small fraction of the noise of the optimum: the loss
    # values agree to 1e-4 relative and the marginals to 0.05 records (σ = 3 per cell).
    assert abs(relaxed.loss[-1] - exact.loss[-1]) <= 1e-4 * exact.loss[-1]
    for c in CHAIN:
        tau = relaxed.probs[relaxed.graph.index[c]] * relaxed.total
        assert np.abs(tau - exact.marginal(c).values).max() < 0.05


@pytest.mark.slow
def test_noiseless_measurements_are_reproduced_on_a_loopy_clique_set():
    dom = Domain(list("ABCDE"), [2, 3, 2, 3, 2])
    p = _data(2, dom.shape, 5_000.0, 3.0)
    cliques = [("A", "B", "C"), ("B", "C", "D"), ("C", "D", "E"), ("A", "E"), ("A", "D")]
    ms = _measure(dom, p, cliques, 0.0, 0)
    for kind in ("saturated", "factor"):
        res = estimate_relaxed(dom, ms, region_graph=kind, iters=2000)
        assert res.violation < 1e-9
        for c in cliques:
            canon = tuple(a for a in dom.attributes if a in c)
            tau = res.probs[res.graph.index[canon]] * res.total
            # True marginals are a zero-loss point of L(G); 0.5% of the records bounds
            # the gap after 2000 constant-step iterations.
            assert np.abs(tau - _marg(dom, p, canon)).sum() < 5e-3 * 5_000


def test_pseudo_marginals_satisfy_every_edge_constraint():
    dom = Domain(list("ABCDEF"), [3] * 6)
    p = _data(4, dom.shape, 10_000.0, 1.0)
    cliques = [c for c in itertools.combinations(dom.attributes, 3)][::3]
    res = estimate_relaxed(dom, _measure(dom, p, cliques, 20.0, 5), iters=300)
    oracle = ConvexGBP(res.graph)
    assert oracle.violation(res.probs) < 1e-8
    for (par, ch) in res.graph.edges:
        parent, child = res.graph.regions[par], res.graph.regions[ch]
        axes = tuple(i for i, a in enumerate(parent) if a not in child)
        assert np.allclose(res.probs[par].sum(axis=axes), res.probs[ch], atol=1e-9)
    assert all(abs(t.sum() - 1.0) < 1e-12 for t in res.probs)


def _chain_models():
    dom = Domain(list("ABCDE"), [3, 2, 4, 3, 2])
    p = _data(6, dom.shape, 20_000.0, 30.0)
    ms = _measure(dom, p, CHAIN, 0.0, 0)
    return dom, fit(dom, ms, iters=2000, method="exact"), fit(dom, ms, iters=2000, method="relaxed")


def test_out_of_model_marginals_follow_theorem_3():
    dom, exact, relaxed = _chain_models()
    assert isinstance(exact, ExactModel) and isinstance(relaxed, RelaxedModel)
    # {A,B,C}: a consistent τ_r exists, and the maximum-entropy one is the junction-tree
    # product τ_AB τ_BC / τ_B — exactly the exact model's marginal.
    for r in [("A", "B", "C"), ("B", "C", "D", "E"), ("C", "A", "B")]:
        assert not relaxed.supports(r)
        got = relaxed.marginal(r).values
        assert np.abs(got - exact.marginal(r).values).max() < 1e-3 * relaxed.total / got.size
    # {A,C}: only the one-way marginals constrain it, so the answer is τ_A ⊗ τ_C (App. B.5).
    ac = relaxed.marginal(("A", "C")).values
    prod = np.multiply.outer(relaxed.marginal(("A",)).values, relaxed.marginal(("C",)).values)
    assert np.abs(ac - prod / relaxed.total).max() < 1e-4 * relaxed.total / ac.size
    # Out-of-model answers are consistent with in-model ones on every overlap.
    r = relaxed.marginal(("A", "B", "C"))
    for s in [("A", "B"), ("B", "C"), ("B",)]:
        assert np.abs(r.project(s).values - relaxed.marginal(s).values).max() < 1e-3


def test_problem_4_minimises_the_violation_when_no_consistent_marginal_exists():
    # A frustrated triangle: pairwise tables that agree on one-way marginals (so they lie
    # in the saturated local polytope and are fitted exactly) but admit no joint
    # (A = B, B = C, A ≠ C on binary attributes).
    dom = Domain(["A", "B", "C"], [2, 2, 2])
    eq = np.array([[0.5, 0.0], [0.0, 0.5]]) * 1000
    ne = np.array([[0.0, 0.5], [0.5, 0.0]]) * 1000
    ms = [Measurement(("A", "B"), Identity(4), eq.ravel(), 1.0),
          Measurement(("B", "C"), Identity(4), eq.ravel(), 1.0),
          Measurement(("A", "C"), Identity(4), ne.ravel(), 1.0)]
    res = estimate_relaxed(dom, ms, iters=3000)
    clique = ("A", "B", "C")
    tau = max_entropy_marginal(res.graph, res.probs, clique, tol=1e-12, iters=20000)
    targets = consistency_targets(res.graph, res.probs, clique)

    def f(x):
        t = x.reshape(2, 2, 2)
        return sum(w * float(np.sum((t.sum(axis=ax, keepdims=True) - b) ** 2))
                   for ax, _, w, b in targets)

    ref = minimize(f, np.full(8, 1 / 8), method="SLSQP", bounds=[(0, 1)] * 8,
                   constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 500})
    assert f(ref.x) > 0.05  # genuinely inconsistent
    assert f(tau.ravel()) <= f(ref.x) + 1e-6
    assert abs(tau.sum() - 1.0) < 1e-12 and tau.min() >= 0


def test_factor_graph_out_of_model_is_the_product_of_one_way_marginals():
    # App. B.2 / Remark 2: a new clique joins a factor graph through the singletons only.
    dom = Domain(list("ABCD"), [2, 3, 2, 3])
    p = _data(9, dom.shape, 3_000.0, 2.0)
    ms = _measure(dom, p, [("A", "B", "C"), ("B", "C", "D")], 0.0, 0)
    res = estimate_relaxed(dom, ms, region_graph="factor", iters=500)
    model = RelaxedModel(dom, res)
    got = model.marginal(("A", "D")).values / model.total
    a = model.marginal(("A",)).values / model.total
    d = model.marginal(("D",)).values / model.total
    assert np.abs(got - np.multiply.outer(a, d)).max() < 1e-6


def test_answer_kron_union_weighted_and_sum():
    dom, exact, relaxed = _chain_models()
    k1 = Kron([Identity(3), Total(2), Prefix(4), Total(3), Total(2)])   # out of model
    k2 = Kron([Total(3), Identity(2), Identity(4), Total(3), Total(2)])  # in model
    query = Union([k1, Weighted(2.0, k2), Sum([k2, k2])])
    got = relaxed.answer(query)
    ac = relaxed.marginal(("A", "C")).values
    bc = relaxed.marginal(("B", "C")).values
    want = np.concatenate([(ac @ Prefix(4).dense().T).ravel(), 2 * bc.ravel(), 2 * bc.ravel()])
    assert np.allclose(got, want, rtol=1e-12, atol=1e-9)
    assert np.allclose(relaxed.answer(k2), exact.answer(k2), atol=1e-2)
    assert [a.shape for a in relaxed.answer_many([k1, k2])] == [(12,), (8,)]
    with pytest.raises(ValueError):
        relaxed.answer(Kron([Identity(3), Total(2)]))


def test_fit_chooses_by_capacity_and_explains_itself():
    dom = Domain(list("ABCDE"), [3, 2, 4, 3, 2])
    p = _data(8, dom.shape, 1_000.0, 5.0)
    cliques = [("A", "B", "C"), ("B", "C", "D"), ("A", "D", "E"), ("C", "E")]
    ms = _measure(dom, p, cliques, 1.0, 0)
    small = fit(dom, ms, iters=50)
    assert isinstance(small, ExactModel) and "within the capacity" in small.summary()
    big = fit(dom, ms, iters=50, capacity=20, gap=None, stop=None)   # Prox-PGM, 50 iterations
    assert isinstance(big, RelaxedModel)
    text = big.summary()
    assert "over the capacity of 20" in text and "saturated region graph" in text
    assert big.total == pytest.approx(small.total)
    assert np.allclose(big.marginal(("A", "B")).values.sum(), big.total)
    with pytest.raises(NotSupportedError) as info:
        big.synthetic(10)
    assert info.value.hint
    # Warm start from a relaxed model reuses θ̂ and messages: the loss starts where it ended.
    again = fit(dom, ms, iters=5, capacity=20, warm_start=big, gap=None, stop=None)
    assert again.loss[0] <= big.loss[-1] * (1 + 1e-6) + 1e-9
    with pytest.raises(ValueError):
        fit(dom, ms, method="bogus")


def _l2_loss(model, ms):
    return sum(float(((model.marginal(m.clique).values.ravel() - m.values) ** 2).sum()) / m.stddev ** 2
               for m in ms)


def test_discrepancy_stop_ends_at_the_first_iteration_within_the_noise():
    # A sparse table (many empty cells), σ = 4: the loss minimum fits the noise (its loss,
    # ~17, is far below m = 116, the number of noisy values, which is what the true data
    # scores), so the stop must trigger; it must do so at the first iteration at or below m.
    dom = Domain(list("ABCDE"), [4, 3, 4, 3, 2])
    p = _data(11, dom.shape, 3_000.0, 0.3)
    cliques = [("A", "B", "C"), ("B", "C", "D"), ("A", "D", "E"), ("C", "E")]
    ms = _measure(dom, p, cliques, 4.0, 2)
    level = sum(m.values.size for m in ms)
    from dpsql.pgm.auto import discrepancy_level
    assert discrepancy_level(ms) == level == 48 + 36 + 24 + 8
    seen = []
    model = fit(dom, ms, iters=2000, exact_method="adaptive", stop="discrepancy",
                callback=lambda pr: seen.append(pr.loss), limits=FitLimits(discrepancy_above=0))
    assert isinstance(model, ExactModel) and "discrepancy principle" in model.summary()
    it = int(model.stopped.split("iteration ")[1].split(",")[0])
    assert len(seen) == it < 2000
    assert seen[-1] <= level < min(seen[:-1])
    # The model's own loss, recomputed from its full joint table (brute force).
    from pgm_brute import joint_from_model, marginal
    joint = joint_from_model(model.model)
    brute = sum(float(((marginal(dom, joint, m.clique).ravel() - m.values) ** 2).sum()) / m.stddev ** 2
                for m in ms)
    assert brute == pytest.approx(seen[-1], rel=1e-9)
    assert brute == pytest.approx(_l2_loss(model, ms), rel=1e-9)
    # Without the stop, the same iterations give the same model; more fit the noise further.
    same = fit(dom, ms, iters=it, exact_method="adaptive", gap=None, stop=None)
    assert np.allclose(same.marginal(("A", "B", "C")).values, model.marginal(("A", "B", "C")).values)
    full = fit(dom, ms, iters=2000, exact_method="adaptive", gap=None, stop=None)
    assert _l2_loss(full, ms) < _l2_loss(model, ms)
    # The relaxed estimator does not apply the stop, and says so.
    relaxed = fit(dom, ms, iters=40, method="relaxed", stop="discrepancy", gap=None)
    assert relaxed.fit.iterations == 40 and "not applied" in relaxed.summary()


def test_discrepancy_stop_that_never_triggers_says_so_and_bad_options_raise():
    dom = Domain(list("ABC"), [2, 3, 2])
    p = _data(3, dom.shape, 5_000.0, 5.0)
    ms = _measure(dom, p, [("A", "B"), ("B", "C")], 1.0, 4)
    model = fit(dom, ms, iters=1, stop="discrepancy",   # one step from uniform: far above m
                limits=FitLimits(discrepancy_above=0))
    assert "did not trigger" in model.summary()
    assert len(model.loss) == 2
    with pytest.raises(ValueError):
        fit(dom, ms, stop="bogus")
    with pytest.raises(ValueError):
        fit(dom, ms, stop="discrepancy", norm="l1")



def test_group_by_factors_are_picked_into_rows_never_densified(monkeypatch):
    from dpsql.linalg import Bucket
    dom, exact, relaxed = _chain_models()
    grouped = Bucket(4, np.array([3, -1, 0, 1]), buckets=5)     # filtered, one row empty
    query = Kron([Bucket(3, np.array([2, 1, 0])), Total(2), grouped, Total(3), Total(2)])
    ac = relaxed.marginal(("A", "C")).values
    want = (Bucket(3, np.array([2, 1, 0])).dense() @ ac @ grouped.dense().T).ravel()
    monkeypatch.setattr(Bucket, "_dense", lambda self: pytest.fail("a GROUP BY was densified"))
    np.testing.assert_allclose(relaxed.answer(query), want, rtol=1e-12, atol=1e-9)
