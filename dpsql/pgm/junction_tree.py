"""Junction trees for the graphical models of Private-PGM (thesis §4.3, Remark 1).

A set of measured cliques defines a Markov network whose exact marginal inference
runs on a junction tree: triangulate the graph with a greedy elimination order,
keep the maximal elimination cliques, and join them by a maximum-weight spanning
tree on separator sizes.  The total number of cells over the maximal cliques is the
JT-SIZE of thesis Remark 1; :func:`model_size` computes it from public metadata
(attribute sizes and clique lists) before anything is fitted, so that callers can
refuse or restructure a request that would not fit in memory.

All cliques produced here are *canonical*: attributes in the domain's order.  Every
array the estimator and the oracle touch is laid out in that order, which turns
every projection and expansion between a clique and its sub-cliques into a reshape
plus broadcasting instead of a transpose.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import prod

from dpsql.triangulation import canonical as _canonical, elimination_order, maximal_cliques

__all__ = ["JunctionTree", "elimination_order", "model_size"]


class JunctionTree:
    """A junction tree over the maximal cliques of a greedy triangulation.

    ``JunctionTree(attributes, sizes, cliques)`` takes the model's attribute order,
    a mapping of attribute sizes, and the measured cliques (any order).  Attributes
    that appear in no clique become singleton cliques, so every attribute of the
    domain is covered.  Disconnected components are joined by empty separators,
    giving a single tree.

    Attributes: ``cliques`` (maximal cliques, canonical order), ``edges`` (pairs of
    clique indices), ``separators`` (dict edge → canonical separator), ``root``,
    ``by_attribute`` (attribute → indices of the cliques containing it),
    ``clique_sets`` (each clique as a frozenset),
    ``parent`` (list, ``-1`` for the root), ``preorder`` (root first), ``order``
    (the elimination order used), ``size`` (JT-SIZE in cells).
    """

    def __init__(self, attributes: Sequence[str], sizes: dict[str, int] | Sequence[int],
                 cliques: Iterable[Sequence[str]]) -> None:
        attributes = tuple(attributes)
        if not isinstance(sizes, dict):
            sizes = dict(zip(attributes, sizes))
        sizes = {a: int(sizes[a]) for a in attributes}
        position = {a: i for i, a in enumerate(attributes)}
        cliques = [_canonical(position, c) for c in cliques]
        for c in cliques:
            for a in c:
                if a not in position:
                    raise KeyError(f"clique {c} names {a!r}, which is not in the domain")
        self.attributes = attributes
        self.sizes = sizes
        self.order, elim = elimination_order(sizes, cliques)
        maximal = maximal_cliques(self.order, elim)
        maximal.sort(key=lambda c: tuple(position[a] for a in c))
        self.cliques: list[tuple[str, ...]] = maximal
        self.size = sum(self.clique_size(c) for c in maximal)
        self._build_tree(position)

    @classmethod
    def from_structure(cls, attributes: Sequence[str], sizes: dict[str, int] | Sequence[int],
                       cliques: Sequence[Sequence[str]], parent: Sequence[int],
                       preorder: Sequence[int], order: Sequence[str]) -> JunctionTree:
        """The tree a fit built, from its stored cliques, parent links, visiting order and
        elimination order (``dpsql.pgm.store``): loading a saved model neither triangulates
        again (issue 17: a new process answers in ≤ 1 s).  Raises
        ValueError unless it is a junction tree of the domain: canonical cliques covering
        it, one root visited first, every clique after its parent, and the running
        intersection property."""
        self = cls.__new__(cls)
        attributes = tuple(attributes)
        if not isinstance(sizes, dict):
            sizes = dict(zip(attributes, sizes))
        self.attributes = attributes
        self.sizes = {a: int(sizes[a]) for a in attributes}
        position = {a: i for i, a in enumerate(attributes)}
        self.cliques = [tuple(c) for c in cliques]
        self.order = list(order)
        self.parent = [int(p) for p in parent]
        self.preorder = [int(i) for i in preorder]
        n = len(self.cliques)
        if (any(a not in position for c in self.cliques for a in c)
                or any(c != _canonical(position, c) for c in self.cliques)
                or set().union(*map(set, self.cliques)) != set(attributes)
                or sorted(self.order) != sorted(attributes)
                or len(self.parent) != n or sorted(self.preorder) != list(range(n))):
            raise ValueError("not a junction tree of this domain")
        self.root = self.preorder[0]
        seen = set()
        for v in self.preorder:
            if (self.parent[v] == -1) != (v == self.root) or (v != self.root and self.parent[v] not in seen):
                raise ValueError("the parent links do not form one tree in this order")
            seen.add(v)
        self.size = sum(self.clique_size(c) for c in self.cliques)
        self._finish(position)
        for a, members in self.by_attribute.items():   # running intersection property
            tops = [i for i in members if self.parent[i] < 0 or a not in self.clique_sets[self.parent[i]]]
            if len(tops) != 1:
                raise ValueError(f"the cliques holding {a!r} are not connected in the tree")
        return self

    def clique_size(self, clique: Sequence[str]) -> int:
        return prod(self.sizes[a] for a in clique)

    def _finish(self, position: dict[str, int]) -> None:
        """Edges, separators and the per-attribute index from cliques, parent and preorder."""
        by_attr: dict[str, list[int]] = {}
        for i, c in enumerate(self.cliques):
            for a in c:
                by_attr.setdefault(a, []).append(i)
        sets = [frozenset(c) for c in self.cliques]
        self.by_attribute, self.clique_sets = by_attr, sets
        self.edges = [(self.parent[v], v) for v in self.preorder[1:]]
        self.separators = {
            (p, c): _canonical(position, sets[p] & sets[c]) for p, c in self.edges}
        self.children: list[list[int]] = [[] for _ in self.cliques]
        for parent, child in self.edges:
            self.children[parent].append(child)

    def _build_tree(self, position: dict[str, int]) -> None:
        """Join the maximal cliques by a maximum-weight spanning tree on separator sizes
        (Kruskal), components by empty separators, and root it at the largest clique.

        Plain Python on a graph of a few dozen cliques: importing networkx for it cost
        ~0.2 s of a 0.9 s fit (issue 17: the 27-clique fit in ≤ 1 s).  Ties are broken as
        networkx 3 breaks them (edges in the order its adjacency lists them, a stable sort
        by weight, neighbours visited in the order their tree edges were added), so the tree
        is the one the estimator always built: ``tests/pgm/test_junction_tree.py`` compares
        the two on random clique sets."""
        n = len(self.cliques)
        by_attr: dict[str, list[int]] = {}
        for i, c in enumerate(self.cliques):
            for a in c:
                by_attr.setdefault(a, []).append(i)
        sets = [frozenset(c) for c in self.cliques]
        self.by_attribute, self.clique_sets = by_attr, sets
        # The clique graph's adjacency, in insertion order (as networkx keeps it).
        adjacency: list[dict[int, int]] = [{} for _ in range(n)]
        for members in by_attr.values():
            for x, i in enumerate(members):
                for j in members[x + 1:]:
                    if j not in adjacency[i]:
                        w = len(sets[i] & sets[j])
                        adjacency[i][j] = w
                        adjacency[j][i] = w
        edges, seen = [], set()
        for u in range(n):
            for v, w in adjacency[u].items():
                if v not in seen:
                    edges.append((w, u, v))
            seen.add(u)
        edges.sort(key=lambda e: e[0], reverse=True)   # stable: equal weights keep their order
        component = list(range(n))

        def find(i: int) -> int:
            while component[i] != i:
                component[i] = component[component[i]]
                i = component[i]
            return i

        tree: list[list[int]] = [[] for _ in range(n)]
        for _, u, v in edges:
            ru, rv = find(u), find(v)
            if ru != rv:
                component[ru] = rv
                tree[u].append(v)
                tree[v].append(u)
        first: dict[int, int] = {}
        for i in range(n):
            first.setdefault(find(i), i)     # each component's smallest clique
        firsts = sorted(first.values())
        for one, other in zip(firsts, firsts[1:]):
            tree[one].append(other)   # empty separator: independent components
            tree[other].append(one)
        # Root at the largest clique: the downward pass then starts from the most
        # expensive belief only once.
        self.root = max(range(n), key=lambda i: (self.clique_size(self.cliques[i]), -i))
        self.parent = [-1] * n
        self.preorder = [self.root]
        visited = {self.root}
        for u in self.preorder:            # breadth first; the list grows as it is read
            for v in tree[u]:
                if v not in visited:
                    visited.add(v)
                    self.parent[v] = u
                    self.preorder.append(v)
        self._finish(position)

    def host(self, clique: Iterable[str]) -> int:
        """Index of the smallest maximal clique containing ``clique`` (KeyError if none)."""
        want = frozenset(clique)
        if not want:
            return self.root
        best = -1
        for i in self.by_attribute.get(next(iter(want)), ()):
            c = self.cliques[i]
            if want <= self.clique_sets[i] and (
                    best < 0 or self.clique_size(c) < self.clique_size(self.cliques[best])):
                best = i
        if best < 0:
            raise KeyError(f"no junction-tree clique contains {tuple(clique)}")
        return best

    def __repr__(self) -> str:
        return f"JunctionTree({len(self.cliques)} cliques, size={self.size})"


def model_size(domain, cliques: Iterable[Sequence[str]]) -> int:
    """JT-SIZE (thesis Remark 1): total cells of the junction tree for ``cliques``.

    Needs only public metadata (the domain's attribute sizes), so callers can run it
    before spending any budget and refuse or restructure an intractable request.
    """
    sizes = dict(zip(domain.attributes, domain.shape))
    return JunctionTree(domain.attributes, sizes, cliques).size
