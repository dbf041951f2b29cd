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

Used for trees whose Hessian is small (``POLISH_MAX_NNZ``): there the solve takes
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

__all__ = ["POLISH_MAX_NNZ", "polish"]

#: The exact step is tried when the Hessian PᵀWP has at most this many non-zeros (bounded
#: above by Σ_rows nnz(row)² of the measurement matrix and by cells²) and the tree at most
#: 10⁵ cells.
POLISH_MAX_NNZ = 2_000_000
POLISH_MAX_CELLS = 100_000
#: Queries up to this many entries are densified to build the step's matrix (32 MB); the
#: first-order loss stops at ``measurement.DENSE_LIMIT`` (a 740 × 740 prefix block on adult
#: (age, race, sex) is over it, and its fit was left at the 0.5 tolerance).
POLISH_DENSE_LIMIT = 1 << 22
#: Relative size of the ridge on the step (against the largest diagonal of the Hessian).
RIDGE = 1e-12
#: Active-set rounds: cells the solve makes negative are fixed at 0 and the solve repeated.
ROUNDS = 6


def _marginalise(tree: JunctionTree, h: int, sep: tuple[str, ...]) -> sp.csr_matrix:
    """The 0/1 matrix summing clique h's table (C order) onto ``sep`` (1 row if sep is empty)."""
    import scipy.sparse as sp
    clique = tree.cliques[h]
    shape = tuple(tree.sizes[a] for a in clique)
    n = int(np.prod(shape, dtype=np.int64))
    if sep:
        grid = np.indices(shape).reshape(len(clique), -1)
        rows = np.ravel_multi_index(tuple(grid[clique.index(a)] for a in sep),
                                    tuple(tree.sizes[a] for a in sep))
        m = int(np.prod([tree.sizes[a] for a in sep], dtype=np.int64))
    else:
        rows, m = np.zeros(n, dtype=np.int64), 1
    return sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(m, n))


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
           mu: Sequence[np.ndarray], total: float) -> list[np.ndarray] | None:
    """The loss minimiser over consistent non-negative tables on the fit's face, or None.

    ``P``, ``w``, ``y``: the loss Σ w (Pμ − y)² over the concatenated tables (``SparseLoss``);
    ``mu``: the first-order fit's calibrated tables.  Returns new tables (consistent, ≥ 0,
    total ``total``) whose loss is below that of ``mu``, or None when the step does not
    improve the loss or the system is too large."""
    if tree.size > POLISH_MAX_CELLS or hessian_nnz_bound(P) > POLISH_MAX_NNZ:
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
