"""Region graphs and the Convex-GBP oracle (NeurIPS 2021 §4, Definitions 2–3, App. A).

The oracle is checked against the optimality conditions of Problem 3 directly
(Lemma 2: τ̂ solves it iff τ̂ ∈ L(G) and θ − κ log τ̂ is orthogonal to the null space
of the local-polytope constraints), with that null space computed densely.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import null_space

from dpsql.pgm.convex_gbp import ConvexGBP
from dpsql.pgm.region_graph import RegionGraph

FIG1 = [("A", "B", "C"), ("A", "D"), ("B", "C", "D"), ("D", "E")]


def _attrs(n):
    return tuple("ABCDEFGH"[:n])


def test_saturated_graph_of_figure_1():
    g = RegionGraph.saturated(_attrs(5), {a: 2 for a in _attrs(5)}, FIG1)
    assert set(g.regions) == {("A", "B", "C"), ("A", "D"), ("B", "C", "D"), ("D", "E"),
                              ("B", "C"), ("A",), ("D",)}
    edges = {(g.regions[p], g.regions[c]) for p, c in g.edges}
    assert edges == {(("A", "B", "C"), ("B", "C")), (("A", "B", "C"), ("A",)),
                     (("A", "D"), ("A",)), (("A", "D"), ("D",)), (("B", "C", "D"), ("B", "C")),
                     (("B", "C", "D"), ("D",)), (("D", "E"), ("D",))}
    assert g.kind == "saturated" and sorted(g.maximal()) == sorted(FIG1)


def test_factor_graph_of_figure_1():
    g = RegionGraph.factor_graph(_attrs(5), {a: 2 for a in _attrs(5)}, FIG1)
    assert set(g.regions) == set(FIG1) | {(a,) for a in _attrs(5)}
    assert all(len(g.regions[c]) == 1 for _, c in g.edges)
    assert len(g.edges) == sum(len(c) for c in FIG1)


def _pairwise_closure(cliques):
    found = {frozenset(c) for c in cliques}
    while True:
        new = {a & b for a in found for b in found if a & b} - found
        if not new:
            return found
        found |= new


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.sampled_from(_attrs(7)), min_size=1, max_size=4), min_size=1, max_size=8))
def test_saturated_regions_are_the_intersection_closure(cliques):
    attrs = _attrs(7)
    g = RegionGraph.saturated(attrs, {a: 2 for a in attrs}, [tuple(sorted(c)) for c in cliques])
    closure = _pairwise_closure(cliques)
    covered = set().union(*cliques)
    expected = closure | {frozenset([a]) for a in attrs if a not in covered}
    assert {frozenset(r) for r in g.regions} == expected
    # Edges are exactly the covering relation of ⊂ among regions.
    sets = [frozenset(r) for r in g.regions]
    cover = {(i, j) for i, j in itertools.permutations(range(len(sets)), 2)
             if sets[j] < sets[i] and not any(sets[j] < s < sets[i] for s in sets)}
    assert set(g.edges) == cover
    for c in cliques:
        assert g.supports(c)


def _constraint_matrix(g):
    """Dense A with L(G) ∩ {sums equal} = {τ ≥ 0 : Aτ = b}: one block row per edge plus
    one normalisation row per region (the rows whose null space is S of Lemma 2)."""
    offsets = np.cumsum([0] + [g.region_size(r) for r in g.regions])
    n = offsets[-1]
    rows = []
    for p, c in g.edges:
        par, child = g.regions[p], g.regions[c]
        for cell in itertools.product(*[range(g.sizes[a]) for a in child]):
            row = np.zeros(n)
            row[offsets[c] + np.ravel_multi_index(cell, g.shape(c))] = -1.0
            for pc in itertools.product(*[range(g.sizes[a]) for a in par]):
                if tuple(pc[par.index(a)] for a in child) == cell:
                    row[offsets[p] + np.ravel_multi_index(pc, g.shape(p))] = 1.0
            rows.append(row)
    for i in range(len(g.regions)):
        row = np.zeros(n)
        row[offsets[i]:offsets[i + 1]] = 1.0
        rows.append(row)
    return np.array(rows)


@pytest.mark.parametrize("kind", ["saturated", "factor"])
@pytest.mark.parametrize("kappa", [1.0, 2.5])
@pytest.mark.parametrize("damping", [0.0, 0.5])
def test_convex_gbp_solves_problem_3(kind, kappa, damping):
    rng = np.random.default_rng(7)
    attrs = _attrs(5)
    sizes = dict(zip(attrs, [2, 3, 2, 3, 2]))
    g = RegionGraph.build(kind, attrs, sizes, FIG1)
    theta = [rng.normal(scale=1.5, size=g.shape(i)) for i in range(len(g.regions))]
    res = ConvexGBP(g, kappa, damping).run(theta, 1.0, tol=1e-13, sweeps=5000)
    tau = res.marginals
    assert res.change <= 1e-13
    # Feasible: normalised, positive, locally consistent (Definition 3).
    assert all(abs(t.sum() - 1.0) < 1e-12 and t.min() > 0 for t in tau)
    assert ConvexGBP(g).violation(tau) < 1e-10
    # Optimal (Lemma 2): θ − κ log τ ⊥ S, the null space of the constraints.
    v = np.concatenate([(th - kappa * np.log(t)).ravel() for th, t in zip(theta, tau)])
    S = null_space(_constraint_matrix(g))
    assert np.abs(S.T @ v).max() < 1e-8 * max(1.0, np.abs(v).max())


def test_warm_started_messages_are_a_fixed_point():
    rng = np.random.default_rng(3)
    attrs = _attrs(5)
    g = RegionGraph.saturated(attrs, {a: 3 for a in attrs}, FIG1)
    theta = [rng.normal(size=g.shape(i)) for i in range(len(g.regions))]
    oracle = ConvexGBP(g, damping=0.3)
    first = oracle.run(theta, 50.0, tol=1e-12)
    again = oracle.run(theta, 50.0, first.messages, sweeps=1, tol=0.0)
    assert again.change < 1e-9
    for a, b in zip(first.marginals, again.marginals):
        assert np.allclose(a, b, rtol=0, atol=1e-8)
        assert abs(a.sum() - 50.0) < 1e-9


def test_oracle_rejects_bad_parameters():
    g = RegionGraph.saturated(_attrs(2), {"A": 2, "B": 2}, [("A", "B")])
    with pytest.raises(ValueError):
        ConvexGBP(g, kappa=0.0)
    with pytest.raises(ValueError):
        ConvexGBP(g, damping=1.0)
    with pytest.raises(ValueError):
        ConvexGBP(g).run([np.zeros((2, 2))] * 5)


def test_capped_graph_spans_saturated_to_junction_tree():
    from dpsql.pgm.junction_tree import JunctionTree

    attrs = _attrs(6)
    sizes = dict(zip(attrs, [2, 3, 2, 3, 2, 4]))
    cliques = [("A", "B", "C"), ("B", "C", "D"), ("A", "D"), ("D", "E"), ("E", "F"), ("A", "F")]
    tree = JunctionTree(attrs, sizes, cliques)
    sat = RegionGraph.saturated(attrs, sizes, cliques)
    none = RegionGraph.capped(attrs, sizes, cliques, 0)
    assert set(none.regions) == set(sat.regions) and set(none.edges) == set(sat.edges)
    full = RegionGraph.capped(attrs, sizes, cliques, tree.size)
    assert sorted(full.maximal()) == sorted(tree.cliques)
    # Separators become the regions below the tree's cliques: the local polytope of a
    # junction tree (Definition 3 with those edges) is its marginal polytope.
    assert {r for r in full.regions if r not in tree.cliques} <= \
        {s for s in tree.separators.values() if s} | {
            tuple(a for a in attrs if a in set(x) & set(y))
            for x, y in itertools.combinations(tree.cliques, 2) if set(x) & set(y)}
    middle = RegionGraph.capped(attrs, sizes, cliques, tree.size - 1)
    assert all(middle.supports(c) for c in cliques) and middle.kind == "capped"
    assert middle.size <= tree.size + sat.size
