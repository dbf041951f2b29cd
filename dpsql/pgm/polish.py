"""An exact last step for small junction trees: the L2 fit solved on its face of the polytope.

The first-order fits of :mod:`dpsql.pgm.estimation` stop once the estimated optimality gap is
at most a tolerance in units of the noise (0.5 by default): every fitted measurement is then
within ~0.7 σ of its optimum, far inside the noise.  But a noise "σ" is a spread, not the
realised error: where the discrete Gaussian has σ ≲ 0.3 its draws are almost always exactly 0,
so the released values are exact and least squares reproduces them exactly, while a fit
stopped at the tolerance is 10⁻⁴–10⁻³ off (NLTCS dashboard at ε = 100, bench/RESULTS.md).

For the L2 loss, Problem 4 (thesis §4.3) is a quadratic program over the marginal polytope;
on a junction tree that polytope is the set of non-negative, consistent clique tables with
the common total (the junction-tree factorisation realises any such tables).  So once the fit
has found which cells are 0, the optimum is one linear solve: minimise the loss over the
consistent tables with those cells fixed at 0 (the KKT system below, sparse).  That is the
least-squares solution on the face; when it is non-negative it is feasible, and it is kept
only when its loss is below the first-order fit's, so the step never makes the fit worse.  A
tiny ridge λ‖d‖² on the step keeps the directions no measurement determines where the fit
left them (the maximum-entropy completion, thesis §4.2) and makes the system non-singular.

Used for trees whose Hessian is small (``FitLimits.face_step_max_nnz``): there the solve takes
milliseconds, while reaching the same precision by mirror descent takes tens of thousands of
iterations on ill-conditioned weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpsql.pgm.junction_tree import JunctionTree

if TYPE_CHECKING:
    import scipy.sparse as sp

# scipy is imported inside the functions: a fit whose tree is over the limits below never
# loads it (issue 17: the adult dashboard's fit, 0.9 s, spent 0.2-0.4 s importing scipy).

__all__ = ["polish"]

# The step's size limits are FitLimits.face_step_* (dpsql.pgm.limits): the Hessian PᵀWP at
# most 2·10⁶ non-zeros (bounded above by Σ_rows nnz(row)² of the measurement matrix and by
# cells²), the tree at most 10⁵ cells, queries up to 2²² entries densified for the matrix (the
# first-order loss stops at ``measurement.DENSE_LIMIT``: a 740 × 740 prefix block on adult
# (age, race, sex) is over it, and its fit was left at the 0.5 tolerance).
#: Relative size of the ridge on the step (against the largest diagonal of the Hessian).
RIDGE = 1e-12
#: Active-set rounds: cells the solve makes negative are fixed at 0 and the solve repeated.
ROUNDS = 6


def summing_matrix(attrs: Sequence[str], shape: Sequence[int], onto: Sequence[str],
                   onto_shape: Sequence[int]) -> sp.csr_matrix:
    """The 0/1 matrix summing a table over ``attrs`` (C order) onto the sub-table ``onto``
    (1 row if ``onto`` is empty); the local-consistency constraints of both the junction tree
    and the relaxed region graph are built from it."""
    import scipy.sparse as sp
    attrs = tuple(attrs)
    n = int(np.prod(shape, dtype=np.int64))
    if onto:
        grid = np.indices(tuple(shape)).reshape(len(attrs), -1)
        rows = np.ravel_multi_index(tuple(grid[attrs.index(a)] for a in onto), tuple(onto_shape))
        m = int(np.prod(onto_shape, dtype=np.int64))
    else:
        rows, m = np.zeros(n, dtype=np.int64), 1
    return sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(m, n))


def _marginalise(tree: JunctionTree, h: int, sep: tuple[str, ...]) -> sp.csr_matrix:
    clique = tree.cliques[h]
    return summing_matrix(clique, [tree.sizes[a] for a in clique], sep,
                          [tree.sizes[a] for a in sep])


def constraints(tree: JunctionTree, offsets: np.ndarray) -> sp.csr_matrix:
    """Rows C with Cμ = (0, …, 0, N) exactly for consistent tables of total N: per tree edge,
    the child's marginal on the separator minus the parent's; last row, the root's total."""
    import scipy.sparse as sp
    n = int(offsets[-1])
    blocks = []
    for (p, c), sep in tree.separators.items():
        mc, mp = _marginalise(tree, c, sep), _marginalise(tree, p, sep)
        row = sp.hstack([sp.csr_matrix((mc.shape[0], int(offsets[c]))), mc,
                         sp.csr_matrix((mc.shape[0], n - int(offsets[c + 1])))]) \
            - sp.hstack([sp.csr_matrix((mp.shape[0], int(offsets[p]))), mp,
                         sp.csr_matrix((mp.shape[0], n - int(offsets[p + 1])))])
        blocks.append(row)
    r = tree.root
    total = np.zeros((1, n))
    total[0, int(offsets[r]):int(offsets[r + 1])] = 1.0
    blocks.append(sp.csr_matrix(total))
    return sp.vstack(blocks).tocsr()


def hessian_nnz_bound(P: sp.csr_matrix) -> int:
    """nnz(PᵀWP) ≤ min(Σ_rows nnz(row)², columns²)."""
    per_row = np.diff(P.indptr).astype(np.int64)
    return int(min((per_row * per_row).sum(), P.shape[1] ** 2))


def polish(tree: JunctionTree, P: sp.csr_matrix, w: np.ndarray, y: np.ndarray,
           mu: Sequence[np.ndarray], total: float, max_cells: int, max_nnz: int) -> list[np.ndarray] | None:
    """The loss minimiser over consistent non-negative tables on the fit's face, or None.

    ``P``, ``w``, ``y``: the loss Σ w (Pμ − y)² over the concatenated tables (``SparseLoss``);
    ``mu``: the first-order fit's calibrated tables.  Returns new tables (consistent, ≥ 0,
    total ``total``) whose loss is below that of ``mu``, or None when the step does not
    improve the loss or the system is too large (``max_cells``, ``max_nnz``: the FitLimits)."""
    if tree.size > max_cells or hessian_nnz_bound(P) > max_nnz:
        return None
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    shapes = [m.shape for m in mu]
    v = np.concatenate([np.ravel(m) for m in mu])
    offsets = np.concatenate([[0], np.cumsum([m.size for m in mu])]).astype(np.int64)
    C = constraints(tree, offsets)
    rhs_c = np.zeros(C.shape[0])
    rhs_c[-1] = total
    WP = P.multiply(w[:, None]).tocsr()
    H = (2.0 * (P.T @ WP)).tocsc()
    g = 2.0 * (WP.T @ (P @ v - y))
    lam = RIDGE * max(float(H.diagonal().max()), 1e-300)
    base = float(w @ np.square(P @ v - y))
    zero = np.zeros(v.size, dtype=bool)
    for _ in range(ROUNDS):
        free = np.flatnonzero(~zero)
        fixed = np.flatnonzero(zero)
        d_fixed = -v[fixed]
        # KKT of: min ½dᵀ(H + λI)d + gᵀd  s.t.  C(v + d) = rhs, d_fixed = −v_fixed.
        # The (2,2) block −λ'I makes the system quasi-definite (solvable when fixing cells
        # makes constraint rows dependent); its effect on the constraints is O(λ') and the
        # result is re-checked below.
        Hff = H[free][:, free] + lam * sp.identity(free.size, format="csc")
        Cf = C[:, free]
        r1 = -g[free] - (H[free][:, fixed] @ d_fixed if fixed.size else 0.0)
        r2 = rhs_c - C @ v - (C[:, fixed] @ d_fixed if fixed.size else 0.0)
        K = sp.bmat([[Hff, Cf.T], [Cf, -lam * 1e-6 * sp.identity(C.shape[0])]], format="csc")
        try:
            sol = spla.spsolve(K, np.concatenate([r1, r2]))
        except (RuntimeError, ValueError):
            return None
        if not np.all(np.isfinite(sol)):
            return None
        new = v.copy()
        new[free] += sol[:free.size]
        new[fixed] = 0.0
        negative = new < 0.0
        if not negative.any():
            break
        zero |= negative
    else:
        return None
    # Feasible means consistent (to rounding) and non-negative; the loss must drop.
    scale = max(total, 1.0)
    if np.abs(C @ new - rhs_c).max() > 1e-9 * scale:
        return None
    value = float(w @ np.square(P @ new - y))
    if not value < base:
        return None
    return [new[offsets[i]:offsets[i + 1]].reshape(shapes[i]) for i in range(len(shapes))]


# --- one clique: the whole fit as an active-set Newton method ----------------------------------
#
# When the junction tree is a single clique (an OPT_⊗ block over the workload's attributes, as
# on adult/ranges and nltcs/ranges), the marginal polytope is the scaled simplex
# {μ ≥ 0, Σμ = N} and Problem 4 (thesis §4.3) with the L2 loss is a quadratic program over it.
# Its Hessian H = 2 Σ_i QᵢᵀQᵢ/σᵢ² is never formed: a Hessian-vector product is a difference of
# two gradients of the loss (the loss is quadratic), and a dense Kronecker block's H is itself
# a Kronecker product of the factors' Gram matrices, so (H + λI)⁻¹ is applied exactly through
# their eigendecompositions (thesis §3.4: (A⊗B)⁺ = A⁺⊗B⁺).  That inverse is the preconditioner
# of a conjugate-gradient solve on the face of the simplex, and it gives the start: the least-
# squares estimate H⁺·2Σ QᵀW y, projected onto the simplex.  A primal active-set loop (cells
# driven below 0 are fixed at 0; fixed cells whose reduced gradient is negative are released)
# ends when the Frank–Wolfe gap ⟨∇L, μ⟩ − N·min ∇L, an upper bound on L(μ) − L*, is within the
# fit's tolerance: a certificate, where the first-order fit only estimates its gap.  Mirror
# descent needed > 15,000 iterations (> 160 s) for adult/ranges at ε = 100 and stopped at its
# iteration limit; see bench/RESULTS.md, "Dense-block fits".

# Single-clique trees up to FitLimits.dense_block_max_cells are solved by solve_clique.
#: Active-set rounds and conjugate-gradient iterations per round.
CLIQUE_ROUNDS = 200
CG_ITERS = 400
#: Hessian-vector products over all rounds before the solve gives up (the first-order fit then
#: runs): bounds the time lost where the preconditioner does not fit the problem.
CG_BUDGET = 4000
#: Ridge of the preconditioner, relative to its largest eigenvalue: the Gram factors of a
#: block with fewer rows than cells are singular, and a near-zero ridge amplifies rounding
#: in their null space by its inverse.
PRECOND_RIDGE = 1e-6


def _kron_parts(query):
    """(scale, dense factors) of c·(F₁⊗…⊗F_k), or None for other queries."""
    scale = 1.0
    q = query
    while hasattr(q, "weight") and hasattr(q, "base"):
        scale *= float(q.weight)
        q = q.base
    if not hasattr(q, "factors"):
        return None
    factors = []
    for f in q.factors:
        if hasattr(f, "factors") or (hasattr(f, "weight") and hasattr(f, "base")):
            return None
        m, n = (int(x) for x in f.shape)
        # its Gram FᵀF is n×n dense (_KronInverse): a thin count's 2×10⁵ factor over a fine
        # column passed the m·n check and asked for 74.5 GiB
        if max(m, n) * n > (1 << 24):
            return None
        factors.append(np.asarray(f.dense(), dtype=float))
    return scale, factors


class _KronInverse:
    """x ↦ (c·⊗GᵢF + λI)⁻¹x for Gram factors Gᵢ = FᵢᵀFᵢ, on a table in canonical order.

    ``to_given`` permutes canonical axes to the measurement's given order (None: same)."""

    def __init__(self, coef: float, factors, shape, to_given, ridge: float) -> None:
        self.shape = shape
        self.to_given = to_given
        self.to_canon = None if to_given is None else tuple(np.argsort(to_given))
        eig = []
        self.U = []
        for f in factors:
            e, u = np.linalg.eigh(f.T @ f)
            eig.append(np.maximum(e, 0.0))
            self.U.append(u)
        lam = eig[0]
        for e in eig[1:]:
            lam = np.multiply.outer(lam, e)
        lam = coef * lam
        self.inv = 1.0 / (lam + ridge * max(float(lam.max()), 1e-300))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        t = x.reshape(self.shape)
        if self.to_given is not None:
            t = t.transpose(self.to_given)
        for axis, u in enumerate(self.U):
            t = np.moveaxis(np.tensordot(u.T, t, axes=([1], [axis])), 0, axis)
        t = t * self.inv
        for axis, u in enumerate(self.U):
            t = np.moveaxis(np.tensordot(u, t, axes=([1], [axis])), 0, axis)
        if self.to_canon is not None:
            t = t.transpose(self.to_canon)
        return np.ascontiguousarray(t).ravel()


def preconditioner(loss, shape):
    """(H_b + λI)⁻¹ for the heaviest Kronecker measurement b on the whole clique (or None)."""
    best, strength = None, 0.0
    for g in loss.groups:
        if g.sum_axes:
            continue
        for t in g.terms:
            parts = _kron_parts(t.query)
            if parts is None or len(parts[1]) != len(shape):
                continue
            scale, factors = parts
            s = t.weight * scale * scale * float(np.prod([np.linalg.norm(f, 2) ** 2 for f in factors]))
            if s > strength:
                best, strength = (t, scale, factors), s
    if best is None:
        return None
    t, scale, factors = best
    given_shape = tuple(f.shape[1] for f in factors)
    if int(np.prod(given_shape)) != int(np.prod(shape)):
        return None
    return _KronInverse(2.0 * t.weight * scale * scale, factors, shape, t.to_given, PRECOND_RIDGE)


def _simplex(v: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection onto {x ≥ 0, Σx = total} (sort-based)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    k = np.arange(1, v.size + 1)
    r = np.flatnonzero(u - css / k > 0)[-1]
    return np.maximum(v - css[r] / (r + 1), 0.0)


def top_eigenvalue(apply, n: int, iters: int) -> float:
    """‖apply(x)‖ after ``iters`` power iterations from a fixed start: the largest eigenvalue
    of a symmetric PSD operator, approached from below (callers add their margin).  The start
    vector is the optimizer's, not noise: seeded numpy is fine here."""
    x = np.random.default_rng(0).random(n)
    x /= np.linalg.norm(x)
    value = 0.0
    for _ in range(iters):
        y = apply(x)
        value = float(np.linalg.norm(y))
        if value <= 0.0:
            return 0.0
        x = y / value
    return value


def _pcg(hvp, precond, rhs, free, iters, rtol):
    """min ½dᵀHd − rhsᵀd over d with d = 0 off ``free`` and Σd = 0: conjugate gradients in
    that subspace with the preconditioner Π M⁻¹ Π (Π the orthogonal projector onto it; symmetric
    and positive definite there, as CG needs)."""
    n = rhs.size
    count = max(int(free.sum()), 1)

    def project(x):
        x = x.copy()
        x[~free] = 0.0
        x[free] -= x[free].sum() / count
        return x

    def apply_p(r):
        return project(precond(project(r))) if precond is not None else project(r)

    d = np.zeros(n)
    r = project(rhs)
    z = apply_p(r)
    p = z.copy()
    rz = float(r @ z)
    first = rz
    for _ in range(iters):
        if rz <= rtol * rtol * first or rz <= 0.0:
            break
        hp = project(hvp(p))
        php = float(p @ hp)
        if php <= 0.0:
            break
        a = rz / php
        d += a * p
        r -= a * hp
        z = apply_p(r)
        new = float(r @ z)
        p = z + (new / rz) * p
        rz = new
    return d


def solve_clique(loss, shape: tuple[int, ...], total: float, atol: float, rtol: float,
                 start: np.ndarray | None = None, precond=None):
    """Problem 4 on a one-clique tree by active-set Newton steps (see above).

    ``loss``: the :class:`~dpsql.pgm.loss.MarginalLoss` of the fit; ``start``: a table to begin
    from (else the projected least-squares estimate); ``precond``: :func:`preconditioner`'s
    result, when the caller has it.  Returns (table, history, certified):
    the best table found (≥ 0, sum ``total``), the loss after each round, and whether its
    Frank–Wolfe gap is within atol + rtol·loss."""
    n = int(np.prod(shape))

    def grad(x):
        value, g = loss([x.reshape(shape)])
        return value, (np.zeros(n) if g[0] is None else np.asarray(g[0], dtype=float).ravel())

    _, g0 = grad(np.zeros(n))
    lam = 0.0

    products = [0]

    def hvp(x):
        products[0] += 1
        return grad(x)[1] - g0 + lam * x

    if precond is None:
        precond = preconditioner(loss, shape)
    # ridge on the solves: keeps the directions no measurement determines where they are
    probe = np.zeros(n)
    probe[0] = 1.0
    lam = RIDGE * max(abs(float(hvp(probe)[0])), 1e-300)
    if start is None:
        guess = precond(-g0) if precond is not None else np.full(n, total / n)
        v = _simplex(guess, total)
    else:
        v = _simplex(np.asarray(start, dtype=float).ravel(), total)
    value, g = grad(v)
    history = [value]
    zero = v <= 0.0
    # A projected-gradient step of 1/L (L ≥ λ_max(H), by power iteration) always lowers the
    # loss unless μ is optimal: the fallback when the Newton step's projection does not.
    lipschitz = 1.5 * max(top_eigenvalue(hvp, n, 9), 1e-300)
    certified = False
    stalled = 0
    # Inexact Newton: while the face changes, a loose solve is enough to find the next one;
    # on a fixed face the solve is tightened until the gap certifies the optimum.
    cg_rtol = 1e-3
    moved_last = True
    for _ in range(CLIQUE_ROUNDS):
        free = ~zero
        d = _pcg(hvp, precond, -g, free, CG_ITERS, cg_rtol)
        new = v + d
        neg = free & (new < 0.0)
        moved = True
        if not neg.any():
            v = np.maximum(new, 0.0)   # a feasible Newton step on the face: the loss drops
        else:
            # projected search (Bertsekas 1982): the Newton step projected back onto the
            # simplex, halved until the loss drops; failing that, re-solve once with the cells
            # it drove below 0 fixed at 0; failing that too, a projected gradient step
            cand, cand_value = None, value
            searches = ((d, 1.0),) if moved_last else ((d, 1.0), (-g, 1.0 / lipschitz))
            for direction, alpha in searches:
                for _ in range(12):
                    trial = _simplex(v + alpha * direction, total)
                    trial_value = grad(trial)[0]
                    if trial_value < cand_value:
                        cand, cand_value = trial, trial_value
                        break
                    alpha *= 0.5
                if cand is not None:
                    break
            if cand is not None:
                v = cand
                zero = v <= 0.0
            else:
                zero |= neg
                moved = False
        moved_last = moved
        value, g = grad(v)
        if value >= history[-1] * (1.0 - 1e-13) and moved:
            # no progress at this precision: the face's optimum needs a tighter solve
            stalled += 1
            cg_rtol = max(cg_rtol * 1e-3, 1e-12)
        else:
            stalled = 0
        history.append(value)
        gap = float(g @ v) - total * float(g.min())
        if gap <= atol + rtol * abs(value):
            certified = True
            break
        if stalled >= 4 or products[0] > CG_BUDGET:
            break
        if not neg.any():
            # on this face's optimum (to the solve's precision): release the fixed cells whose
            # reduced gradient is negative; with none, the next round refines the solve
            nu = float(g[~zero].mean()) if (~zero).any() else float(g.min())
            release = zero & (g < nu - 1e-12 * max(abs(nu), 1.0))
            if not release.any():
                cg_rtol = max(cg_rtol * 1e-3, 1e-12)
            zero &= ~release
    return v.reshape(shape), history, certified
