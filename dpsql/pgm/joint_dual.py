"""Problem 4 on a small joint table by Newton's method on the entropic dual.

When the measured attributes' joint table is small (nltcs/ranges: 16 binary attributes,
65,536 cells) the marginal polytope is the scaled simplex over it, and the L2 loss depends on
μ only through the measured marginals.  Those are spanned by few Fourier characters: the
character χ_k(x) = exp(2πi k·x/n) of the joint's group ∏ Z_{n_a} sums to zero over every
attribute where k_a ≠ 0, so a marginal on clique C sees exactly the k with supp(k) ⊆ C
(for binary attributes these are the Walsh functions; NLTCS's 139 measured marginals span
K = 460 of the 65,536).  In those K coefficients c = Φᴴμ the loss is a fixed quadratic
f(c) = Σ_i ‖B_i c − y_i‖²/σ_i², and for marginal measurements its Hessian H = 2BᴴWB is
diagonal (marginalisation is a convolution).

The first-order fits take thousands of mirror-descent iterations there (the problem is
badly conditioned: cells far outnumber measurements, and the optimum has many near-empty
cells).  Instead this module follows the entropic path

    μ_τ = argmin_{μ ≥ 0, Σμ = N}  L(μ) + τ Σ_x μ_x log μ_x,    τ → 0,

whose points are graphical models on the measured cliques (log μ_τ ∈ span Φ: thesis §4.2's
maximum-entropy form), and whose limit is the maximum-entropy distribution among the loss's
minimisers.  For each τ the concave dual in β ∈ span(H) (a = Re Φβ the negated log-potential),

    d(β) = −⟨β, c₀⟩ − ½⟨β, H⁺β⟩ − τN log Σ_x exp(−a_x/τ) + const,

is maximised by damped Newton steps: its Hessian −(H⁺ + Σ/τ) is K × K, where Σ = Φᴴ(diag μ −
μμᵀ/N)Φ is the covariance of the characters, read off one FFT of μ (χ_k χ̄_l = χ_{k−l}).
After every step the primal μ(β) is feasible, and the fit ends on a certificate, an upper
bound on L(μ) − L* (as :func:`dpsql.pgm.polish.solve_clique`, not an estimate): L(μ) minus the
Lagrange dual of the unregularised problem at the iterate β (weak duality), or the Frank–Wolfe
gap ⟨∇L, μ⟩ − N·min ∇L, whichever is smaller, within atol + rtol·L.  At a point of the path the
dual bound is τ Σ μ (log max μ − log μ), so τ shrinks (tenfold per stage, each stage started
by a tangent predictor) until that is inside the tolerance.  The caller falls back to the
first-order fit when the certificate is not reached; it uses this solver only where that fit's
exact last step (:mod:`dpsql.pgm.polish`) would be refused for its size
(:func:`face_step_refused`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from math import prod
from typing import Any

import numpy as np

from dpsql.pgm.limits import FitLimits
from dpsql.pgm.measurement import Measurement, dense

__all__ = ["face_step_refused", "solve_joint_dual"]

# The size limits (joint table cells, characters K, densified query entries) are
# FitLimits.joint_dual_* (dpsql.pgm.limits).
#: Newton steps over all values of τ before the solve gives up.
MAX_STEPS = 150
#: τ shrinks by this factor once a Newton step is short (the decrement below the tolerance).
SHRINK = 0.1
#: A Newton step whose decrement (in loss units) is at most this ends the step's value of τ.
DECREMENT = 1.0
#: ... and the dual gradient's squared norm at most this fraction of the gap tolerance.
RESIDUAL = 1e-4


def face_step_refused(tree, measurements: Sequence[Measurement], limits: FitLimits) -> bool:
    """Whether the first-order fit's exact last step (:func:`dpsql.pgm.polish.polish`) would
    be refused for its size: the junction tree over ``limits.face_step_max_cells`` cells, or the
    bound Σ_rows nnz(row)² on its Hessian's non-zeros over ``face_step_max_nnz`` (a measured value on
    clique C hosted by clique h touches nnz(query row)·|h|/|C| cells of the tree).  Only then is
    this solver used: elsewhere the first-order fit ends on the exact optimum of its face, and
    keeps its path (nltcs/ranges: bound 6.7·10⁹)."""
    if tree.size > limits.face_step_max_cells:
        return True
    position = {a: i for i, a in enumerate(tree.attributes)}
    bound = 0
    for m in measurements:
        canon = tuple(sorted(m.clique, key=position.__getitem__))
        cells = prod(tree.sizes[a] for a in canon)
        spread = tree.clique_size(tree.cliques[tree.host(canon)]) // max(cells, 1)
        rows, cols = (int(x) for x in m.query.shape)
        per_row = np.count_nonzero(dense(m.query), axis=1) if rows * cols <= limits.joint_dual_query_entries \
            else np.full(rows, cols)
        bound += int(((per_row.astype(np.int64) * spread) ** 2).sum())
        if min(bound, tree.size ** 2) > limits.face_step_max_nnz:
            return True
    return False


class _Problem:
    """The loss in Fourier coefficients: f(c) = Σ w (Bc − y)², for ``measurements`` over the
    attributes ``joint`` (sizes ``shape``)."""

    def __init__(self, joint: Sequence[str], shape: Sequence[int],
                 measurements: Sequence[Measurement], max_features: int = FitLimits().joint_dual_max_features) -> None:
        self.joint, self.shape = tuple(joint), tuple(int(s) for s in shape)
        self.n = prod(self.shape)
        self.real = all(s == 2 for s in self.shape)    # Walsh functions: every DFT is real
        axis = {a: i for i, a in enumerate(self.joint)}
        strides = np.array([prod(self.shape[i + 1:]) for i in range(len(self.shape))], dtype=np.int64)
        cliques, per_meas = {}, []
        for m in measurements:
            axes = tuple(axis[a] for a in m.clique)
            if axes not in cliques:
                sub = [self.shape[i] for i in axes]
                grid = np.indices(sub).reshape(len(axes), -1) if axes else np.zeros((0, 1), np.int64)
                cliques[axes] = (grid, (strides[list(axes)] @ grid) if axes else np.zeros(1, np.int64))
            per_meas.append(axes)
        self.index = np.unique(np.concatenate([flat for _, flat in cliques.values()]))
        self.K = self.index.size
        if self.K > max_features:
            return
        pos = {int(f): i for i, f in enumerate(self.index)}
        dtype = float if self.real else complex
        rows, weights, values = [], [], []
        for m, axes in zip(measurements, per_meas):
            grid, flat = cliques[axes]
            sizes = np.array([self.shape[i] for i in axes], dtype=float)
            cells = grid.shape[1]
            # character k restricted to the clique (u and k both over the clique, given order):
            # its marginal onto C is (n / n_C) · exp(2πi k·u / n_C) / √n
            phase = (grid.T / sizes) @ grid if axes else np.zeros((1, 1))
            chars = np.exp(2j * np.pi * phase) if not self.real else np.cos(np.pi * 2 * phase)
            chars *= (self.n / cells) / np.sqrt(self.n)
            q = dense(m.query)
            b = np.zeros((q.shape[0], self.K), dtype=dtype)
            b[:, [pos[int(f)] for f in flat]] = q @ chars
            rows.append(b)
            weights.append(np.full(q.shape[0], 1.0 / m.stddev ** 2))
            values.append(np.asarray(m.values, dtype=float))
        self.B = np.vstack(rows)
        self.w = np.concatenate(weights)
        self.y = np.concatenate(values)
        WB = self.B * self.w[:, None]
        self.H = 2.0 * (self.B.conj().T @ WB)
        self.b = 2.0 * (WB.conj().T @ self.y)
        # χ̄_k χ_l = χ_{l−k}: the FFT entry each covariance entry reads
        multi = np.array(np.unravel_index(self.index, self.shape))
        diff = np.zeros((self.K, self.K), dtype=np.int64)
        for a, (s, st) in enumerate(zip(self.shape, strides)):
            diff += ((multi[a][:, None] - multi[a][None, :]) % s) * st
        self.diff = diff

    # -- the maps between cells and coefficients ---------------------------------------------
    def coefficients(self, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(c = Φᴴμ, the orthonormal DFT of μ flattened)."""
        if self.real:
            spec = _walsh(mu)
        else:
            spec = np.fft.fftn(mu.reshape(self.shape), norm="ortho").ravel()
        return spec[self.index], spec

    def cells(self, coef: np.ndarray) -> np.ndarray:
        """Re Φ·coef: a vector over the joint's cells."""
        full = np.zeros(self.n, dtype=float if self.real else complex)
        full[self.index] = coef
        if self.real:
            return _walsh(full)
        return np.fft.ifftn(full.reshape(self.shape), norm="ortho").real.ravel()


    def loss(self, c: np.ndarray) -> tuple[float, np.ndarray]:
        """(f(c), its gradient in the coefficients, 2BᴴW(Bc − y))."""
        r = (self.B @ c).real - self.y
        wr = self.w * r
        return float(wr @ r), 2.0 * (self.B.conj().T @ wr)



def _walsh(x: np.ndarray) -> np.ndarray:
    """The orthonormal Walsh–Hadamard transform of 2^d values (its own inverse): the DFT of
    the binary joint, applied as dense Hadamard blocks over up to 6 attributes at a time (numpy's
    FFT over 16 axes of length 2 is ~10× slower)."""
    y = np.asarray(x, dtype=float).ravel()
    n = y.size
    bits = n.bit_length() - 1
    done = 0
    while done < bits:
        k = min(6, bits - done)
        block = _hadamard(k)
        post = 1 << done
        y = np.matmul(block, y.reshape(-1, 1 << k, post)).ravel()
        done += k
    return y * (1.0 / np.sqrt(n))


_HADAMARD: dict[int, np.ndarray] = {}


def _hadamard(k: int) -> np.ndarray:
    if k not in _HADAMARD:
        h = np.ones((1, 1))
        for _ in range(k):
            h = np.block([[h, h], [h, -h]])
        _HADAMARD[k] = h
    return _HADAMARD[k]


def _scatter(size: int, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(size, dtype=values.dtype)
    out[rows] = values
    return out


def _softmax(a: np.ndarray, tau: float, total: float) -> tuple[np.ndarray, float]:
    """(N·softmax(−a/τ), τN·log Σ exp(−a/τ))."""
    z = -a / tau
    top = float(z.max())
    e = np.exp(z - top)
    s = float(e.sum())
    return e * (total / s), tau * total * (top + np.log(s))


def solve_joint_dual(joint: Sequence[str], shape: Sequence[int], measurements: Sequence[Measurement],
                     total: float, atol: float, rtol: float, max_steps: int = MAX_STEPS,
                     limits: FitLimits | None = None):
    """Problem 4 on the joint table of ``joint`` (sizes ``shape``, C order) by the entropic
    path (module docstring).  Returns (table, loss history, certified, info) with ``info`` =
    {"steps", "gap", "tau", "features"}, or why the problem is outside the limits
    (``FitLimits.joint_dual_*``), a str."""
    limits = limits if limits is not None else FitLimits()
    n = prod(int(s) for s in shape)
    if not measurements:
        return "no measurement"
    if n > limits.joint_dual_max_cells:
        return (f"the joint table has {n:,} cells, over joint_dual_max_cells = "
                f"{limits.joint_dual_max_cells:,}")
    for m in measurements:
        cells = prod(int(shape[list(joint).index(a)]) for a in m.clique)
        if int(m.query.shape[0]) * cells > limits.joint_dual_query_entries:
            return (f"the query on {m.clique} has more than joint_dual_query_entries = "
                    f"{limits.joint_dual_query_entries:,} entries")
    problem = _Problem(joint, shape, measurements, limits.joint_dual_max_features)
    if problem.K > limits.joint_dual_max_features:
        return (f"the measured marginals span {problem.K:,} characters, over "
                f"joint_dual_max_features = {limits.joint_dual_max_features:,}")
    # scipy's BLAS is loaded here, after the caller limited the loaded ones to one thread: limit
    # it too (its two spinning threads made each 460 × 460 Cholesky factor 0.4 s at load 8)
    from scipy.linalg import cho_factor, cho_solve    # fitting only (a loaded model never needs it)

    from dpsql.linalg.threads import one_blas_thread
    with one_blas_thread():
        return _solve(problem, float(total), atol, rtol, max_steps, cho_factor, cho_solve)


def _refined_solve(cho_solve: Callable[..., np.ndarray], factor: Any, M: np.ndarray, r: np.ndarray) -> np.ndarray:
    """M⁻¹r from M's Cholesky factor, with one round of iterative refinement: M's condition
    grows as 1/τ."""
    x = cho_solve(factor, r)
    return x + cho_solve(factor, r - M @ x)


def _lstsq_solve(M: np.ndarray, r: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(M, r, rcond=None)[0]


def _solve(problem: _Problem, N: float, atol: float, rtol: float, max_steps: int, cho_factor, cho_solve):
    n = problem.n
    # β = E u with E = V_r Λ_r^{1/2} over H's range (β = ∇f(c) lies there): the Newton matrix
    # I + EᴴΣE/τ has eigenvalues ≥ 1, so its Cholesky factor is safe however small τ gets.
    H = problem.H
    off = H - np.diag(np.diag(H))
    scale_h = float(np.abs(np.diag(H)).max()) or 1.0
    if float(np.abs(off).max()) <= 1e-12 * scale_h:
        h = np.diag(H).real.copy()
        keep = h > 1e-12 * scale_h
        E = np.zeros((problem.K, int(keep.sum())), dtype=H.dtype)
        E[np.flatnonzero(keep), np.arange(E.shape[1])] = np.sqrt(h[keep])
        diagonal = np.sqrt(h[keep])
        rows = np.flatnonzero(keep)
    else:
        lam, V = np.linalg.eigh(H)
        keep = lam > 1e-12 * float(lam.max())
        E = V[:, keep] * np.sqrt(lam[keep])
        diagonal, rows = None, None
    # ⟨β, c₀⟩ = Re eᴴu with c₀ = H⁺b the unconstrained least-squares coefficients
    e = (problem.b[rows] / diagonal) if diagonal is not None else \
        (V[:, keep].conj().T @ problem.b) / np.sqrt(lam[keep])

    def at(u, tau):
        beta = E @ u
        a = problem.cells(beta)
        mu, lse = _softmax(a, tau, N)
        c, spec = problem.coefficients(mu)
        dual = -float(np.real(np.vdot(e, u))) - 0.5 * float(np.real(np.vdot(u, u))) - lse
        return mu, c, spec, dual

    # f at the unconstrained least-squares coefficients c₀ = H⁺b: the constant of the dual
    if diagonal is None:
        c0 = V[:, keep] @ ((V[:, keep].conj().T @ problem.b) / lam[keep])
    else:
        assert rows is not None   # set with diagonal
        c0 = _scatter(problem.K, rows, problem.b[rows] / diagonal ** 2)
    f_min = problem.loss(c0)[0]

    def certificate(mu, c, u=None):
        """(L(μ), a bound on L(μ) − L*): the smaller of the Frank–Wolfe gap (the Wolfe dual at
        β = ∇f) and L(μ) minus the Lagrange dual of the unregularised problem at the iterate β,
        f(c₀) − ⟨β, c₀⟩ − ½⟨β, H⁺β⟩ + N·min_x (Φβ)_x ≤ L* (weak duality)."""
        value, gc = problem.loss(c)
        grad = problem.cells(gc)
        bound = float(grad @ mu) - N * float(grad.min())
        if u is not None:
            a = problem.cells(E @ u)
            terms = (f_min, -float(np.real(np.vdot(e, u))), -0.5 * float(np.real(np.vdot(u, u))),
                     N * float(a.min()))
            # the sum's rounding is charged to the bound (terms ~10⁴ on nltcs: ~10⁻¹² units)
            lower = sum(terms) - 1e-10 * sum(abs(x) for x in terms)
            bound = min(bound, value - lower)
        return value, bound

    u = np.zeros(E.shape[1], dtype=H.dtype)
    mu = np.full(n, N / n)
    c, spec = problem.coefficients(mu)
    value, gap = certificate(mu, c)
    history = [value]
    # τ starts where the entropy and the loss's first-order change are comparable
    _, gc = problem.loss(c)
    grad = problem.cells(gc)
    tau = max(float(grad.max() - grad.min()), 1e-12)
    mu, c, spec, dual = at(u, tau)
    best = (value, gap, mu)
    steps = 0
    certified = gap <= atol + rtol * abs(value)
    g = -e - u + E.conj().T @ c
    residual = float(np.real(np.vdot(g, g)))
    while not certified and steps < max_steps:
        steps += 1
        target = atol + rtol * abs(value)
        cov = spec[problem.diff] / np.sqrt(n) - np.outer(c, c.conj()) / N
        if diagonal is not None:
            assert rows is not None   # set with diagonal
            G = cov[np.ix_(rows, rows)] * np.outer(diagonal, diagonal)
        else:
            G = E.conj().T @ cov @ E
        M = np.eye(G.shape[0]) + G / tau
        M = 0.5 * (M + M.conj().T)
        solve: Callable[[np.ndarray], np.ndarray]   # this iteration's M⁻¹, bound now
        try:
            solve = partial(_refined_solve, cho_solve, cho_factor(M), M)
        except np.linalg.LinAlgError:
            solve = partial(_lstsq_solve, M)
        delta = solve(g)
        decrement = float(np.real(np.vdot(g, delta)))
        # Armijo on the dual; where its change is below the rounding of its value (small τ),
        # a step that lowers the dual gradient's norm is taken instead
        flat = decrement <= 1e-11 * max(abs(dual), 1.0)
        t = 1.0
        for _ in range(40):
            trial = u + t * delta
            t_mu, t_c, t_spec, t_dual = at(trial, tau)
            t_g = -e - trial + E.conj().T @ t_c
            t_res = float(np.real(np.vdot(t_g, t_g)))
            if t_dual >= dual + 0.25 * t * decrement and not flat or flat and t_res < residual:
                break
            t *= 0.5
        else:
            break
        u, mu, c, spec, dual, g, residual = trial, t_mu, t_c, t_spec, t_dual, t_g, t_res
        value, gap = certificate(mu, c, u)
        history.append(value)
        if gap < best[1]:
            best = (value, gap, mu)
        certified = gap <= atol + rtol * abs(value)
        positive = mu > 0.0
        # the gap an exact point of the path at this τ has: τ Σ μ (log max μ − log μ)
        on_path = tau * float(mu[positive] @ (np.log(mu.max()) - np.log(mu[positive])))
        if t == 1.0 and decrement <= DECREMENT and residual <= RESIDUAL * target \
                and on_path > 0.05 * target:
            # near this τ's point of the path: predict the next one along the path's tangent,
            # du/dτ = (u − M⁻¹u)/τ (differentiating the optimality condition), then correct
            new_tau = tau * SHRINK
            u = u + (new_tau - tau) / tau * (u - solve(u))
            tau = new_tau
            mu, c, spec, dual = at(u, tau)
            g = -e - u + E.conj().T @ c
            residual = float(np.real(np.vdot(g, g)))
    value, gap, mu = best
    info = {"steps": steps, "gap": gap, "tau": tau, "features": problem.K}
    return mu.reshape(problem.shape), history, certified, info
