"""Region graphs over a clique set: the structure of the local polytope (NeurIPS 2021 §4).

A region graph G = (V, E) is a directed graph whose vertices are attribute cliques and
whose edges r → s satisfy r ⊃ s (Definition 2).  Its local polytope L(G) asks each
pseudo-marginal τ_r to be a distribution and every edge to be consistent,
P_{r→s} τ_r = τ_s (Definition 3).  Two constructions are provided:

* :meth:`RegionGraph.saturated` — the fully saturated region graph (default; Figure
  1c): the cliques plus every non-empty intersection of any family of them.  A set s
  belongs to that closure exactly when it equals the intersection of all cliques that
  contain it, which is how it is computed: one pass over the subsets of each clique
  (2^|c| per clique) instead of the quadratic pairwise closure, so 10,000 three-way
  cliques cost ~80,000 set operations.
* :meth:`RegionGraph.capped` — the saturated graph over the junction-tree cliques
  that fit a cell budget plus the remaining measured cliques: global consistency where
  it is affordable, local elsewhere (between Figures 1a and 1c).
* :meth:`RegionGraph.factor_graph` — one vertex per clique plus the singletons, with
  edges clique → attribute (Figure 1b); only one-way marginals must agree.

Edges are the covering relation of the containment order (r → s when s ⊂ r and no
region lies strictly between): the transitive edges are implied by the chains, so
the local polytope is the same and message passing has fewer messages to carry.
Attributes that lie in no clique become isolated singleton regions so that every
attribute of the domain is supported.

Regions are canonical tuples (attributes in domain order), so a message over a child
region broadcasts into its parent with a reshape.  The graph also exposes the small
interface :class:`~dpsql.pgm.loss.MarginalLoss` needs from a junction tree
(``attributes``, ``sizes``, ``cliques``, ``host``), so the loss is shared unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations
from math import prod

__all__ = ["RegionGraph"]

# Enumerating the subsets of a clique costs 2^|c|; beyond this many attributes the
# closure falls back to repeated pairwise intersection (such a clique has at least
# 2^20 cells, so this only guards against pathological inputs).
_SUBSET_LIMIT = 20


def _subsets(members: tuple[str, ...]) -> Iterable[tuple[str, ...]]:
    """Non-empty subsets of ``members`` (order preserved, so canonical in, canonical out)."""
    for k in range(1, len(members) + 1):
        yield from combinations(members, k)


def _closure(cliques: list[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """All non-empty intersections of families of ``cliques`` (the cliques included).

    s is such an intersection iff s = ∩{c ∈ cliques : c ⊇ s}; the map s ↦ that
    intersection is accumulated over every subset of every clique.
    """
    if any(len(c) > _SUBSET_LIMIT for c in cliques):
        return _pairwise_closure(cliques)
    meet: dict[tuple[str, ...], frozenset[str]] = {}
    for c in cliques:
        cs = frozenset(c)
        for s in _subsets(c):
            old = meet.get(s)
            meet[s] = cs if old is None else old & cs
    return {s for s, m in meet.items() if len(m) == len(s)}


def _pairwise_closure(cliques: list[tuple[str, ...]]) -> set[tuple[str, ...]]:
    order: dict[str, int] = {}
    for c in cliques:
        for a in c:
            order.setdefault(a, len(order))
    found = {frozenset(c) for c in cliques}
    frontier = set(found)
    while frontier:
        new = set()
        for one in frontier:
            for other in found:
                s = one & other
                if s and s not in found:
                    new.add(s)
        found |= new
        frontier = new
    return {tuple(sorted(s, key=order.__getitem__)) for s in found}


class RegionGraph:
    """Regions (canonical cliques) with parent/child containment edges.

    Attributes: ``attributes`` (domain order), ``sizes`` (attribute → cells),
    ``regions`` (list of canonical tuples; also exposed as ``cliques``), ``edges``
    (list of (parent index, child index)), ``parents[i]`` / ``children[i]`` (edge
    indices into ``edges``), ``kind`` ("saturated", "factor" or "custom"), ``size``
    (total cells over all regions: the memory of one pseudo-marginal vector).
    """

    def __init__(self, attributes: Sequence[str], sizes: dict[str, int] | Sequence[int],
                 regions: Iterable[Sequence[str]], edges: Iterable[tuple[Sequence[str], Sequence[str]]],
                 kind: str = "custom") -> None:
        attributes = tuple(attributes)
        if not isinstance(sizes, dict):
            sizes = dict(zip(attributes, sizes))
        self.attributes = attributes
        self.sizes = {a: int(sizes[a]) for a in attributes}
        self._position = {a: i for i, a in enumerate(attributes)}
        canon = []
        seen = set()
        for r in regions:
            c = self.canonical(r)
            if not c:
                raise ValueError("RegionGraph: regions must be non-empty")
            if c not in seen:
                seen.add(c)
                canon.append(c)
        canon.sort(key=lambda c: (-len(c), tuple(self._position[a] for a in c)))
        self.regions: list[tuple[str, ...]] = canon
        self.index = {r: i for i, r in enumerate(canon)}
        self.kind = kind
        self.edges: list[tuple[int, int]] = []
        self.parents: list[list[int]] = [[] for _ in canon]
        self.children: list[list[int]] = [[] for _ in canon]
        for parent, child in edges:
            pi, ci = self.index[self.canonical(parent)], self.index[self.canonical(child)]
            if not set(canon[ci]) < set(canon[pi]):
                raise ValueError(f"RegionGraph: edge {canon[pi]} → {canon[ci]} is not a strict containment")
            self.children[pi].append(len(self.edges))
            self.parents[ci].append(len(self.edges))
            self.edges.append((pi, ci))
        self._sets = [frozenset(r) for r in canon]
        self._by_attr: dict[str, list[int]] = {}
        for i, r in enumerate(canon):
            for a in r:
                self._by_attr.setdefault(a, []).append(i)
        self.size = sum(self.region_size(r) for r in canon)

    # --- construction ------------------------------------------------------------------
    @classmethod
    def saturated(cls, attributes: Sequence[str], sizes, cliques: Iterable[Sequence[str]]
                  ) -> RegionGraph:
        """The fully saturated region graph of ``cliques`` (Figure 1c; K&F §11.3)."""
        attributes = tuple(attributes)
        position = {a: i for i, a in enumerate(attributes)}
        cl = sorted({tuple(sorted(set(c), key=position.__getitem__)) for c in cliques if c})
        regions = _closure(cl)
        regions |= {(a,) for a in attributes if not any(a in r for r in regions)}
        edges = []
        for r in regions:
            if len(r) > _SUBSET_LIMIT:
                subs = [s for s in regions if set(s) < set(r)]
            else:
                subs = [s for s in _subsets(r) if s != r and s in regions]
            # Covering relation: keep s unless some other sub-region t of r contains it.
            subsets = [frozenset(s) for s in subs]
            for s, fs in zip(subs, subsets):
                if not any(fs < ft for ft in subsets):
                    edges.append((r, s))
        return cls(attributes, sizes, regions, edges, kind="saturated")

    @classmethod
    def capped(cls, attributes: Sequence[str], sizes, cliques: Iterable[Sequence[str]],
               capacity: int) -> RegionGraph:
        """A saturated region graph over junction-tree cliques that fit, plus the rest.

        The maximal cliques of the junction tree of ``cliques`` are kept, smallest
        first, while their cells total at most ``capacity``; measured cliques inside no
        kept one are added as they are, and the result is saturated (intersections and
        covering edges).  This sits between the junction tree and the saturated graph
        of Figure 1: inside the kept cliques consistency is global (their local
        polytope is the marginal polytope), elsewhere it is local.  With capacity 0 it
        is the saturated graph; with capacity ≥ JT-SIZE it is the junction tree.
        """
        from dpsql.pgm.junction_tree import JunctionTree

        attributes = tuple(attributes)
        if not isinstance(sizes, dict):
            sizes = dict(zip(attributes, sizes))
        cliques = [tuple(c) for c in cliques if c]
        tree = JunctionTree(attributes, sizes, cliques)
        kept, used = [], 0
        for c in sorted(tree.cliques, key=tree.clique_size):
            if used + tree.clique_size(c) <= capacity:
                kept.append(c)
                used += tree.clique_size(c)
        sets = [frozenset(k) for k in kept]
        tops = kept + [c for c in cliques if not any(frozenset(c) <= k for k in sets)]
        graph = cls.saturated(attributes, sizes, tops)
        graph.kind = "capped"
        return graph

    @classmethod
    def factor_graph(cls, attributes: Sequence[str], sizes, cliques: Iterable[Sequence[str]]
                     ) -> RegionGraph:
        """Cliques plus all singletons, with edges clique → each of its attributes (Figure 1b)."""
        attributes = tuple(attributes)
        position = {a: i for i, a in enumerate(attributes)}
        cl = {tuple(sorted(set(c), key=position.__getitem__)) for c in cliques if c}
        regions = cl | {(a,) for a in attributes}
        edges = [(c, (a,)) for c in cl if len(c) > 1 for a in c]
        return cls(attributes, sizes, regions, edges, kind="factor")

    @classmethod
    def build(cls, kind: str, attributes: Sequence[str], sizes, cliques,
              capacity: int | None = None) -> RegionGraph:
        if kind == "capped":
            if capacity is None:
                raise ValueError("a capped region graph needs a capacity (cells)")
            return cls.capped(attributes, sizes, cliques, capacity)
        if kind == "saturated":
            return cls.saturated(attributes, sizes, cliques)
        if kind == "factor":
            return cls.factor_graph(attributes, sizes, cliques)
        raise ValueError(f"region graph kind must be 'saturated', 'capped' or 'factor', got {kind!r}")

    # --- structure -----------------------------------------------------------------------
    @property
    def cliques(self) -> list[tuple[str, ...]]:
        """The regions (the name :class:`MarginalLoss` expects of a tree)."""
        return self.regions

    def canonical(self, attrs: Iterable[str]) -> tuple[str, ...]:
        attrs = tuple(attrs)
        for a in attrs:
            if a not in self._position:
                raise KeyError(f"attribute {a!r} is not in the region graph's domain")
        return tuple(sorted(set(attrs), key=self._position.__getitem__))

    def region_size(self, region: Sequence[str]) -> int:
        return prod(self.sizes[a] for a in region)

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.sizes[a] for a in self.regions[i])

    def host(self, clique: Iterable[str]) -> int:
        """Index of the smallest region containing ``clique`` (KeyError if none)."""
        want = frozenset(clique)
        if not want:
            return min(range(len(self.regions)), key=lambda i: self.region_size(self.regions[i]))
        best = -1
        for i in self._by_attr.get(next(iter(want)), ()):
            if want <= self._sets[i] and (
                    best < 0 or self.region_size(self.regions[i]) < self.region_size(self.regions[best])):
                best = i
        if best < 0:
            raise KeyError(f"no region contains {tuple(clique)}")
        return best

    def touching(self, attrs: Iterable[str]) -> list[int]:
        """Indices of the regions sharing at least one attribute with ``attrs``."""
        return sorted({i for a in attrs for i in self._by_attr.get(a, ())})

    def supports(self, attrs: Iterable[str]) -> bool:
        """Definition 2: some region contains ``attrs``."""
        try:
            self.host(attrs)
        except KeyError:
            return False
        return True

    def maximal(self) -> list[tuple[str, ...]]:
        """Regions without parents (the top layer)."""
        return [r for i, r in enumerate(self.regions) if not self.parents[i]]

    def describe(self) -> str:
        largest = max((self.region_size(r) for r in self.regions), default=0)
        return (f"{self.kind} region graph: {len(self.regions)} regions "
                f"({len(self.maximal())} maximal), {len(self.edges)} edges, "
                f"{self.size:,} cells, largest region {largest:,} cells")

    def __repr__(self) -> str:
        return f"RegionGraph({self.kind}, {len(self.regions)} regions, {len(self.edges)} edges)"
