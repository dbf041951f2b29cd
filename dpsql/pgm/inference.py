"""The exact marginal oracle: sum-product belief propagation in log space (thesis §4.3).

MARGINAL-ORACLE(θ) of thesis Algorithms 2 and 3 maps log-potentials θ (one array per
maximal clique of a :class:`~dpsql.pgm.junction_tree.JunctionTree`) to the clique
marginals μ of p_θ.  Two passes over a rooted junction tree suffice (Koller &
Friedman ch. 10): an upward pass collects messages from the leaves, a downward pass
distributes them, and every clique ends with its calibrated belief.  All sums are
log-sum-exps shifted by their maximum, so potentials of any magnitude (mirror descent
drives some of them far negative) neither overflow nor underflow.

The schedule is compiled once per tree: every array is laid out in canonical
attribute order, so a separator message broadcasts into either endpoint clique with
a plain reshape, and each step is a handful of numpy calls with no Python objects
built in the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import log

import numpy as np

from dpsql.pgm.junction_tree import JunctionTree

__all__ = ["BeliefPropagation"]

_max = np.maximum.reduce
_sum = np.add.reduce
_exp, _log = np.exp, np.log


def _lse(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """log Σ exp over ``axes`` (kept as size-1 axes), shifted by the per-row maximum.

    The inner-loop twin of :func:`dpsql.pgm.factor.logsumexp`: bare ufunc reductions,
    because call overhead, not arithmetic, dominates on small cliques.  Inputs here
    are finite (potentials and messages of finite θ), so no -inf guard is needed.
    """
    if not axes:
        return x
    m = _max(x, axis=axes, keepdims=True)
    return _log(_sum(_exp(x - m), axis=axes, keepdims=True)) + m


class BeliefPropagation:
    """A compiled two-pass log-space sum-product schedule on a junction tree."""

    def __init__(self, tree: JunctionTree) -> None:
        self.tree = tree
        self.shapes = [tuple(tree.sizes[a] for a in c) for c in tree.cliques]
        n = len(tree.cliques)
        self.parent = list(tree.parent)
        self.preorder = list(tree.preorder)
        self.postorder = self.preorder[:0:-1]  # children before parents, root excluded
        # Per child c (edge parent(c) -> c): the axes each side sums out and the shape
        # in which the separator message broadcasts into the other side.
        self.up_axes: list[tuple[int, ...]] = [()] * n
        self.down_axes: list[tuple[int, ...]] = [()] * n
        self.up_shape: list[tuple[int, ...]] = [()] * n
        self.down_shape: list[tuple[int, ...]] = [()] * n
        for p, c in tree.edges:
            sep = set(tree.separators[(p, c)])
            child, par = tree.cliques[c], tree.cliques[p]
            self.up_axes[c] = tuple(i for i, a in enumerate(child) if a not in sep)
            self.down_axes[c] = tuple(i for i, a in enumerate(par) if a not in sep)
            self.up_shape[c] = tuple(tree.sizes[a] if a in sep else 1 for a in par)
            self.down_shape[c] = tuple(tree.sizes[a] if a in sep else 1 for a in child)

    def beliefs(self, theta: Sequence[np.ndarray]) -> tuple[list[np.ndarray], float]:
        """Calibrated log-beliefs b_i (unnormalised) and log Z for potentials ``theta``.

        ``theta[i]`` is the log-potential of clique i in canonical axis order; it is
        never modified.  exp(b_i − log Z) is the normalised marginal of clique i.
        """
        partial = list(theta)
        owned = [False] * len(partial)
        up: list[np.ndarray | None] = [None] * len(partial)
        for c in self.postorder:
            msg = _lse(partial[c], self.up_axes[c]).reshape(self.up_shape[c])
            up[c] = msg
            p = self.parent[c]
            if owned[p]:
                partial[p] += msg
            else:
                partial[p] = partial[p] + msg
                owned[p] = True
        belief = partial  # the root's partial is already its full belief
        for c in self.preorder[1:]:
            p = self.parent[c]
            down = _lse(belief[p] - up[c], self.down_axes[c]).reshape(self.down_shape[c])
            if owned[c]:
                belief[c] += down
            else:
                belief[c] = belief[c] + down
                owned[c] = True
        root = self.preorder[0]
        log_z = float(_lse(belief[root].ravel(), (0,))[0])
        return belief, log_z

    def marginals(self, theta: Sequence[np.ndarray], total: float = 1.0) -> list[np.ndarray]:
        """MARGINAL-ORACLE(θ): clique marginals of p_θ scaled to sum to ``total``."""
        belief, log_z = self.beliefs(theta)
        shift = log_z - log(total)
        return [np.exp(b - shift) for b in belief]

    def log_partition(self, theta: Sequence[np.ndarray]) -> float:
        return self.beliefs(theta)[1]
