"""Answering Kronecker queries by variable elimination (thesis §4.4, Algorithm 4).

For Q = Q_1 ⊗ … ⊗ Q_d, (Q p_θ)(z) = Σ_x Π_i Q_i(z_i, x_i) p_θ(x): the query factors are
joined to the model as extra pairwise factors between x_i and a new output variable
z_i (they may be negative; elimination does not care), and every x_i is summed out.
A factor Q_i = 1ᵀ (Total) means "sum x_i out" and adds nothing; Q_i = I keeps x_i as
an output unchanged.

Rather than eliminating over the raw potentials (which needs the partition function
and can create huge intermediates), the model is written through its calibrated
junction tree: on the smallest subtree whose cliques cover the query's attributes,
p = P(C_root) Π_c P(C_c | S_c).  Every factor is then a probability table in [0, 1],
so elimination is numerically safe in linear space, and a query inside one clique
reduces to a single table.  The elimination order is chosen greedily by the size of
the table each step creates; the whole plan (the einsum of every step and the
largest table) is built and cost-checked before any array is touched, and cached by
the query's structure so batches of queries share it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from math import prod
from string import ascii_letters

import numpy as np

from dpsql.errors import ModelTooLargeError
from dpsql.pgm.junction_tree import JunctionTree

__all__ = ["Eliminator", "KEEP"]

KEEP = "keep"  # role of an attribute kept as an output axis (an Identity factor)


class _Plan:
    __slots__ = ("sources", "steps", "final", "largest")

    def __init__(self, sources, steps, final, largest) -> None:
        self.sources = sources    # per initial operand: ("joint", node) | ("cond", node) | ("q", attr)
        self.steps = steps        # (operand indices, einsum spec)
        self.final = final        # (operand indices, einsum spec) producing the output
        self.largest = largest    # cells of the largest table the plan creates


class Eliminator:
    """Variable elimination over a calibrated junction tree (thesis Algorithm 4)."""

    def __init__(self, tree: JunctionTree, probs: Sequence[np.ndarray], capacity: int) -> None:
        self.tree = tree
        self.probs = list(probs)
        self.capacity = capacity
        self.depth = [0] * len(tree.cliques)
        for c in tree.preorder[1:]:
            self.depth[c] = self.depth[tree.parent[c]] + 1
        self._cond: dict[int, np.ndarray] = {}
        self._plans: dict[tuple, _Plan] = {}

    # --- factors of the subtree ----------------------------------------------------------
    def conditional(self, c: int) -> np.ndarray:
        """P(C_c | S_c) for the separator S_c with c's parent (0/0 := 0), cached."""
        out = self._cond.get(c)
        if out is None:
            sep = set(self.tree.separators[(self.tree.parent[c], c)])
            clique = self.tree.cliques[c]
            axes = tuple(i for i, a in enumerate(clique) if a not in sep)
            marg = self.probs[c].sum(axis=axes, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(marg > 0, self.probs[c] / marg, 0.0)
            self._cond[c] = out
        return out

    def _cover(self, attrs: Sequence[str]) -> list[int]:
        """Cliques covering ``attrs``: greedy set cover, most new attributes first."""
        left = set(attrs)
        chosen = []
        by_attr = self.tree.by_attribute
        while left:
            cands = {i for a in left for i in by_attr[a]}
            best = max(cands, key=lambda i: (len(left & self.tree.clique_sets[i]),
                                             -self.tree.clique_size(self.tree.cliques[i]), -i))
            chosen.append(best)
            left -= self.tree.clique_sets[best]
        return chosen

    def _subtree(self, nodes: Sequence[int]) -> tuple[int, list[int]]:
        """The smallest subtree containing ``nodes``: (its topmost node, all its nodes)."""
        parent, depth = self.tree.parent, self.depth
        members = set(nodes)
        heap = [(-depth[n], n) for n in members]
        heapq.heapify(heap)
        active = set(members)
        while len(active) > 1:
            _, n = heapq.heappop(heap)
            active.discard(n)
            p = parent[n]
            members.add(p)
            if p not in active:
                active.add(p)
                heapq.heappush(heap, (-depth[p], p))
        (top,) = active
        return top, sorted(members)

    # --- planning ------------------------------------------------------------------------
    def plan(self, roles: tuple[tuple[str, str | int], ...]) -> _Plan:
        """Elimination plan for attributes with roles KEEP or a row count (a Q factor).

        ``roles`` lists (attribute, KEEP | rows) in domain order; other attributes are
        summed out.  Raises ModelTooLargeError if a step would exceed the capacity.
        """
        cached = self._plans.get(roles)
        if cached is not None:
            return cached
        tree = self.tree
        attrs = [a for a, _ in roles]
        if attrs:
            top, nodes = self._subtree(self._cover(attrs))
        else:
            top, nodes = tree.root, [tree.root]
        var_size: dict[object, int] = {}
        factors: list[tuple] = []
        sources: list[tuple] = []
        for n in nodes:
            clique = tree.cliques[n]
            for a in clique:
                var_size[a] = tree.sizes[a]
            factors.append(tuple(clique))
            sources.append(("joint", n) if n == top else ("cond", n))
        output: list[object] = []
        for a, role in roles:
            if role == KEEP:
                output.append(a)
            else:
                z = ("z", a)
                var_size[z] = int(role)
                factors.append((z, a))
                sources.append(("q", a))
                output.append(z)
        steps, final, largest = _greedy(factors, output, var_size)
        if largest > self.capacity:
            raise ModelTooLargeError(
                f"answering this query needs a {largest:,}-cell intermediate table, over the "
                f"capacity of {self.capacity:,}", cliques=[tree.cliques[n] for n in nodes],
                size=largest, hint="ask for fewer attributes at once, or coarsen them")
        plan = _Plan(sources, steps, final, largest)
        self._plans[roles] = plan
        return plan

    def run(self, plan: _Plan, matrices: dict[str, np.ndarray]) -> np.ndarray:
        """Execute ``plan``; ``matrices`` holds the dense Q_i of attributes with a role."""
        ops: list[np.ndarray] = []
        for kind, key in plan.sources:
            if kind == "joint":
                ops.append(self.probs[key])
            elif kind == "cond":
                ops.append(self.conditional(key))
            else:
                ops.append(matrices[key])
        for idx, spec in plan.steps:
            args = [ops[i] for i in idx]
            ops.append(np.einsum(spec, *args, optimize=len(args) > 2))
        idx, spec = plan.final
        args = [ops[i] for i in idx]
        return np.einsum(spec, *args, optimize=len(args) > 2)


def _greedy(factors: list[tuple], output: list, var_size: dict):
    """Greedy min-size elimination over symbolic factors; returns einsum steps.

    Operands are referred to by position in a growing list (initial factors first,
    then each step's result), so the plan replays without any bookkeeping.  Scores
    live in a lazy heap and only the variables of each new table are rescored, so a
    query spanning a chain of a thousand cliques plans in near-linear time.
    """
    live = {i: tuple(f) for i, f in enumerate(factors)}
    nxt = len(factors)
    out_set = set(output)
    occ: dict[object, set[int]] = {}
    for i, f in live.items():
        for v in f:
            occ.setdefault(v, set()).add(i)
    elim = set(occ) - out_set
    order = {v: k for k, v in enumerate(sorted(occ, key=str))}

    def score(v):
        result = {u for i in occ[v] for u in live[i]} - {v}
        return prod(var_size[u] for u in result), order[v]

    version = dict.fromkeys(elim, 0)
    heap = [(score(v), 0, v) for v in elim]
    heap.sort(key=lambda e: e[0])
    steps = []
    largest = max((prod(var_size[v] for v in f) for f in factors), default=1)
    while elim:
        (cost, _), ver, v = heapq.heappop(heap)
        if v not in elim or ver != version[v]:
            continue
        touching = sorted(occ[v])
        inner = {u for i in touching for u in live[i]}
        # Sum out, in the same step, every other variable found only in these operands:
        # one einsum instead of several.
        gone = {u for u in inner if u in elim and occ[u] <= set(touching)}
        res = tuple(sorted(inner - gone, key=str))
        largest = max(largest, prod(var_size[u] for u in res), cost)
        steps.append((tuple(touching), _spec([live[i] for i in touching], res)))
        for i in touching:
            for u in live.pop(i):
                occ[u].discard(i)
        live[nxt] = res
        for u in res:
            occ[u].add(nxt)
        nxt += 1
        elim -= gone
        for u in res:
            if u in elim:
                version[u] += 1
                heapq.heappush(heap, (score(u), version[u], u))
    idx = tuple(live)
    final = (idx, _spec([live[i] for i in idx], tuple(output)))
    largest = max(largest, prod(var_size[u] for u in output) if output else 1)
    return steps, final, largest


def _spec(inputs: list[tuple], output: tuple) -> str:
    letters: dict[object, str] = {}
    for f in list(inputs) + [output]:
        for v in f:
            if v not in letters:
                if len(letters) == len(ascii_letters):
                    raise ModelTooLargeError(
                        "a query elimination step joins more than 52 attributes at once",
                        hint="ask for fewer attributes at once")
                letters[v] = ascii_letters[len(letters)]
    ins = ",".join("".join(letters[v] for v in f) for f in inputs)
    return ins + "->" + "".join(letters[v] for v in output)
