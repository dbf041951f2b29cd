"""The marginals algebra and OPT_M (thesis §3.6-3.7, Theorems 5-11, Definition 24).

Marginal Gram matrices G(u) = Σ_a u(a)·C(a), C(a) = ⊗_i (I if i ∈ a else 1), share one
eigenbasis (Theorem 7): on the eigenspace of a subset a (dimension mult(a) = Π_{i∈a}(n_i−1))
G(u) has eigenvalue κ_u(a) = Σ_{b ⊇ a} u(b)·c(b) with c(b) = Π_{i∉b} n_i.  So κ = Y u with the
triangular Y of Theorem 11, and every quantity OPT_M needs is a sum over subsets:

* a workload enters only through κ_w (Theorem 8).  For a Kron term with per-factor grams
  V_i, projecting V_i onto span{I, 1} gives κ_w(a) = w² Π_{i∈a} β_i Π_{i∉a} (sum V_i / n_i),
  with β_i the I-coefficient -- no enumeration of the 2^d weights is needed;
* the strategy M(θ) has gram G(θ²), so the loss (Theorem 9) is
  ‖θ‖² Σ_a mult(a) κ_w(a) / κ_θ²(a), and the strategy supports W iff κ_θ²(a) > 0
  wherever κ_w(a) > 0 (both are energies of the same eigenspace);
* the SVD bound (Theorem 10) is (Σ_a mult(a) √κ_w(a))² / n.  The thesis writes the
  multiplicity as c(¬a), the row count of V(a); the eigenspace's dimension is
  Π_{i∈a}(n_i − 1), which is what a dense eigendecomposition confirms (tests);
* the closed form of Theorem 11 is θ² = Y⁻¹ √(Y w).

All sums are restricted to the downward closure S of the workload's supports: κ_w vanishes
outside S, and a strategy weight outside S only adds sensitivity, so |S| parameters (576
for all ≤3-way marginals on 15 attributes) replace 2^d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from collections.abc import Iterable, Sequence

import numpy as np
import scipy.linalg as sla
import scipy.optimize as so

from dpsql.plan.opt0 import Progress
from dpsql.plan.workload import WorkloadTerms

__all__ = ["MarginalSpace", "downward_closure", "workload_kappa", "term_kappas", "marginal_loss",
           "marginal_loss_grad", "closed_form", "opt_marginals_theta", "marginal_svd_bound"]


def downward_closure(cliques: Iterable[Iterable[int]]) -> list[frozenset[int]]:
    """All subsets of the given cliques, sorted by size then lexicographically."""
    out: set[frozenset[int]] = set()
    for c in cliques:
        c = tuple(sorted(c))
        for k in range(len(c) + 1):
            out.update(frozenset(s) for s in combinations(c, k))
    return sorted(out, key=lambda s: (len(s), sorted(s)))


_SPACES: dict = {}


@dataclass(frozen=True, eq=False)
class MarginalSpace:
    """A downward-closed family S of attribute subsets over a domain of ``shape``."""

    shape: tuple[int, ...]
    subsets: tuple[frozenset[int], ...]
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, shape: Sequence[int], cliques: Iterable[Iterable[int]]) -> MarginalSpace:
        """The space of the cliques' downward closure (the last few are kept, so repeated
        evaluations of one workload share their cached matrices)."""
        shape = tuple(int(n) for n in shape)
        supports = frozenset(frozenset(c) for c in cliques)
        key = (shape, supports)
        space = _SPACES.get(key)
        if space is None:
            space = cls(shape, tuple(downward_closure(supports)))
            _SPACES[key] = space
            while len(_SPACES) > 8:
                _SPACES.pop(next(iter(_SPACES)))
        return space

    @property
    def size(self) -> int:
        return len(self.subsets)

    def members(self) -> np.ndarray:
        """Boolean |S|×d incidence matrix (computed once; callers must not modify it)."""
        M = self._memo.get("members")
        if M is None:
            M = np.zeros((len(self.subsets), len(self.shape)), dtype=bool)
            for k, s in enumerate(self.subsets):
                M[k, list(s)] = True
            M.flags.writeable = False
            self._memo["members"] = M
        return M

    def index(self) -> dict[frozenset[int], int]:
        idx = self._memo.get("index")
        if idx is None:
            idx = self._memo["index"] = {s: k for k, s in enumerate(self.subsets)}
        return idx

    def subset_matrix(self):
        """Sparse 0/1 matrix with entry (a, b) = 1 when a ⊆ b (both in S)."""
        import scipy.sparse as sp

        idx = self.index()
        rows, cols = [], []
        for kb, b in enumerate(self.subsets):
            members = sorted(b)
            for r in range(len(members) + 1):
                for a in combinations(members, r):
                    rows.append(idx[frozenset(a)])
                    cols.append(kb)
        return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(self.size, self.size))

    def log_c(self) -> np.ndarray:
        """log c(b) = Σ_{i∉b} log n_i (kept in logs: n can exceed 1e18)."""
        logn = np.log(np.asarray(self.shape, dtype=float))
        return logn.sum() - self.members().astype(float) @ logn

    def mult(self) -> np.ndarray:
        """Eigenspace dimensions Π_{i∈a}(n_i − 1)."""
        m1 = np.asarray(self.shape, dtype=float) - 1.0
        return np.prod(np.where(self.members(), m1[None, :], 1.0), axis=1)

    def Y(self) -> np.ndarray:
        """Y(a, b) = c(b) if a ⊆ b else 0 (Theorem 11), upper-triangular in this order."""
        M = self.members()
        sub = ~np.any(M[:, None, :] & ~M[None, :, :], axis=2)      # a ⊆ b
        return np.where(sub, np.exp(self.log_c())[None, :], 0.0)


def term_kappas(space: MarginalSpace, W: WorkloadTerms):
    """κ_j(a) for every term j (rows) and a ∈ S, as a sparse matrix:
    w_j² Π_{i∈a} β_ji Π_{i∉a} mean_ji is zero unless a lies inside the term's support
    (β vanishes elsewhere), so only the 2^|support| subsets of each term are computed —
    4,060 three-way marginals over 30 attributes give 32,480 entries, not 18 million."""
    import scipy.sparse as sp

    key = ("term_kappas", id(W))
    hit = space._memo.get(key)
    if hit is not None and hit[0] is W:
        return hit[1]
    index = space.index()
    rows, cols, vals = [], [], []
    for j, t in enumerate(W.terms):
        w2 = t.weight ** 2
        beta, mean = t.beta, t.mean
        members = sorted(t.support)
        subsets = ([frozenset(c) for r in range(len(members) + 1) for c in combinations(members, r)]
                   if len(members) <= 16 else [a for a in space.subsets if a <= t.support])
        for a in subsets:
            k = index.get(a)
            if k is None:
                continue
            v = mean.copy()
            v[list(a)] = beta[list(a)]
            val = w2 * float(np.prod(v))
            if val > 0:
                rows.append(j)
                cols.append(k)
                vals.append(val)
    out = sp.csr_matrix((vals, (rows, cols)), shape=(len(W.terms), space.size))
    space._memo[key] = (W, out)
    return out


def workload_kappa(space: MarginalSpace, W: WorkloadTerms) -> np.ndarray:
    """Eigenvalues κ_w(a), a ∈ S, of the marginal approximation of WᵀW (Theorem 8)."""
    return np.asarray(term_kappas(space, W).sum(axis=0)).ravel()


def strategy_kappa(space: MarginalSpace, u: np.ndarray, cliques: Sequence[frozenset[int]]
                   ) -> np.ndarray:
    """κ_u(a) for a ∈ S of a marginal gram with weights u on arbitrary ``cliques``:
    Σ over cliques b ⊇ a of u_b·c(b), accumulated by enumerating each clique's subsets that
    lie in S (sparse: a 30-attribute 3-way space has 4,526 subsets and as many cliques,
    whose dense subset matrix would hold 20 million entries)."""
    logn = np.log(np.asarray(space.shape, dtype=float))
    index = space.index()
    u = np.asarray(u, dtype=float)
    out = np.zeros(space.size)
    for ub, b in zip(u, cliques):
        if ub == 0.0:
            continue
        cb = ub * math.exp(float(logn.sum() - sum(logn[i] for i in b)))
        members = sorted(b)
        if len(members) > 16:
            for k, a in enumerate(space.subsets):
                if a <= b:
                    out[k] += cb
            continue
        for r in range(len(members) + 1):
            for subset in combinations(members, r):
                slot = index.get(frozenset(subset))
                if slot is not None:
                    out[slot] += cb
    return out


def marginal_loss(kappa_w: np.ndarray, kappa_u: np.ndarray, mult: np.ndarray) -> float:
    """Σ_a mult(a) κ_w(a)/κ_u(a) = tr(G(u)⁺ WᵀW); inf when u does not support W."""
    need = kappa_w > 0
    if np.any(kappa_u[need] <= 0):
        return math.inf
    return float(np.sum(mult[need] * kappa_w[need] / kappa_u[need]))


def _norm2(theta: np.ndarray, noise: str) -> tuple[float, np.ndarray]:
    if noise == "laplace":
        s = float(theta.sum())
        return s * s, np.full_like(theta, 2.0 * s)
    return float(theta @ theta), 2.0 * theta


def marginal_loss_grad(theta: np.ndarray, kappa_w: np.ndarray, Y: np.ndarray,
                       mult: np.ndarray, noise: str) -> tuple[float, np.ndarray]:
    """Loss ‖θ‖²·Σ_a mult κ_w / (Yθ²) of Theorem 9 and its gradient in θ."""
    ku = Y @ (theta * theta)
    need = kappa_w > 0
    if np.any(ku[need] <= 0):
        return math.inf, np.zeros_like(theta)
    r = np.zeros_like(ku)
    r[need] = mult[need] * kappa_w[need] / ku[need]
    tr = float(r.sum())
    r[need] /= ku[need]
    N, dN = _norm2(theta, noise)
    grad = dN * tr - 2.0 * N * theta * (Y.T @ r)
    return N * tr, grad


def closed_form(space: MarginalSpace, kappa_w: np.ndarray, Y: np.ndarray | None = None
                ) -> np.ndarray:
    """Theorem 11: θ = √(Y⁻¹ √(Y w)), with negative squares clipped to zero."""
    Y = space.Y() if Y is None else Y
    sq = sla.solve_triangular(Y, np.sqrt(np.clip(kappa_w, 0.0, None)), lower=False)
    return np.sqrt(np.clip(sq, 0.0, None))


def marginal_svd_bound(space: MarginalSpace, kappa_w: np.ndarray) -> float:
    """Theorem 10 (with eigenspace dimensions as multiplicities): (Σ mult √κ_w)² / n."""
    total = float(np.sum(space.mult() * np.sqrt(np.clip(kappa_w, 0.0, None))))
    logn = float(np.sum(np.log(np.asarray(space.shape, dtype=float))))
    return math.exp(2.0 * math.log(total) - logn) if total > 0 else 0.0


def opt_marginals_theta(space: MarginalSpace, kappa_w: np.ndarray, noise: str, *,
                        restarts: int = 1, rng: np.random.Generator | None = None,
                        maxiter: int = 2000, progress: Progress | None = None
                        ) -> tuple[np.ndarray, float]:
    """OPT_M (Definition 24): weights θ on S minimising the Theorem 9 loss.

    Variables are scaled by the closed-form solution θ̄ (a diagonal preconditioner: the
    c(b) in Y span many orders of magnitude), so z = θ/θ̄ starts at 1; further restarts
    perturb z log-uniformly.  Zero entries of θ̄ are lifted to a small positive value
    so that every eigenspace the workload needs stays covered.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    Y = space.Y()
    mult = space.mult()
    base = closed_form(space, kappa_w, Y)
    pos = base[base > 0]
    floor = (pos.min() if pos.size else 1.0) * 1e-2
    scale = np.where(base > 0, base, floor)
    best_theta, best = scale.copy(), marginal_loss_grad(scale, kappa_w, Y, mult, noise)[0]
    step = [0]

    def fun(z):
        f, g = marginal_loss_grad(z * scale, kappa_w, Y, mult, noise)
        return f, g * scale

    def cb(intermediate_result):
        step[0] += 1
        if progress is not None and step[0] % 10 == 0:
            progress("opt_marginals", step[0], min(best, float(intermediate_result.fun)))

    for r in range(max(1, restarts)):
        z0 = np.ones(space.size) if r == 0 else np.exp(rng.uniform(-1.0, 1.0, space.size))
        if not math.isfinite(fun(z0)[0]):
            continue
        res = so.minimize(fun, z0, jac=True, method="L-BFGS-B", callback=cb,
                          bounds=so.Bounds(np.zeros(space.size), np.full(space.size, np.inf)),
                          options=dict(maxiter=maxiter, ftol=1e-9))
        theta = res.x * scale
        f = marginal_loss_grad(theta, kappa_w, Y, mult, noise)[0]
        if f < best:
            best, best_theta = f, theta
        if progress is not None:
            progress("opt_marginals", step[0], best)
    best_theta, best = _prune(best_theta, best, kappa_w, Y, mult, noise)
    # Normalise to unit sensitivity so weights read as budget shares.
    norm = math.sqrt(_norm2(best_theta, noise)[0])
    return best_theta / norm, best


#: Weights below this fraction of the largest are candidates for removal (see ``_prune``).
PRUNE_RELATIVE = 1e-3


def _prune(theta: np.ndarray, loss: float, kappa_w: np.ndarray, Y: np.ndarray,
           mult: np.ndarray, noise: str) -> tuple[np.ndarray, float]:
    """Zero the negligible weights when that does not raise the Theorem 9 loss.

    The loss depends on θ through θ² (Y θ²) and ‖θ‖², so its partial derivative in θ_b is
    proportional to θ_b: a weight the optimum wants at zero decays only geometrically and
    L-BFGS-B stops with it small but positive (nltcs ranges: 293 of 432 weights below 1e-4
    of the largest).  Such blocks buy no accuracy, yet each is a marginal the measure step
    counts and samples noise for (with its own discrete Gaussian table, at a huge σ) and
    one more clique in the model's loss: measuring that nltcs strategy at ε = 0.1 took
    96 CPU-s, 1.9 CPU-s without them.  Removing them is kept only if the loss of the
    pruned weights is finite (the rest still supports W) and no larger.
    """
    if theta.size == 0 or theta.max() <= 0:
        return theta, loss
    small = theta < PRUNE_RELATIVE * theta.max()
    if not small.any():
        return theta, loss
    pruned = np.where(small, 0.0, theta)
    f = marginal_loss_grad(pruned, kappa_w, Y, mult, noise)[0]
    if not math.isfinite(f):
        return theta, loss
    if f > loss:
        # Dropping them moved the optimum slightly: re-fit the kept weights (same
        # preconditioning as above, z = θ/θ_pruned on the kept support).
        keep = ~small
        scale = pruned[keep]

        def fun(z):
            full = np.zeros_like(theta)
            full[keep] = z * scale
            g_f, g = marginal_loss_grad(full, kappa_w, Y, mult, noise)
            return g_f, g[keep] * scale

        res = so.minimize(fun, np.ones(scale.size), jac=True, method="L-BFGS-B",
                          bounds=so.Bounds(np.zeros(scale.size), np.full(scale.size, np.inf)),
                          options=dict(maxiter=500, ftol=1e-12))
        pruned = np.zeros_like(theta)
        pruned[keep] = res.x * scale
        f = marginal_loss_grad(pruned, kappa_w, Y, mult, noise)[0]
    if math.isfinite(f) and f <= loss:
        return pruned, f
    return theta, loss
