"""Belief propagation and model queries against brute force over the full joint table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError
from dpsql.linalg import Identity, Indicator, Kron, Prefix, Total, Union, Weighted, Explicit
from dpsql.pgm import GraphicalModel, JunctionTree
from dpsql.pgm.inference import BeliefPropagation
from pgm_brute import joint_from_model, marginal, random_cliques, random_domain

# float64 round-off on tables of ≤ 4⁶ cells with log-potentials of scale ~3:
# a few ulps per operation, accumulated over ≤ 4096 summands.
RTOL = 1e-10


def random_model(seed: int, d: int = 6, k: int = 5, total: float = 1000.0) -> GraphicalModel:
    rng = np.random.default_rng(seed)
    dom = random_domain(rng, d)
    cliques = random_cliques(rng, dom, k)
    tree = JunctionTree(dom.attributes, dict(zip(dom.attributes, dom.shape)), cliques)
    theta = [rng.normal(scale=3.0, size=tuple(dom[a] for a in c)) for c in tree.cliques]
    return GraphicalModel(dom, tree, theta, total)


@pytest.mark.parametrize("seed", range(10))
def test_oracle_marginals_equal_brute_force(seed):
    model = random_model(seed)
    p = joint_from_model(model)
    bp = BeliefPropagation(model.tree)
    mu = bp.marginals(model.theta, model.total)
    for clique, m in zip(model.tree.cliques, mu):
        np.testing.assert_allclose(m, marginal(model.domain, p, clique), rtol=RTOL, atol=1e-12)
    logp = np.zeros(model.domain.shape)
    for clique, theta in model.potential_arrays():
        logp = logp + theta.reshape([model.domain[a] if a in clique else 1
                                     for a in model.domain.attributes])
    assert bp.log_partition(model.theta) == pytest.approx(np.log(np.exp(logp).sum()), rel=1e-12)


def test_oracle_is_stable_for_huge_potentials():
    model = random_model(3)
    theta = [t * 400.0 for t in model.theta]  # exp() of these overflows float64
    mu = BeliefPropagation(model.tree).marginals(theta, 10.0)
    for m in mu:
        assert np.all(np.isfinite(m)) and m.sum() == pytest.approx(10.0)


@pytest.mark.parametrize("seed", range(12))
def test_probability_space_passes_equal_the_log_space_passes(seed):
    # The estimator's oracle (flat layout, probability space, no message across an empty
    # separator) against the log-space passes and brute force, on trees with disconnected
    # parts (k up to 7 cliques over 6 attributes leaves some attributes alone).
    rng = np.random.default_rng(400 + seed)
    dom = random_domain(rng, 6)
    cliques = random_cliques(rng, dom, int(rng.integers(1, 8)))
    tree = JunctionTree(dom.attributes, dict(zip(dom.attributes, dom.shape)), cliques)
    bp = BeliefPropagation(tree)
    theta = [rng.normal(scale=5.0, size=s) for s in bp.shapes]
    flat = bp.flat_marginals(bp.flatten(theta), 123.0)
    ref = bp.marginals_log(theta, 123.0)
    model = GraphicalModel(dom, tree, theta, 123.0)
    p = joint_from_model(model)
    for clique, got, want in zip(tree.cliques, bp.split(flat), ref):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-12)
        np.testing.assert_allclose(got, marginal(dom, p, clique), rtol=RTOL, atol=1e-12)


def test_probability_space_falls_back_to_log_space_where_it_would_underflow():
    # θ_AB puts B = 1 at e^-800 below B = 0 and θ_BC puts B = 0 at e^-1600 below B = 1: in
    # probability space (each clique shifted by its own maximum) every product underflows to
    # 0; the oracle must notice and answer from the log-space passes (all mass on B = 1).
    dom = Domain(["A", "B", "C"], [2, 2, 3])
    tree = JunctionTree(dom.attributes, dict(zip(dom.attributes, dom.shape)), [("A", "B"), ("B", "C")])
    bp = BeliefPropagation(tree)
    theta = []
    for clique, shape in zip(tree.cliques, bp.shapes):
        t = np.zeros(shape)
        b = clique.index("B")
        index = [slice(None)] * len(shape)
        index[b] = 1 if clique == ("A", "B") else 0
        t[tuple(index)] = -800.0 if clique == ("A", "B") else -1600.0
        theta.append(t)
    shifted = np.concatenate([np.exp(t - t.max()).ravel() for t in theta])
    assert bp._calibrate(shifted) is None        # the probability-space passes give up
    got = bp.split(bp.flat_marginals(bp.flatten(theta), 10.0))
    want = bp.marginals_log(theta, 10.0)
    for g, w in zip(got, want):
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300)
    ab = got[tree.cliques.index(("A", "B"))]
    np.testing.assert_allclose(ab.sum(axis=0), [0.0, 10.0], atol=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_every_marginal_equals_brute_force(seed):
    model = random_model(seed)
    p = joint_from_model(model)
    attrs = model.domain.attributes
    for r in (1, 2, 3):
        for subset in itertools.combinations(attrs, r):
            order = subset[::-1]  # non-canonical order must be honoured
            got = model.marginal(order)
            assert got.attributes == order
            np.testing.assert_allclose(got.values, marginal(model.domain, p, order),
                                       rtol=RTOL, atol=1e-9)
    assert model.supports(model.cliques[0]) and model.supports(())


def _dense_kron(factors):
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f.dense())
    return out


@pytest.mark.parametrize("seed", range(6))
def test_answer_kron_union_weighted_equals_dense_product(seed):
    model = random_model(seed)
    p = joint_from_model(model).ravel()
    dom = model.domain
    rng = np.random.default_rng(100 + seed)
    queries = []
    for _ in range(6):
        factors = []
        for n in dom.shape:
            kind = rng.integers(0, 5)
            factors.append([Identity(n), Total(n), Prefix(n), Indicator(n, [0, n - 1]),
                            Explicit(rng.normal(size=(2, n)))][kind])  # negative weights too
        queries.append(Kron(factors))
    for q in queries:
        np.testing.assert_allclose(model.answer(q), _dense_kron(q.factors) @ p,
                                   rtol=1e-9, atol=1e-9 * model.total)
    u = Union([Weighted(2.5, queries[0]), queries[1]])
    want = np.concatenate([2.5 * _dense_kron(queries[0].factors) @ p,
                           _dense_kron(queries[1].factors) @ p])
    np.testing.assert_allclose(model.answer(u), want, rtol=1e-9, atol=1e-9 * model.total)
    batch = model.answer_many(queries)
    for q, a in zip(queries, batch):
        np.testing.assert_allclose(a, _dense_kron(q.factors) @ p, rtol=1e-9, atol=1e-9 * model.total)
    total = Kron([Total(n) for n in dom.shape])
    assert model.answer(total) == pytest.approx([model.total])


def test_marginals_many_matches_single_calls():
    model = random_model(5)
    pairs = list(itertools.combinations(model.domain.attributes, 2))
    for pair, f in zip(pairs, model.marginals_many(pairs)):
        np.testing.assert_allclose(f.values, model.marginal(pair).values)


def test_query_capacity_guards_out_of_model_elimination():
    rng = np.random.default_rng(0)
    dom = Domain([f"x{i}" for i in range(6)], [4] * 6)
    cliques = [(f"x{i}", f"x{i+1}") for i in range(5)]
    tree = JunctionTree(dom.attributes, dict(zip(dom.attributes, dom.shape)), cliques)
    theta = [rng.normal(size=(4, 4)) for _ in tree.cliques]
    model = GraphicalModel(dom, tree, theta, 10.0, query_capacity=100)
    model.marginal(("x0", "x5"))  # 16-cell tables along the chain: fine
    with pytest.raises(ModelTooLargeError) as err:
        model.marginal(("x0", "x1", "x2", "x3", "x4"))
    assert err.value.size > 100 and err.value.hint and err.value.cliques


@pytest.mark.parametrize("method", ["rounding", "sample"])
def test_synthetic_data_matches_model_marginals(method):
    model = random_model(7, d=5, total=1000.0)
    rows = 20000
    data = model.synthetic(rows, method=method, rng=np.random.default_rng(0))
    assert data.shape == (rows, 5)
    dom = model.domain
    for a, n in zip(dom.attributes, dom.shape):
        col = data[:, dom.attributes.index(a)]
        assert col.min() >= 0 and col.max() < n
    for pair in itertools.combinations(dom.attributes, 2):
        idx = [dom.attributes.index(a) for a in pair]
        counts = np.zeros([dom[a] for a in pair])
        np.add.at(counts, tuple(data[:, i] for i in idx), 1)
        expected = model.marginal(pair).values / model.total * rows
        if method == "rounding":
            # Rounding errs by < 1 record per cell and clique-group, summed over the
            # ≤ 4·4 groups of the separators a cell's count passes through.
            assert np.abs(counts - expected).max() <= 2 * 16 * 4
        else:
            # Multinomial: 6 standard deviations per cell.
            sd = np.sqrt(expected * (1 - expected / rows))
            assert np.all(np.abs(counts - expected) <= 6 * sd + 1)
    if method == "rounding":
        # The root clique is rounded in one piece: every cell is within one record.
        root = model.tree.cliques[model.tree.root]
        idx = [dom.attributes.index(a) for a in root]
        counts = np.zeros([dom[a] for a in root])
        np.add.at(counts, tuple(data[:, i] for i in idx), 1)
        expected = model.marginal(root).values / model.total * rows
        assert np.abs(counts - expected).max() < 1.0 + 1e-9



def _group_by(rng, n):
    """A GROUP BY's Bucket: cells in shuffled rows, some filtered out (-1), rows to spare."""
    mapping = rng.permutation(n + 1)[:n]
    mapping[rng.random(n) < 0.3] = -1
    return mapping


@pytest.mark.parametrize("seed", range(4))
def test_group_by_factors_are_picked_into_rows_never_densified(seed, monkeypatch):
    # A GROUP BY (a filter drops cells: -1) is answered by keeping its attribute and picking
    # cells into rows; a 1,459-label column's rows × n dense matrix cost 20 ms a query
    # (issue 35).  The answer is the dense product's.
    from dpsql.linalg import Bucket
    model = random_model(seed)
    p = joint_from_model(model).ravel()
    rng = np.random.default_rng(200 + seed)
    queries = []
    for _ in range(4):
        factors = []
        for n in model.domain.shape:
            kind = rng.integers(0, 4)
            factors.append([Identity(n), Total(n), Bucket(n, np.arange(n)[::-1].copy()),
                            Bucket(n, _group_by(rng, n), buckets=n + 1)][kind])
        queries.append(Kron(factors))
    merged = Kron([Bucket(n, np.arange(n) // 2) for n in model.domain.shape])  # 2 cells a row
    want = [_dense_kron(q.factors) @ p for q in queries + [merged]]
    np.testing.assert_allclose(model.answer(merged), want[-1], rtol=1e-9, atol=1e-9 * model.total)
    monkeypatch.setattr(Bucket, "_dense", lambda self: pytest.fail("a GROUP BY was densified"))
    for q, w in zip(queries, want):
        np.testing.assert_allclose(model.answer(q), w, rtol=1e-12, atol=1e-12 * model.total)
