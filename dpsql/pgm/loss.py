"""The measurement loss L(μ) over junction-tree clique marginals, and its gradient.

Thesis Problem 4 minimises a convex L(μ) over the marginal polytope; for linear
measurements with unequal noise (ICML appendix C.2) it is

    L2:  L(μ) = Σ_i ‖Q_i μ_{r_i} − y_i‖² / σ_i²,   ∇_{r_i} L = 2 Q_iᵀ(Q_i μ_{r_i} − y_i)/σ_i²
    L1:  L(μ) = Σ_i ‖Q_i μ_{r_i} − y_i‖₁ / σ_i,    ∇_{r_i} L = Q_iᵀ sign(Q_i μ_{r_i} − y_i)/σ_i

Every measured clique r lies in some maximal clique h of the junction tree; μ_r is a
sum over h's other axes and ∇_r L broadcasts back onto h, so the gradient is returned
directly on the tree's cliques, ready for θ_h ← θ_h − η ∇_h L (thesis Algorithm 2).
The clique→measurement map, axis permutations and operators are compiled once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsql.pgm.junction_tree import JunctionTree
from dpsql.pgm.measurement import Measurement, _Operator

__all__ = ["MarginalLoss"]

_sum = np.add.reduce


class _Term:
    __slots__ = ("to_given", "given_shape", "to_canon", "op", "y", "weight", "query")

    def __init__(self, meas: Measurement, canon: tuple[str, ...], sizes: dict[str, int],
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


class MarginalLoss:
    """L(μ) and ∇L(μ) for ``measurements`` on the cliques of ``tree``."""

    def __init__(self, tree: JunctionTree, measurements: Sequence[Measurement],
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

    @staticmethod
    def _marginal(group: _Group, mu: Sequence[np.ndarray]) -> np.ndarray:
        m = mu[group.host]
        marg = _sum(m, axis=group.sum_axes) if group.sum_axes else m
        return marg.reshape(group.canon_shape)

    def value(self, mu: Sequence[np.ndarray]) -> float:
        total = 0.0
        l2 = self.norm == "l2"
        for g in self.groups:
            marg = self._marginal(g, mu)
            for t in g.terms:
                x = marg if t.to_given is None else marg.transpose(t.to_given)
                r = t.op.matvec(x.ravel()) - t.y
                total += t.weight * (float(r @ r) if l2 else float(np.abs(r).sum()))
        return total

    def __call__(self, mu: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray | None]]:
        """(L(μ), ∇L(μ)) with the gradient on the tree's cliques (None where L is flat)."""
        total = 0.0
        l2 = self.norm == "l2"
        grads: list[np.ndarray | None] = [None] * len(mu)
        for g in self.groups:
            marg = self._marginal(g, mu)
            acc = None
            for t in g.terms:
                x = marg if t.to_given is None else marg.transpose(t.to_given)
                r = t.op.matvec(x.ravel()) - t.y
                if l2:
                    total += t.weight * float(r @ r)
                    r *= 2.0 * t.weight
                else:
                    total += t.weight * float(np.abs(r).sum())
                    r = t.weight * np.sign(r)
                gr = t.op.rmatvec(r).reshape(t.given_shape)
                if t.to_canon is not None:
                    gr = gr.transpose(t.to_canon)
                acc = gr if acc is None else acc + gr
            acc = acc.reshape(g.kd_shape)
            h = g.host
            if grads[h] is None:
                grads[h] = np.broadcast_to(acc, self.shapes[h]).copy() if g.sum_axes else np.array(acc)
            else:
                grads[h] += acc
        return total, grads
