"""Factor, CliqueVector and JunctionTree against direct numpy computations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.pgm import CliqueVector, Factor, JunctionTree, model_size
from pgm_brute import random_cliques, random_domain

DOM = Domain(["a", "b", "c"], [2, 3, 4])


def test_factor_project_sum_and_order():
    rng = np.random.default_rng(0)
    f = Factor(DOM, rng.random(DOM.shape))
    g = f.project(("c", "a"))
    assert g.attributes == ("c", "a")
    np.testing.assert_allclose(g.values, f.values.sum(axis=1).T)
    assert f.sum() == pytest.approx(f.values.sum())
    np.testing.assert_allclose(f.sum(["b"]).values, f.values.sum(axis=1))


def test_factor_logsumexp_is_stable_and_matches_log_of_sum():
    rng = np.random.default_rng(1)
    x = rng.normal(size=DOM.shape) * 5
    f = Factor(DOM, x + 1000.0)  # exp(1000) overflows; the shifted form must not
    got = f.logsumexp(["b"]).values
    np.testing.assert_allclose(got - 1000.0, np.log(np.exp(x).sum(axis=1)), rtol=1e-12)
    assert np.isfinite(f.logsumexp())
    h = Factor(DOM, np.full(DOM.shape, -np.inf))
    assert np.all(h.logsumexp(["a"]).values == -np.inf)


def test_factor_arithmetic_aligns_axes_by_name():
    rng = np.random.default_rng(2)
    f = Factor(DOM.project(("c", "a")), rng.random((4, 2)))
    g = Factor(DOM.project(("b",)), rng.random(3))
    h = f * g
    assert set(h.attributes) == {"a", "b", "c"}
    full = h.transpose(("a", "b", "c")).values
    want = f.values.T[:, None, :] * g.values[None, :, None]
    np.testing.assert_allclose(full, want)
    e = f.expand(DOM)
    np.testing.assert_allclose(e.values, np.broadcast_to(f.values.T[:, None, :], DOM.shape))
    q = (f + 1.0) / Factor(DOM.project(("a",)), np.array([0.0, 2.0]))
    assert np.all(q.project(("a", "c")).values[0] == 0.0)  # 0 divisor gives 0, not inf
    assert f.dot(f.transpose(("a", "c"))) == pytest.approx(float((f.values ** 2).sum()))
    assert f.normalize(5.0).sum() == pytest.approx(5.0)
    assert np.exp(f.normalize(3.0, log=True).values).sum() == pytest.approx(3.0)


def test_clique_vector_arithmetic_dot_expand_project():
    rng = np.random.default_rng(3)
    cl = [("a", "b"), ("b", "c")]
    u = CliqueVector({c: Factor(DOM.project(c), rng.random(DOM.project(c).shape)) for c in cl})
    v = CliqueVector.zeros(DOM, cl) + 1.0
    w = 2.0 * u - v
    assert w.dot(v) == pytest.approx(2 * u.dot(v) - v.dot(v))
    assert u.dot(v) == pytest.approx(sum(float(u[c].values.sum()) for c in cl))
    big = u.expand(DOM, [("a", "b", "c")])
    want = u[("a", "b")].expand(DOM).values + u[("b", "c")].expand(DOM).values
    np.testing.assert_allclose(big[("a", "b", "c")].values, want)
    small = big.project([("c",), ("a", "b")])
    np.testing.assert_allclose(small[("c",)].values, want.sum(axis=(0, 1)))


def _is_junction_tree(tree: JunctionTree) -> bool:
    """Running intersection: the cliques containing any attribute form a connected subtree."""
    for a in tree.attributes:
        nodes = {i for i, c in enumerate(tree.cliques) if a in c}
        tops = [i for i in nodes if tree.parent[i] not in nodes]
        if len(tops) != 1:
            return False
    return True


@pytest.mark.parametrize("seed", range(12))
def test_junction_tree_covers_cliques_and_has_running_intersection(seed):
    rng = np.random.default_rng(seed)
    dom = random_domain(rng, 6)
    cliques = random_cliques(rng, dom, int(rng.integers(2, 7)))
    tree = JunctionTree(dom.attributes, dict(zip(dom.attributes, dom.shape)), cliques)
    for c in cliques:
        assert any(set(c) <= set(m) for m in tree.cliques)
    assert set(itertools.chain(*tree.cliques)) == set(dom.attributes)
    for i, c in enumerate(tree.cliques):  # maximal: none inside another
        assert not any(set(c) < set(d) for j, d in enumerate(tree.cliques) if j != i)
    assert _is_junction_tree(tree)
    assert len(tree.edges) == len(tree.cliques) - 1
    assert model_size(dom, cliques) == tree.size == sum(dom.size(c) for c in tree.cliques)


# adult's attribute sizes and the 15 random triples of numpy default_rng(0) (the
# mbi comparison of bench/relaxed_vs_mbi.py): greedy min-weight triangulates this
# into a 53.55-million-cell clique, weighted min-fill into at most 2.55 million.
ADULT = {"age": 85, "workclass": 9, "fnlwgt": 100, "education-num": 16, "marital-status": 7,
         "occupation": 15, "relationship": 6, "race": 5, "sex": 2, "capital-gain": 100,
         "capital-loss": 100, "hours-per-week": 99, "native-country": 42, "income>50K": 2}
ADULT_TRIPLES = [
    ("workclass", "education-num", "capital-loss"), ("education-num", "race", "sex"),
    ("race", "sex", "capital-gain"), ("education-num", "relationship", "hours-per-week"),
    ("workclass", "occupation", "relationship"), ("occupation", "race", "native-country"),
    ("occupation", "sex", "income>50K"), ("age", "fnlwgt", "occupation"),
    ("fnlwgt", "race", "native-country"), ("fnlwgt", "race", "capital-gain"),
    ("sex", "native-country", "income>50K"), ("age", "education-num", "race"),
    ("age", "workclass", "race"), ("age", "race", "income>50K"),
    ("education-num", "sex", "income>50K")]


def _min_weight_size(sizes, cliques):
    from dpsql.triangulation import _cells, _graph, _min_weight
    order, elim = _min_weight(sizes, _graph(sizes, [list(c) for c in cliques]))
    return _cells(sizes, order, elim)


def _optimal_size(sizes, cliques):
    """Brute force: the smallest total of maximal elimination cliques over all orders."""
    from dpsql.triangulation import _cells
    names = list(sizes)
    best = None
    for perm in itertools.permutations(names):
        nbrs = {a: set() for a in names}
        for c in cliques:
            for u in c:
                nbrs[u].update(v for v in c if v != u)
        elim = []
        for v in perm:
            ns = nbrs.pop(v)
            elim.append(tuple(a for a in names if a in ns or a == v))
            for u in ns:
                nbrs[u].discard(v)
                nbrs[u].update(w for w in ns if w != u)
        size = _cells(sizes, list(perm), elim)
        best = size if best is None else min(best, size)
    return best


def test_min_fill_rescues_a_myopic_min_weight_triangulation():
    tree = JunctionTree(list(ADULT), ADULT, ADULT_TRIPLES)
    assert _min_weight_size(ADULT, ADULT_TRIPLES) == 56_083_871
    assert tree.size == 5_272_871
    assert max(tree.clique_size(c) for c in tree.cliques) == 2_550_000
    assert _is_junction_tree(tree)
    for c in ADULT_TRIPLES:
        assert any(set(c) <= set(m) for m in tree.cliques)


@pytest.mark.parametrize("seed", range(10))
def test_triangulation_is_never_worse_than_min_weight_and_valid(seed):
    # Mixed small and large attributes so that most trees pass the 10⁶-cell threshold
    # where min-fill is tried (seed 7: min-weight 2,210,005 cells, min-fill the
    # optimum 710,005); 7 attributes keep the brute force over 5040 orders cheap.
    rng = np.random.default_rng(200 + seed)
    dom = Domain([f"a{i}" for i in range(7)], [int(x) for x in rng.choice([2, 5, 10, 40, 100], 7)])
    sizes = dict(zip(dom.attributes, dom.shape))
    cliques = [tuple(str(a) for a in rng.choice(dom.attributes, 3, replace=False)) for _ in range(6)]
    tree = JunctionTree(dom.attributes, sizes, cliques)
    assert _is_junction_tree(tree)
    for c in cliques:
        assert any(set(c) <= set(m) for m in tree.cliques)
    optimum = _optimal_size(sizes, cliques)
    assert optimum <= tree.size <= _min_weight_size(sizes, cliques)
    if seed == 7:
        assert tree.size == optimum == 710_005 < _min_weight_size(sizes, cliques)


def test_model_size_of_a_cycle_triangulates():
    dom = Domain.from_sizes({"a": 10, "b": 10, "c": 10, "d": 10})
    # A 4-cycle needs one chord: two triangles of 1000 cells each.
    assert model_size(dom, [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]) == 2000
    assert model_size(dom, [("a", "b"), ("b", "c"), ("c", "d")]) == 300


def test_chain_of_a_thousand_attributes_builds_quickly_with_linear_size():
    sizes = {f"x{i}": 10 for i in range(1000)}
    cliques = [(f"x{i}", f"x{i+1}", f"x{i+2}") for i in range(998)]
    tree = JunctionTree(list(sizes), sizes, cliques)
    assert len(tree.cliques) == 998 and tree.size == 998_000
    assert _is_junction_tree(tree)


def _networkx_tree(tree):
    """The junction tree's edges as the estimator built them with networkx (the reference)."""
    import networkx as nx
    graph = nx.Graph()
    graph.add_nodes_from(range(len(tree.cliques)))
    for members in tree.by_attribute.values():
        for x, i in enumerate(members):
            for j in members[x + 1:]:
                if not graph.has_edge(i, j):
                    graph.add_edge(i, j, weight=len(tree.clique_sets[i] & tree.clique_sets[j]))
    span = nx.maximum_spanning_tree(graph, weight="weight")
    comps = sorted(min(c) for c in nx.connected_components(span))
    for a, b in zip(comps, comps[1:]):
        span.add_edge(a, b)
    parent = [-1] * len(tree.cliques)
    preorder = [tree.root]
    for u, v in nx.bfs_edges(span, tree.root):
        parent[v] = u
        preorder.append(v)
    return parent, preorder


@pytest.mark.parametrize("seed", range(40))
def test_spanning_tree_without_networkx_is_the_one_networkx_built(seed):
    # The tree is built in plain Python since issue 17 (networkx's import was a fifth of a
    # small fit); ties must break as before, so that fits keep their structure.
    rng = np.random.default_rng(900 + seed)
    n = int(rng.integers(4, 12))
    dom = Domain([f"a{i}" for i in range(n)], [int(x) for x in rng.choice([2, 3, 5, 8], n)])
    cliques = [tuple(str(a) for a in rng.choice(dom.attributes, int(rng.integers(1, 4)), replace=False))
               for _ in range(int(rng.integers(1, 2 * n)))]
    tree = JunctionTree(dom.attributes, dict(zip(dom.attributes, dom.shape)), cliques)
    assert _is_junction_tree(tree)
    parent, preorder = _networkx_tree(tree)
    assert (tree.parent, tree.preorder) == (parent, preorder)


def test_junction_tree_construction_does_not_import_networkx():
    import subprocess
    import sys
    code = ("import sys\nfrom dpsql.pgm.junction_tree import JunctionTree\n"
            "t = JunctionTree(['a', 'b', 'c', 'd'], {'a': 2, 'b': 3, 'c': 2, 'd': 4}, "
            "[('a', 'b'), ('b', 'c'), ('c', 'a'), ('d',)])\n"
            "assert len(t.cliques) == 2, t.cliques\nprint('networkx' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
