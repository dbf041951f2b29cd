"""Hierarchical (tree) strategies over one ordered attribute, kept implicit (issue 35).

A b-ary tree over n ordered cells measures, at each level l = 0 (the root, one node) … L
(the leaves), the counts of the level's blocks of s_l consecutive cells (Hay et al. 2010;
H_b of Qardaji, Yang, Li 2013).  The radices may differ per level (mixed radix r_1…r_L)
so that N = r_1·…·r_L is close above n; the N − n cells past the domain ("phantom"
cells) are empty by construction, and a level's rows that only cover phantom cells are
measured all the same (a zero count plus noise: no record touches them, so they cost no
privacy).  That keeps every block at level l exactly s_l = N / (r_1·…·r_l) cells, which is
what makes the whole tree's algebra closed-form:

* with per-level noise variances v_l, AᵀA = Σ_l (s_l / v_l) P_l where P_l projects onto
  vectors constant on level-l blocks.  The P_l are nested (P_0 ⊂ … ⊂ P_L = I), so with
  D_k = P_k − P_{k−1} (orthogonal projections, Σ D_k = I)
  AᵀA = Σ_k λ_k D_k,  λ_k = Σ_{l≥k} s_l / v_l,  (AᵀA)⁻¹ = Σ_k D_k / λ_k;
* the variance of the least-squares answer to a query q is therefore
  Σ_k (‖P_k q‖² − ‖P_{k−1} q‖²) / λ_k, and ‖P_l q‖² = Σ_blocks (Σ_block q)² / s_l:
  O(n) per query and level, closed-form per prefix (:meth:`Tree.prefix_norms`) and per
  workload gram (:func:`semiseparable_norms` for prefix and range workloads);
* the least-squares estimate itself is two passes over the tree (Hay et al. 2010,
  "weighted tree consistency", generalised to per-level variances as a Kalman smoother on
  the tree): up, each node's estimate from its subtree; down, each parent's discrepancy
  shared equally among its children (siblings have equal variances).  O(N).

Nothing here is ever n×n: levels are reshaped sums of the padded cell vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpsql.errors import ProgrammingError
from dpsql.linalg.base import QueryMatrix
from dpsql.linalg.composite import Union
from dpsql.linalg.leaves import Bucket

__all__ = ["Tree", "SemiseparableTraces", "semiseparable_norms"]


class Tree:
    """A mixed-radix tree over ``n`` ordered cells; level l has ``nodes[l]`` blocks of
    ``sizes[l]`` cells each (level 0 the root, level L = len(radices) the leaves)."""

    def __init__(self, n: int, radices: Sequence[int]) -> None:
        self.n = int(n)
        self.radices = tuple(int(r) for r in radices)
        if self.n < 1 or any(r < 2 for r in self.radices):
            raise ProgrammingError(f"a tree needs n ≥ 1 and radices ≥ 2, got {n}, {radices}")
        self.N = math.prod(self.radices)
        if self.N < self.n:
            raise ProgrammingError(f"radices {self.radices} cover {self.N} cells, fewer than {n}")
        nodes = [1]
        for r in self.radices:
            nodes.append(nodes[-1] * r)
        self.nodes = tuple(nodes)
        self.sizes = tuple(self.N // k for k in nodes)

    @property
    def levels(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Tree({self.n}, radices={self.radices})"

    # -- the strategy's rows ------------------------------------------------------------
    def level(self, lv: int) -> Bucket:
        """Level l as a query over the n real cells (rows over phantom cells are zero)."""
        return Bucket(self.n, np.arange(self.n, dtype=np.int64) // self.sizes[lv],
                      buckets=self.nodes[lv])

    def matrix(self, weights: Sequence[float]) -> QueryMatrix:
        """The strategy: level l's rows weighted by weights[l], root first."""
        return Union([float(w) * self.level(lv) for lv, w in enumerate(weights)])

    def pad(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[0] != self.n:
            raise ProgrammingError(f"expected {self.n} cells, got {x.shape[0]}")
        out = np.zeros((self.N,) + x.shape[1:], dtype=x.dtype)
        out[:self.n] = x
        return out

    def sums(self, x: np.ndarray) -> list[np.ndarray]:
        """Every level's block sums of the cell vector x, root first (exact for integers)."""
        cur = self.pad(np.asarray(x))
        out = [cur]
        for r in reversed(self.radices):
            cur = cur.reshape(-1, r).sum(axis=1)
            out.append(cur)
        return out[::-1]

    # -- least squares ------------------------------------------------------------------
    def solve(self, ys: Sequence[np.ndarray], variances: Sequence[float]) -> np.ndarray:
        """The least-squares cell estimates (length N) from noisy level sums ``ys`` with
        per-level noise variances (``inf`` for a level not measured; the leaves must be)."""
        v = [float(x) for x in variances]
        if len(ys) != self.levels or len(v) != self.levels:
            raise ProgrammingError(f"expected {self.levels} levels of measurements")
        if not math.isfinite(v[-1]) or v[-1] <= 0:
            raise ProgrammingError("the leaves of a tree strategy must be measured")
        z = [np.empty(0)] * self.levels
        V = [0.0] * self.levels
        z[-1] = np.asarray(ys[-1], dtype=np.float64)
        V[-1] = v[-1]
        for lv in range(self.levels - 2, -1, -1):
            r = self.radices[lv]
            c = z[lv + 1].reshape(-1, r).sum(axis=1)
            C = r * V[lv + 1]
            if math.isfinite(v[lv]):
                z[lv] = (np.asarray(ys[lv], dtype=np.float64) / v[lv] + c / C) / (1.0 / v[lv] + 1.0 / C)
                V[lv] = 1.0 / (1.0 / v[lv] + 1.0 / C)
            else:
                z[lv], V[lv] = c, C
        x = z[0]
        for lv in range(self.levels - 1):
            r = self.radices[lv]
            kids = z[lv + 1].reshape(-1, r)
            x = (kids + ((x - kids.sum(axis=1)) / r)[:, None]).reshape(-1)
        return x

    def eigenvalues(self, variances: Sequence[float]) -> np.ndarray:
        """λ_k = Σ_{l≥k} s_l / v_l: AᵀA's eigenvalue on D_k (0 where nothing is measured)."""
        per = np.array([s / v if math.isfinite(v) else 0.0
                        for s, v in zip(self.sizes, variances)], dtype=np.float64)
        return np.cumsum(per[::-1])[::-1]

    # -- ‖P_l q‖² -----------------------------------------------------------------------
    def norms(self, Q: np.ndarray) -> np.ndarray:
        """‖P_l q‖² for each row q of Q (k × n): a k × levels array."""
        Q = np.atleast_2d(np.asarray(Q, dtype=np.float64))
        cur = self.pad(Q.T)                     # N × k
        out = np.empty((Q.shape[0], self.levels))
        out[:, -1] = np.sum(Q * Q, axis=1)
        for lv in range(self.levels - 2, -1, -1):
            cur = cur.reshape(-1, self.radices[lv], cur.shape[-1]).sum(axis=1)
            out[:, lv] = np.sum(cur * cur, axis=0) / self.sizes[lv]
        return out

    def prefix_norms(self, t: np.ndarray) -> np.ndarray:
        """‖P_l q‖² for the prefix rows q = 1[0..t] (t inclusive): full blocks before t's
        block contribute s_l each, t's block (t mod s_l + 1)² / s_l."""
        t = np.asarray(t, dtype=np.int64)
        out = np.empty((t.size, self.levels))
        for lv, s in enumerate(self.sizes):
            full, part = np.divmod(t + 1, s)
            out[:, lv] = full * float(s) + part.astype(np.float64) ** 2 / s
        return out

    def variance(self, norms: np.ndarray, variances: Sequence[float]) -> np.ndarray:
        """q (AᵀA)⁻¹ qᵀ per row of ``norms`` (rows of ‖P_l q‖², from :meth:`norms`):
        Σ_k (‖P_k q‖² − ‖P_{k−1} q‖²) / λ_k; inf where a needed level is unmeasured."""
        norms = np.atleast_2d(norms)
        lam = self.eigenvalues(variances)
        parts = np.diff(norms, axis=1, prepend=0.0)
        # rounding leaves tiny negative or positive parts where q is constant on blocks
        parts = np.where(np.abs(parts) <= 1e-12 * np.abs(norms[:, -1:]), 0.0, parts)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(parts == 0.0, 0.0, parts / lam[None, :])
        return terms.sum(axis=1)


class SemiseparableTraces:
    """tr(P_l G) per level for the gram G[i, j] = a[min(i, j)] · b[max(i, j)] of a prefix
    or range workload (``linalg.ranges.Semiseparable``), padded with zero rows and columns:
    the sum of ‖P_l q‖² over the workload's rows, without its rows.

    Per block B starting at u: Σ_{i,j∈B} G = Σ_{j∈B} b_j (a_j + 2 Σ_{u≤i<j} a_i); with the
    running sums cum[j] = Σ_{i<j} a_i that is Σ_{j∈B} b_j (a_j + 2 cum[j]) − 2 cum[u] Σ_{j∈B} b_j,
    so over all blocks of a level only the last part depends on the level: block sums of b
    (one reshape from the level below) times cum at the block starts.  The level-free parts
    are computed once per gram; each tree then costs O(N)."""

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        a = np.asarray(a, dtype=np.float64)
        self.b = np.asarray(b, dtype=np.float64)
        self.cum = np.concatenate([[0.0], np.cumsum(a)])      # cum[j] = Σ_{i<j} a_i
        self.common = float(np.sum(self.b * (a + 2.0 * self.cum[:-1])))

    def levels(self, tree: Tree) -> np.ndarray:
        starts = np.full(tree.N, self.cum[-1])
        starts[:tree.n] = self.cum[:-1]
        bsum = tree.pad(self.b)
        out = np.empty(tree.levels)
        for lv in range(tree.levels - 1, -1, -1):
            s = tree.sizes[lv]
            out[lv] = (self.common - 2.0 * float(starts[::s] @ bsum)) / s
            if lv:
                bsum = bsum.reshape(-1, tree.radices[lv - 1]).sum(axis=1)
        return out


def semiseparable_norms(tree: Tree, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:class:`SemiseparableTraces` of (a, b) on one tree."""
    return SemiseparableTraces(a, b).levels(tree)
