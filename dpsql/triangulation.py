"""Greedy triangulation of the graph a set of cliques induces (thesis §4.3, Remark 1).

The elimination order and its maximal cliques decide the junction tree Private-PGM builds
(``dpsql.pgm.junction_tree``) and so its JT-SIZE, the cells exact inference needs.  The
planner (``dpsql.plan``) caps candidates by that size before anything is measured; both
packages take it from here, below them both, so that ``plan`` does not import ``pgm``
(issue 36 item 5).  Public metadata only: attribute sizes and clique lists.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from math import prod

__all__ = ["AIM_MODEL_CELLS", "MAX_MODEL_CELLS", "canonical", "elimination_order", "maximal_cliques",
           "tree_cells"]

#: The largest junction tree, in cells, the exact model may build: the one default of the
#: model-size cap (issue 36 item 4; it was written five times with three values).  The
#: planner's ``Caps.model_size``, the fit's ``dpsql.pgm.DEFAULT_CAPACITY`` and dpsql.toml's
#: ``[planner] max_model_cells`` (``dpsql.config_schema``) all read it, so the library's default
#: is the engine's.  2·10⁷ float64 cells: 160 MB of parameters.
MAX_MODEL_CELLS = 20_000_000
#: AIM's own cap on the model its rounds may grow (MAX-SIZE, thesis §5.6.5: 80 MB of float64);
#: the engine runs AIM under the smaller of the two (``dpsql.engine.aim.aim_options``).
AIM_MODEL_CELLS = 80 * 2**20 // 8


def canonical(order: dict[str, int], clique: Iterable[str]) -> tuple[str, ...]:
    """``clique``'s attributes in domain order (``order``: attribute -> position)."""
    return tuple(sorted(set(clique), key=order.__getitem__))


# The weighted min-fill order is tried only when min-weight gives more cells than
# this (smaller trees are cheap either way and keep the structure they always had)
# and the graph has at most _FILL_ATTRIBUTES connected attributes (it rescores
# two-step neighbourhoods: ~0.1 s at 64 dense attributes, ~1 s at 100).
_FILL_THRESHOLD = 1_000_000
_FILL_ATTRIBUTES = 64


def _graph(sizes: dict[str, int], cliques: Iterable[Sequence[str]]) -> dict[str, set[str]]:
    nbrs: dict[str, set[str]] = {a: set() for a in sizes}
    for clique in cliques:
        clique = list(clique)
        for i, u in enumerate(clique):
            for v in clique[i + 1:]:
                if u != v:
                    nbrs[u].add(v)
                    nbrs[v].add(u)
    return nbrs


def _cells(sizes: dict[str, int], order: list[str], elim: list[tuple[str, ...]]) -> int:
    return sum(prod(sizes[a] for a in c) for c in maximal_cliques(order, elim))


def elimination_order(sizes: dict[str, int], cliques: Iterable[Sequence[str]],
                      ) -> tuple[list[str], list[tuple[str, ...]]]:
    """A greedy elimination order over the attributes in ``sizes``.

    Min-weight first: at each step the attribute whose elimination creates the
    smallest new clique (in cells) goes next; ties are broken by degree, then by
    attribute position, so the order is deterministic.  When that tree exceeds
    10⁶ cells and at most 64 attributes are connected, weighted min-fill (the
    attribute whose elimination adds the fewest fill-in cells, Σ n_a·n_b over the
    new edges a–b) is tried too and the smaller tree is kept: min-weight is myopic
    and can be badly wrong (adult with 15 random triples: 56 million cells against
    5.3 million).  Returns the order and the elimination clique ``{v} ∪ N(v)`` of
    every step (canonical order).
    """
    cliques = [list(c) for c in cliques]
    graph = _graph(sizes, cliques)
    connected = sum(1 for ns in graph.values() if ns)
    order, elim = _min_weight(sizes, graph)
    best = _cells(sizes, order, elim)
    if best > _FILL_THRESHOLD and connected <= _FILL_ATTRIBUTES:
        alt_order, alt_elim = _min_fill(sizes, _graph(sizes, cliques))
        if _cells(sizes, alt_order, alt_elim) < best:
            return alt_order, alt_elim
    return order, elim


def _greedy(sizes: dict[str, int], nbrs: dict[str, set[str]], score, rescore
            ) -> tuple[list[str], list[tuple[str, ...]]]:
    """Greedy elimination with a lazy heap, shared by min-weight and min-fill: take the
    best-scored attribute, connect its neighbours, and rescore only the attributes
    ``rescore(v, neighbours)`` names (stale heap entries are skipped by version)."""
    position = {a: i for i, a in enumerate(sizes)}
    version = {a: 0 for a in sizes}
    heap = [(score(a), 0, a) for a in sizes]
    heapq.heapify(heap)
    order: list[str] = []
    elim_cliques: list[tuple[str, ...]] = []
    done: set[str] = set()
    while heap:
        _, ver, v = heapq.heappop(heap)
        if v in done or ver != version[v]:
            continue
        ns = nbrs.pop(v)
        done.add(v)
        order.append(v)
        elim_cliques.append(canonical(position, ns | {v}))
        nl = list(ns)
        for u in nl:
            nbrs[u].discard(v)
            nbrs[u].update(w for w in nl if w != u)
        for u in rescore(v, nl):
            version[u] += 1
            heapq.heappush(heap, (score(u), version[u], u))
    return order, elim_cliques


def _min_weight(sizes: dict[str, int], nbrs: dict[str, set[str]]
                ) -> tuple[list[str], list[tuple[str, ...]]]:
    """Greedy min-weight elimination.  A score depends only on the attribute's own
    neighbourhood, so after each step only the eliminated attribute's neighbours are
    rescored: a chain of a thousand attributes, or a dense graph of hundreds,
    triangulates in well under a second."""
    position = {a: i for i, a in enumerate(sizes)}

    def score(v: str) -> tuple[int, int, int]:
        ns = nbrs[v]
        return (sizes[v] * prod(sizes[u] for u in ns), len(ns), position[v])

    return _greedy(sizes, nbrs, score, lambda v, nl: nl)


def _min_fill(sizes: dict[str, int], nbrs: dict[str, set[str]]
              ) -> tuple[list[str], list[tuple[str, ...]]]:
    """Greedy weighted min-fill elimination (ties: clique cells, then position).

    The fill of v depends on the edges among its neighbours, so eliminating v
    rescores its neighbours and their neighbours.  Each score is one small matrix
    product over the neighbourhood's adjacency.
    """
    import numpy as np

    names = list(sizes)
    position = {a: i for i, a in enumerate(names)}
    n = len(names)
    adj = np.zeros((n, n), dtype=bool)
    for a, ns in nbrs.items():
        for b in ns:
            adj[position[a], position[b]] = True
    w = np.array([float(sizes[a]) for a in names])

    def score(v: str) -> tuple[float, int, int]:
        idx = [position[u] for u in nbrs[v]]
        if len(idx) < 2:
            fill = 0.0
        else:
            ws = w[idx]
            missing = ~adj[np.ix_(idx, idx)]
            np.fill_diagonal(missing, False)
            fill = float(ws @ missing @ ws) / 2.0
        return (fill, sizes[v] * prod(sizes[u] for u in nbrs[v]), position[v])

    def rescore(v: str, nl: list[str]) -> set[str]:
        # keep the adjacency matrix in step with the neighbour sets _greedy just updated
        pv = position[v]
        adj[pv, :] = False
        adj[:, pv] = False
        ix = [position[u] for u in nl]
        adj[np.ix_(ix, ix)] = True
        adj[ix, ix] = False
        touched = set(nl)
        for u in nl:
            touched.update(nbrs[u])
        return touched

    return _greedy(sizes, nbrs, score, rescore)


def maximal_cliques(order: list[str], elim_cliques: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    # An elimination clique C_v that is not maximal lies inside an earlier C_u, and
    # then v ∈ C_u; so only earlier cliques containing v need checking.
    containing: dict[str, list[int]] = {}
    keep: list[tuple[str, ...]] = []
    sets = [frozenset(c) for c in elim_cliques]
    for i, v in enumerate(order):
        cand = containing.get(v, [])
        if not any(sets[i] <= sets[j] for j in cand):
            keep.append(elim_cliques[i])
        for a in elim_cliques[i]:
            containing.setdefault(a, []).append(i)
    return keep


def tree_cells(sizes: dict[str, int], cliques: Iterable[Sequence[str]]) -> int:
    """JT-SIZE: the cells of the junction tree for ``cliques`` over the attributes of
    ``sizes`` (in domain order; an attribute in no clique is a clique of its own), the
    ``size`` of ``dpsql.pgm.junction_tree.JunctionTree`` without building the tree."""
    order, elim = elimination_order(sizes, cliques)
    return _cells(sizes, order, elim)
