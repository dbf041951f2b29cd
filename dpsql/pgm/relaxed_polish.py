"""An exact last step for the relaxed L2 fit: Problem 2 solved by an active-set method.

Problem 2 of NeurIPS 2021 (§4) minimises the loss over the local polytope L(G): region
tables τ_r ≥ 0, every edge p → t consistent (P_{p→t} τ_p = τ_t), every table of total N
(Definition 3).  For the L2 loss that is a quadratic program with linear constraints, which
"can be solved with a number of general purpose techniques, including interior point and
active set methods" (§4, after Problem 2); the paper's own method, Prox-PGM with Convex-GBP
(Theorem 2), is the one that scales to millions of cells, and it is what
:func:`dpsql.pgm.relaxed.estimate_relaxed` runs first.  But it is a first-order method, and
with the measurement weights of a high-ε release it does not get near the optimum: on adult's
121 one- and two-way marginals at ε = 100 most blocks have σ < 1/2 lattice units, whose
discrete-Gaussian noise is nearly always 0, so they are weighted by an sd of 10⁻³
(``release.fit_stddev``) beside blocks with σ ≈ 1; the relative-smoothness step is then
~10⁻⁹ and after 20,000 iterations the loss was still ~10³ times its optimum.  The one-way
marginals, sums of 74 or 99 slightly biased cells of exactly measured pair tables, came
out 10× further from the truth than least squares' (bench/RESULTS.md, issue 17).

So, when the problem is small enough to factor (its estimated peak memory within
``memory_limit``; the Hessian at most ``FitLimits.relaxed_step_max_nnz`` non-zeros), the fit ends
with the quadratic program solved exactly from where the first-order fit stopped: a
primal-dual active-set method (Hintermüller, Ito & Kunisch 2002) on

    min_x  L(x) + (λ/2)‖x − v‖²   s.t.  C x = b,  x ≥ 0,

v the first-order fit's tables, C the edge and total rows of L(G).  Each round fixes the
cells of the current active set at 0, solves the KKT system of the rest (one sparse LU),
and moves a cell into the active set when it came out negative, out of it when its bound's
multiplier is negative; when the set repeats, x is the optimum (KKT holds exactly).  The
tiny ridge λ (relative ``RIDGE``) makes the problem strictly convex: directions no
measurement determines stay where the first-order fit left them (the maximum-entropy
completion), and the KKT system is non-singular; its (2,2) block −δI makes it
quasi-definite, which absorbs the redundant rows of C (in a saturated graph a sub-region's
constraint is implied through more than one path).  The step is kept only when it is
feasible to rounding and lowers the loss, so it never makes the fit worse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dpsql.pgm.limits import FitLimits
from dpsql.pgm.loss import measurement_matrix
from dpsql.pgm.measurement import Entries, structured_entries
from dpsql.pgm.polish import summing_matrix
from dpsql.pgm.region_graph import RegionGraph

__all__ = ["TooLarge", "active_set_step",
           "local_constraints", "loss_matrix", "memory_limit", "step_bytes"]

# The step is tried when its estimated peak memory (``step_bytes``) is at most
# ``FitLimits.relaxed_step_memory_fraction`` (1/8) of the machine's physical memory
# (``memory_limit``; a caller may set its own cap,
# ``estimate_relaxed(exact_memory=...)``): 3 GB on the 24 GB development machine, which
# admits adult's 121 marginals (estimate 1.0 GB, measured 0.6 GB, ~20 s) and refuses steps
# like all pairs of 45 stroke attributes measured directly (351,076 cells, 40,547 constraint
# rows: estimate 25 GB; measured 6.1 GB and 6.5 minutes, where the old limit of 400,000 cells
# let it run).  Physical memory, not what is free at the moment, so the fit does not depend
# on what else the machine runs.  ... and the Hessian PᵀWP has at most
# ``FitLimits.relaxed_step_max_nnz`` (12·10⁶) non-zeros, a bound ``loss_matrix`` checks before
# it builds anything (adult's 121 marginals: 49,293 cells, 4.4·10⁶ non-zeros, most in the
# dense blocks of the strategy's Kronecker queries).  Queries up to
# ``FitLimits.relaxed_step_dense_entries`` entries are densified to build the loss matrix.
_DEFAULT = FitLimits()
#: The step's peak memory above the process's when it starts: per non-zero of the Hessian
#: (the ridge makes it at least one per cell) — the Hessian, its free block, the equilibrated
#: KKT matrix and their share of the LU factors — plus the LU factors' block of the
#: constraints' multipliers taken as dense (m² entries for m constraint rows: eliminating a
#: cell couples every constraint row it is in, and a pair region's cells couple all the rows
#: of its two edges; SuperLU also over-allocates while it factors).  An upper bound fitted on
#: nine steps measured by bench/relaxed_exact_step.py (ResidualPlanner and OPT_M strategies,
#: identity-measured pairs; 21,600–351,076 cells): the estimate is 1.13–35 times the measured
#: peak (loose where attributes are small and the multipliers' block stays sparse), never below
#: it (bench/RESULTS.md, issue 17).
BYTES_PER_NNZ = 160
BYTES_PER_DENSE_ENTRY = 16
#: Relative size of the ridge (against the largest diagonal entry of the Hessian).
RIDGE = 1e-8
#: The regularisation of the constraint block, in the units of the equilibrated system.
DELTA = 1e-8
#: Active-set rounds before giving up (the first-order fit is then kept); after
#: ``FREE_ROUNDS`` of them cells only join the active set (the primal-dual method can cycle
#: when the Hessian is not an M-matrix).
ROUNDS = 60
FREE_ROUNDS = 30
#: Steps of iterative refinement per KKT solve (each costs one product and one solve with
#: the factors already computed).
REFINE = 20


class TooLarge(str):
    """Why the step was refused for its size: it would be refused again later in the same fit
    (the first-order fit does not try it a second time)."""


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(max_bytes: int | None = None,
                 fraction: float = _DEFAULT.relaxed_step_memory_fraction) -> int:
    """The memory the step may use: ``max_bytes`` when given, else ``fraction`` of the
    machine's physical memory (2 GB when the OS does not say)."""
    if max_bytes is not None:
        return int(max_bytes)
    total = physical_memory()
    return int(fraction * total) if total else 2 << 30


def step_bytes(hessian_nnz: int, constraint_rows: int) -> int:
    """The step's estimated peak memory in bytes (``BYTES_PER_NNZ``, ``BYTES_PER_DENSE_ENTRY``)."""
    return BYTES_PER_NNZ * int(hessian_nnz) + BYTES_PER_DENSE_ENTRY * int(constraint_rows) ** 2


def loss_matrix(graph: RegionGraph, measurements, max_nnz: int = _DEFAULT.relaxed_step_max_nnz,
                dense_entries: int = _DEFAULT.relaxed_step_dense_entries,
                ) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray] | None:
    """(P, w, y) with the L2 loss Σ w (Pτ − y)² over the concatenated region tables (C order,
    canonical attribute order), each measurement on the smallest region holding its clique
    (the host the first-order loss uses), P as a scipy matrix for the solves; None when a
    query cannot be made sparse or the Hessian PᵀWP could have more than ``max_nnz``
    non-zeros.  The matrix is :func:`dpsql.pgm.loss.measurement_matrix`'s, the junction
    tree's builder with the region graph's hosts."""
    def entries(q) -> Entries | None:
        # a query's non-zeros, Kronecker factors kept apart; None when it cannot be made
        # sparse or has more than max_nnz of them
        e = structured_entries(q, dense_entries)
        return None if e is None or e[2].size > max_nnz else e

    built = measurement_matrix(measurements, graph.attributes, graph.sizes, graph.regions, graph.host,
                               entries, max_hessian_nnz=max_nnz)
    if built is None:
        return None
    P, w, y = built
    return P.to_scipy(), w, y


def _marginalise(graph: RegionGraph, p: int, t: int) -> sp.csr_matrix:
    return summing_matrix(graph.regions[p], graph.shape(p), graph.regions[t], graph.shape(t))


def local_constraints(graph: RegionGraph, total: float) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """(C, b, offsets): C τ = b exactly when the concatenated region tables τ (C order, offsets
    into the vector) are consistent on every edge and each sums to ``total`` (Definition 3
    without the non-negativity)."""
    sizes = [int(np.prod(graph.shape(i), dtype=np.int64)) for i in range(len(graph.regions))]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    rows, cols, vals = [], [], []
    row = 0
    for p, t in graph.edges:
        m = _marginalise(graph, p, t).tocoo()
        rows += [m.row + row, np.arange(sizes[t]) + row]
        cols += [m.col + offsets[p], np.arange(sizes[t]) + offsets[t]]
        vals += [m.data, -np.ones(sizes[t])]
        row += sizes[t]
    for r in range(len(graph.regions)):
        rows.append(np.full(sizes[r], row))
        cols.append(np.arange(offsets[r], offsets[r + 1]))
        vals.append(np.ones(sizes[r]))
        row += 1
    C = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(row, n))
    b = np.zeros(row)
    b[row - len(graph.regions):] = total
    return C, b, offsets


def _solve(Hff: sp.csc_matrix, Cf: sp.csr_matrix, rhs: np.ndarray) -> np.ndarray | None:
    """The KKT system [[H, Cᵀ], [C, 0]] z = rhs.

    It is equilibrated symmetrically (unit diagonal on the Hessian block, unit rows on the
    constraints), regularised to the quasi-definite [[H, Cᵀ], [C, −δI]] (δ = ``DELTA`` in
    those units), factored in a symmetric fill-reducing order without pivoting —
    quasi-definite matrices factor stably in any symmetric order (Vanderbei 1995), and this
    takes ~1 s on adult's 121 marginals where partial pivoting takes ~20 s — and refined
    against the unregularised matrix, which removes the O(δ·ν) violation of the constraints
    the regularisation leaves (the errors in the multipliers' null space, from redundant
    rows, do not reach the tables).  Partial pivoting is the fallback when that misses the
    residual target; None if both do."""
    n, m = Hff.shape[0], Cf.shape[0]
    d1 = 1.0 / np.sqrt(np.maximum(np.abs(Hff.diagonal()), 1e-300))
    Cs = (Cf @ sp.diags(d1)).tocsr()
    norms = np.sqrt(np.asarray(Cs.multiply(Cs).sum(axis=1)).ravel())
    d2 = 1.0 / np.where(norms > 0, norms, 1.0)
    Cs = (sp.diags(d2) @ Cs).tocsr()
    Hs = (sp.diags(d1) @ Hff @ sp.diags(d1)).tocsc()
    K0 = sp.bmat([[Hs, Cs.T], [Cs, None]], format="csc")
    K = (K0 - sp.diags(np.concatenate([np.zeros(n), np.full(m, DELTA)]))).tocsc()
    D = np.concatenate([d1, d2])
    bs = D * rhs
    scale = max(float(np.abs(bs).max()), 1e-300)
    for options in ({"permc_spec": "MMD_AT_PLUS_A", "diag_pivot_thresh": 0.0,
                     "options": {"SymmetricMode": True}}, {}):
        try:
            lu = spla.splu(K, **options)
            z = lu.solve(bs)
            res = np.inf
            for _ in range(REFINE + 1):
                r = bs - K0 @ z
                res = float(np.abs(r).max()) / scale
                if not np.isfinite(res) or res <= 1e-12:
                    break
                z = z + lu.solve(r)
        except (RuntimeError, ValueError):
            continue
        if np.all(np.isfinite(z)) and res <= 1e-6:
            return D * z
    return None


def active_set_step(graph: RegionGraph, P: sp.csr_matrix, w: np.ndarray, y: np.ndarray,
                    tau: Sequence[np.ndarray], total: float, rounds: int = ROUNDS,
                    trace=None, max_bytes: int | None = None,
                    fraction: float = _DEFAULT.relaxed_step_memory_fraction,
                    ) -> tuple[list[np.ndarray], int, bool] | str:
    """The minimiser of the loss Σ w (Pτ − y)² over L(G) (plus the ridge), from ``tau``.

    ``P``, ``w``, ``y``: the loss over the concatenated region tables (:func:`loss_matrix`);
    ``tau``: the first-order fit's tables (counts, each summing to ``total``).  Returns
    (tables, active-set rounds, optimal) — consistent, non-negative, loss below that of
    ``tau`` — or, when the solves fail or the result would not improve the fit, a string
    saying why; a :class:`TooLarge` one when the step's estimated memory (``step_bytes``)
    exceeds ``memory_limit(max_bytes, fraction)`` (checked on the cells before anything is built, and
    on the Hessian before anything is factored).  ``optimal`` is False when the rounds had to stop releasing cells
    (``FREE_ROUNDS``): the tables are then feasible and better than ``tau`` but some cells
    held at 0 might lower the loss further."""
    limit = memory_limit(max_bytes, fraction)

    def too_large(need: int, what: str) -> TooLarge | None:
        if need <= limit:
            return None
        return TooLarge(f"it would need about {need / 2 ** 30:.3g} GB of memory ({what}), over its "
                        f"limit of {limit / 2 ** 30:.3g} GB"
                        + (" (the caller's)" if max_bytes is not None else
                           f" ({fraction:g} of the machine's memory)"))

    C, b, offsets = local_constraints(graph, total)
    # Cheap first (every cell is a Hessian non-zero: the ridge), then with the Hessian built.
    early = too_large(step_bytes(graph.size, C.shape[0]),
                      f"{graph.size:,} region cells, {C.shape[0]:,} constraint rows")
    if early is not None:
        return early
    shapes = [np.shape(t) for t in tau]
    v = np.concatenate([np.ravel(t) for t in tau]).astype(float)
    WP = P.multiply(w[:, None]).tocsr()
    H = (2.0 * (P.T @ WP)).tocsc()
    late = too_large(step_bytes(H.nnz + v.size, C.shape[0]),
                     f"a Hessian with {H.nnz:,} non-zeros, {C.shape[0]:,} constraint rows")
    if late is not None:
        return late
    lam = RIDGE * max(float(H.diagonal().max()), 1e-300)
    H = (H + lam * sp.identity(v.size, format="csc")).tocsc()
    g = 2.0 * (WP.T @ (P @ v - y))
    base = float(w @ np.square(P @ v - y))
    active = np.zeros(v.size, dtype=bool)
    x, optimal = v, False
    for done in range(1, rounds + 1):
        free = np.flatnonzero(~active)
        fixed = np.flatnonzero(active)
        d_fixed = -v[fixed]
        Hff = H[free][:, free]
        Cf = C[:, free]
        r1 = -g[free] - (H[free][:, fixed] @ d_fixed if fixed.size else 0.0)
        r2 = b - C @ v - (C[:, fixed] @ d_fixed if fixed.size else 0.0)
        sol = _solve(Hff, Cf, np.concatenate([r1, r2]))
        if sol is None:
            return "the KKT system could not be solved"
        d = np.empty(v.size)
        d[free] = sol[:free.size]
        d[fixed] = d_fixed
        nu = sol[free.size:]
        x = v + d
        x[fixed] = 0.0
        # A free cell below 0 joins the active set; a fixed cell whose bound's multiplier
        # (∇f + Cᵀν there) is negative leaves it.  After FREE_ROUNDS cells only join, so
        # the set grows and the rounds end; the result is then feasible, not certified.
        new = active | (x < 0.0)
        mult = (H[fixed] @ d + g[fixed]) + C[:, fixed].T @ nu if fixed.size else np.zeros(0)
        if done <= FREE_ROUNDS:
            new[fixed[mult < 0.0]] = False
        if trace is not None:
            trace(done, int(active.sum()), int((x < 0.0).sum()), int((mult < 0.0).sum()),
                  float(w @ np.square(P @ x - y)))
        if np.array_equal(new, active):
            optimal = bool((mult >= 0.0).all())
            break
        active = new
    else:
        return f"the active set did not settle in {rounds} rounds"
    if (x < 0.0).any():
        return "the result has negative cells"
    worst = float(np.abs(C @ x - b).max())
    if worst > 1e-9 * max(total, 1.0):
        return f"the result violates the local consistency by {worst:.3g}"
    value = float(w @ np.square(P @ x - y))
    if not value < base:
        return f"the loss would not drop ({base:.6g} → {value:.6g})"
    return [x[offsets[i]:offsets[i + 1]].reshape(shapes[i]) for i in range(len(shapes))], done, optimal
