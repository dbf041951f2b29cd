"""The measurement loss L(μ) over junction-tree clique marginals, and its gradient.

Thesis Problem 4 minimises a convex L(μ) over the marginal polytope; for linear
measurements with unequal noise (ICML appendix C.2) it is

    L2:  L(μ) = Σ_i ‖Q_i μ_{r_i} − y_i‖² / σ_i²,   ∇_{r_i} L = 2 Q_iᵀ(Q_i μ_{r_i} − y_i)/σ_i²
    L1:  L(μ) = Σ_i ‖Q_i μ_{r_i} − y_i‖₁ / σ_i,    ∇_{r_i} L = Q_iᵀ sign(Q_i μ_{r_i} − y_i)/σ_i

Every measured clique r lies in some maximal clique h of the junction tree; μ_r is a
sum over h's other axes and ∇_r L broadcasts back onto h, so the gradient is returned
directly on the tree's cliques, ready for θ_h ← θ_h − η ∇_h L (thesis Algorithm 2).
The clique→measurement map, axis permutations and operators are compiled once.

Many measured cliques often share one large host (all 1- and 2-way marginals of 16
binary attributes live in a single 65,536-cell clique).  Summing the host once per
group costs a full pass each; instead the groups of a host are projected through a
sum tree (:class:`_HostPlan`): axes no remaining group needs are summed out once for
all of them, and the groups are split on one axis at a time, so most of the work is
done on tables already halved or quartered.  The gradient runs the same tree
backwards: each group's gradient stays in its reduced shape and is broadcast only
where branches merge, instead of once onto the whole host per group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, Protocol, overload

import numpy as np

from dpsql.pgm.junction_tree import JunctionTree
from dpsql.pgm.measurement import DENSE_LIMIT, Entries, Measurement, _Operator, dense_entries
from dpsql.pgm.sparse import RowMatrix, expand_columns

__all__ = ["MarginalLoss", "SparseLoss", "SPARSE_MAX_NNZ", "measurement_matrix"]

_sum = np.add.reduce


class _Term:
    __slots__ = ("to_given", "given_shape", "to_canon", "op", "y", "weight", "query")

    def __init__(self, meas: Measurement, canon: tuple[str, ...], sizes: Mapping[str, int],
                 norm: str) -> None:
        given = meas.clique
        self.to_given = None if given == canon else tuple(canon.index(a) for a in given)
        self.given_shape = tuple(sizes[a] for a in given)
        self.to_canon = None if given == canon else tuple(given.index(a) for a in canon)
        self.op = _Operator(meas.query)
        self.query = meas.query
        self.y = meas.values
        self.weight = 1.0 / meas.stddev ** 2 if norm == "l2" else 1.0 / meas.stddev


class _Group:
    """Measurements sharing one clique: μ_r is projected once for all of them."""

    __slots__ = ("host", "sum_axes", "kd_shape", "canon_shape", "terms")

    def __init__(self, host: int, sum_axes, kd_shape, canon_shape) -> None:
        self.host, self.sum_axes, self.kd_shape, self.canon_shape = host, sum_axes, kd_shape, canon_shape
        self.terms: list[_Term] = []


class _HostPlan:
    """A sum tree computing every group marginal of one host clique.

    The forward program is a list of steps over numbered tables (0 is the host):
    ``(src, axes, dst, None)`` sums ``src`` over ``axes`` into table ``dst`` and
    ``(src, axes, None, k)`` sums it into the marginal of the host's k-th group.  All
    tables keep the host's dimensions (size 1 where summed), so a gradient broadcasts
    back against any ancestor without reshaping.  Splitting on the axis the fewest
    groups need sends most groups down the cheap, summed branch.
    """

    __slots__ = ("host", "groups", "steps", "release", "tables")

    def __init__(self, host: int, shape: tuple[int, ...], groups: list[_Group]) -> None:
        self.host = host
        self.groups = groups
        self.steps: list[tuple[int, tuple[int, ...], int | None, int | None]] = []
        self.tables = 1
        kept = [frozenset(i for i in range(len(shape)) if i not in g.sum_axes) for g in groups]
        self._build(0, frozenset(range(len(shape))), list(range(len(groups))), kept, shape)
        # Intermediate tables are dropped after their last read: only those on the
        # current path stay alive, each at most half its parent, so at most ~2× the host.
        last: dict[int, int] = {}
        for i, (src, _, _, _) in enumerate(self.steps):
            last[src] = i
        self.release = [tuple(s for s, j in last.items() if j == i) for i in range(len(self.steps))]

    def _build(self, slot: int, remaining: frozenset, members: list[int], kept, shape) -> None:
        if len(members) == 1:
            k = members[0]
            self.steps.append((slot, tuple(sorted(remaining - kept[k])), None, k))
            return
        free = remaining - frozenset().union(*(kept[k] for k in members))
        if free:
            new = self._table()
            self.steps.append((slot, tuple(sorted(free)), new, None))
            slot, remaining = new, remaining - free
        need = {a: sum(a in kept[k] for k in members) for a in remaining}
        a = min(remaining, key=lambda x: (need[x], -shape[x], x))
        keep = [k for k in members if a in kept[k]]
        drop = [k for k in members if a not in kept[k]]
        if drop:
            new = self._table()
            self.steps.append((slot, (a,), new, None))
            self._build(new, remaining - {a}, drop, kept, shape)
        self._build(slot, remaining - {a}, keep, kept, shape)

    def _table(self) -> int:
        self.tables += 1
        return self.tables - 1

    def marginals(self, table: np.ndarray) -> list[np.ndarray]:
        tables: list[np.ndarray | None] = [None] * self.tables
        tables[0] = table
        out: list[np.ndarray | None] = [None] * len(self.groups)
        for (src, axes, dst, k), free in zip(self.steps, self.release):
            t = tables[src]
            assert t is not None           # a table is released after its last read only
            r = _sum(t, axis=axes, keepdims=True) if axes else t
            if k is not None:
                out[k] = r.reshape(self.groups[k].canon_shape)
            elif dst is not None:
                tables[dst] = r
            for s in free:
                tables[s] = None
        done = [m for m in out if m is not None]
        assert len(done) == len(out)       # _build gives every group its step
        return done

    def gradient(self, accs: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        """Σ_k broadcast(accs[k]) onto the host; accs[k] has group k's kd_shape."""
        grads: list[np.ndarray | None] = [None] * self.tables
        for src, _, dst, k in reversed(self.steps):
            g = accs[k] if k is not None else grads[dst] if dst is not None else None
            if g is None:
                continue
            grads[src] = g if grads[src] is None else grads[src] + g
        g0 = grads[0]
        assert g0 is not None              # every step descends from the host, table 0
        return np.broadcast_to(g0, shape).copy()


class Cliques(Protocol):
    """What MarginalLoss reads of its cliques: a JunctionTree, or a RegionGraph's regions
    (estimate_relaxed)."""

    @property
    def attributes(self) -> Sequence[str]: ...

    @property
    def sizes(self) -> Mapping[str, int]: ...

    @property
    def cliques(self) -> list[tuple[str, ...]]: ...

    def host(self, clique: Iterable[str]) -> int: ...


class MarginalLoss:
    """L(μ) and ∇L(μ) for ``measurements`` on the cliques of ``tree``."""

    def __init__(self, tree: Cliques, measurements: Sequence[Measurement],
                 norm: str = "l2") -> None:
        if norm not in ("l1", "l2"):
            raise ValueError(f"loss norm must be 'l1' or 'l2', got {norm!r}")
        self.norm = norm
        self.tree = tree
        self.shapes = [tuple(tree.sizes[a] for a in c) for c in tree.cliques]
        position = {a: i for i, a in enumerate(tree.attributes)}
        groups: dict[tuple[str, ...], _Group] = {}
        for meas in measurements:
            canon = tuple(sorted(meas.clique, key=position.__getitem__))
            group = groups.get(canon)
            if group is None:
                h = tree.host(canon)
                hc = tree.cliques[h]
                sum_axes = tuple(i for i, a in enumerate(hc) if a not in canon)
                kd = tuple(tree.sizes[a] if a in canon else 1 for a in hc)
                group = groups[canon] = _Group(h, sum_axes, kd, tuple(tree.sizes[a] for a in canon))
            group.terms.append(_Term(meas, canon, tree.sizes, norm))
        self.groups = list(groups.values())
        self.hosts = sorted({g.host for g in self.groups})
        on_host: dict[int, list[_Group]] = {}
        for g in self.groups:
            on_host.setdefault(g.host, []).append(g)
        # A lone group is projected directly: the plan's bookkeeping would only slow
        # down trees with one measured clique per host (long chains).
        self.alone = [gs[0] for gs in on_host.values() if len(gs) == 1]
        self.shared = [_HostPlan(h, self.shapes[h], gs) for h, gs in on_host.items() if len(gs) > 1]

    @overload
    def _residuals(self, group: _Group, marg: np.ndarray, grad: Literal[True]) -> tuple[float, np.ndarray]: ...

    @overload
    def _residuals(self, group: _Group, marg: np.ndarray, grad: Literal[False]) -> tuple[float, None]: ...

    def _residuals(self, group: _Group, marg: np.ndarray, grad: bool) -> tuple[float, np.ndarray | None]:
        """Σ_t w_t‖Q_t μ_r − y_t‖ over the group's terms, and (``grad``) its gradient in μ_r
        (kd_shape)."""
        total = 0.0
        l2 = self.norm == "l2"
        acc = None
        for t in group.terms:
            x = marg if t.to_given is None else marg.transpose(t.to_given)
            r = t.op.matvec(x.ravel()) - t.y
            if l2:
                total += t.weight * float(r @ r)
                if not grad:
                    continue
                r *= 2.0 * t.weight
            else:
                total += t.weight * float(np.abs(r).sum())
                if not grad:
                    continue
                r = t.weight * np.sign(r)
            gr = t.op.rmatvec(r).reshape(t.given_shape)
            if t.to_canon is not None:
                gr = gr.transpose(t.to_canon)
            acc = gr if acc is None else acc + gr
        if not grad:
            return total, None
        return total, np.zeros(group.kd_shape) if acc is None else acc.reshape(group.kd_shape)

    def value(self, mu: Sequence[np.ndarray]) -> float:
        total = 0.0
        for g in self.alone:
            m = mu[g.host]
            total += self._residuals(g, (_sum(m, axis=g.sum_axes) if g.sum_axes else m)
                                     .reshape(g.canon_shape), False)[0]
        for plan in self.shared:
            for g, marg in zip(plan.groups, plan.marginals(mu[plan.host])):
                total += self._residuals(g, marg, False)[0]
        return total

    def __call__(self, mu: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray | None]]:
        """(L(μ), ∇L(μ)) with the gradient on the tree's cliques (None where L is flat)."""
        total = 0.0
        grads: list[np.ndarray | None] = [None] * len(mu)
        for g in self.alone:
            h = g.host
            m = mu[h]
            v, acc = self._residuals(g, (_sum(m, axis=g.sum_axes) if g.sum_axes else m)
                                     .reshape(g.canon_shape), True)
            total += v
            grads[h] = np.broadcast_to(acc, self.shapes[h]).copy() if g.sum_axes else np.array(acc)
        for plan in self.shared:
            accs = []
            for g, marg in zip(plan.groups, plan.marginals(mu[plan.host])):
                v, acc = self._residuals(g, marg, True)
                total += v
                accs.append(acc)
            grads[plan.host] = plan.gradient(accs, self.shapes[plan.host])
        return total, grads



def measurement_matrix(measurements: Sequence[Measurement], attributes: Sequence[str],
                       sizes: Mapping[str, int], tables: Sequence[tuple[str, ...]],
                       host: Callable[[tuple[str, ...]], int],
                       entries: Callable[[object], Entries | None], *, max_nnz: int | None = None,
                       max_hessian_nnz: int | None = None
                       ) -> tuple[RowMatrix, np.ndarray, np.ndarray] | None:
    """(P, w, y) with the L2 loss Σ w (Pτ − y)² over the concatenated ``tables`` (C order,
    each table's attributes in ``attributes`` order), each measurement placed on the table
    ``host`` picks for its clique: a junction tree's smallest maximal clique holding it
    (:class:`SparseLoss`) or a region graph's smallest region
    (:func:`dpsql.pgm.relaxed_polish.loss_matrix`).  Row r of P is a measured value, weighted
    by w = 1/σ²; its columns are the host cells that add up to the marginal cells the query
    reads.  ``entries`` gives a query's non-zeros (``dense_entries``, ``structured_entries``)
    or None when it cannot.  None, before anything is expanded, when ``entries`` refuses a
    query, P would have more than ``max_nnz`` non-zeros, or Σ_measurements min(Σ_rows
    nnz(query row)², host cells²), a bound on the Hessian PᵀWP's non-zeros, would exceed
    ``max_hessian_nnz``."""
    position = {a: i for i, a in enumerate(attributes)}
    shapes = [tuple(sizes[a] for a in t) for t in tables]
    cells = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    offsets = np.concatenate([[0], np.cumsum(cells)]).astype(np.int64)
    rows, cols, data, weights, values, nnz, hnnz, m0 = [], [], [], [], [], 0, 0, 0
    for meas in measurements:
        e = entries(meas.query)
        if e is None:
            return None
        i, j, v, (m, k) = e
        h = host(tuple(sorted(meas.clique, key=position.__getitem__)))
        table = tables[h]
        grid = np.indices(shapes[h]).reshape(len(table), -1)
        given = tuple(sizes[a] for a in meas.clique)
        cell = (np.ravel_multi_index(tuple(grid[table.index(a)] for a in meas.clique), given)
                if meas.clique else np.zeros(cells[h], dtype=np.int64))
        if max_nnz is not None:
            nnz += int(np.bincount(j, minlength=k) @ np.bincount(cell, minlength=k))
            if nnz > max_nnz:
                return None
        if max_hessian_nnz is not None:
            per_row = np.bincount(i, minlength=m).astype(np.int64)
            hnnz += int(min((per_row * per_row).sum(), cells[h] ** 2))
            if hnnz > max_hessian_nnz:
                return None
        r, c, d = expand_columns(i, j, v, k, cell, int(offsets[h]))   # columns: the host's cells
        rows.append(r + m0)
        cols.append(c)
        data.append(d)
        m0 += m
        weights.append(np.full(m, 1.0 / meas.stddev ** 2))
        values.append(np.asarray(meas.values, dtype=float))
    P = RowMatrix(np.concatenate(rows), np.concatenate(cols), np.concatenate(data), (m0, int(offsets[-1])))
    return P, np.concatenate(weights), np.concatenate(values)

#: The sparse loss is used when its matrix has at most this many non-zeros (~200 MB).
SPARSE_MAX_NNZ = 12_000_000


class SparseLoss:
    """The same L2 loss as :class:`MarginalLoss`, as one sparse matrix P from the tree's
    concatenated clique tables to every measured value: L = Σ w (Pμ − y)², ∇L = 2Pᵀ(w ⊙ r).

    Projecting each host onto its measured cliques and applying the queries is fused into
    two sparse products per evaluation, instead of a handful of numpy calls per measured
    clique: on small and medium trees (where Python overhead, not arithmetic, dominates the
    iteration) this is the faster of the two.  P is a :class:`dpsql.pgm.sparse.RowMatrix`
    (numpy only: the fit imports no scipy, issue 17); ``P.to_scipy()`` gives it to solvers.
    :meth:`build` returns None when the matrix would be too large (large queries, or trees
    of many millions of cells).
    """

    def __init__(self, tree: JunctionTree, P: RowMatrix, weights: np.ndarray,
                 values: np.ndarray) -> None:
        self.tree = tree
        self.norm = "l2"
        self.shapes = [tuple(tree.sizes[a] for a in c) for c in tree.cliques]
        sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.P = P
        self.w, self.y = weights, values
        touched = np.bincount(np.searchsorted(self.offsets, P.col, side="right") - 1, minlength=len(sizes))
        self.hosts = [i for i in range(len(sizes)) if touched[i]]

    @classmethod
    def build(cls, tree: JunctionTree, measurements: Sequence[Measurement],
              dense_limit: int = DENSE_LIMIT, max_nnz: int = SPARSE_MAX_NNZ) -> SparseLoss | None:
        """None when a query has more than ``dense_limit`` entries (it is densified once) or
        the matrix would have more than ``max_nnz`` non-zeros."""
        built = measurement_matrix(measurements, tree.attributes, tree.sizes, tree.cliques, tree.host,
                                   lambda q: dense_entries(q, dense_limit), max_nnz=max_nnz)
        return None if built is None else cls(tree, *built)

    def hessian_nnz_bound(self) -> int:
        """nnz(PᵀWP) ≤ min(Σ_rows nnz(row)², columns²), without building anything."""
        per_row = self.P.row_counts().astype(np.int64)
        return int(min((per_row * per_row).sum(), self.P.shape[1] ** 2))

    def _residual(self, mu: Sequence[np.ndarray]) -> np.ndarray:
        return self.P @ np.concatenate([np.ravel(m) for m in mu]) - self.y

    def value(self, mu: Sequence[np.ndarray]) -> float:
        r = self._residual(mu)
        return float(self.w @ (r * r))

    def flat_value(self, mu: np.ndarray) -> float:
        """L(μ) for the tables concatenated (``BeliefPropagation.flatten``)."""
        r = self.P @ mu - self.y
        return float(self.w @ (r * r))

    def flat_call(self, mu: np.ndarray) -> tuple[float, np.ndarray]:
        """(L(μ), ∇L(μ)) on the concatenated tables; the gradient is 0 off the measured hosts."""
        r = self.P @ mu - self.y
        wr = self.w * r
        return float(wr @ r), 2.0 * self.P.rmatvec(wr)

    def __call__(self, mu: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray | None]]:
        value, g = self.flat_call(np.concatenate([np.ravel(m) for m in mu]))
        grads: list[np.ndarray | None] = [None] * len(self.shapes)
        for i in self.hosts:
            grads[i] = g[self.offsets[i]:self.offsets[i + 1]].reshape(self.shapes[i])
        return value, grads
