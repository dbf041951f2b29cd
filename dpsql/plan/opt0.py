"""OPT_0: strategy optimisation for an explicitly represented (per-attribute) workload.

Works on the n×n gram V = WᵀW only (thesis §3.3); every routine returns a dense strategy
``A`` and its *loss* ``‖A‖²·tr(V (AᵀA)⁺)`` with the L1 (Laplace) or L2 (Gaussian) column
norm.  Multiply by the noise variance (2b² or σ²) for an expected error (Prop. 9).

Gaussian (§3.3.1, Definition 13).  The convex problem  min tr(X⁻¹V)  s.t. diag X = 1,
X ≻ 0  has the Lagrangian dual  max_λ 2·tr((Λ^½VΛ^½)^½) − 1ᵀλ,  whose maximiser gives the
primal optimum  X(λ) = Λ^-½ (Λ^½VΛ^½)^½ Λ^-½  (stationarity X Λ X = V).  By Danskin the dual
gradient is diag X(λ) − 1, so one symmetric eigendecomposition per step gives value and
gradient of an n-variable smooth concave problem instead of n²/2 primal variables.  λ = 1
is exactly the thesis' SVD-bound initialisation X = V^½; we take two multiplicative
fixed-point steps (λ_i ← λ_i·x_i²/mean, which equalises column norms to first order) and
then run scipy L-BFGS on log λ.  Every λ yields a valid strategy A = Σ^¼ Pᵀ Λ^-½, whose loss
max_i X_ii · tr((Λ^½VΛ^½)^½) we track, keeping the best.  The primal objective and gradient
(Cholesky, −X⁻¹VX⁻¹) are kept for validation and an optional polish.

Laplace (§3.3.2, Definition 14/15).  p-Identity A(Θ) = [I; Θ]·diag(1 + 1ᵀΘ)⁻¹ has unit L1
column norms, so the loss is tr(S V S (I + ΘᵀΘ)⁻¹) with s = 1 + 1ᵀΘ.  Woodbury turns the
n×n inverse into a p×p one: (I + ΘᵀΘ)⁻¹ = I − ΘᵀR⁻¹Θ, R = I + ΘΘᵀ, and ΘM = R⁻¹Θ, so loss
and gradient cost one p×n×n GEMM plus O(p²n) work (derivation in :func:`pidentity_loss`).
"""

from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import scipy.linalg as sla
import scipy.optimize as so

from dpsql.plan.gram import FactorPinv, column_classes, span_coefficients

__all__ = ["FactorResult", "factor_loss", "sensitivity", "dual_ascent", "gaussian_dual", "gaussian_span",
           "gaussian_primal_loss",
           "pidentity_loss", "pidentity", "projected_lbfgs", "opt0", "semiseparable_right", "Progress"]

#: progress(operator, iteration, loss): loss is the operator's current ‖A‖²·tr(WᵀW(AᵀA)⁺),
#: i.e. the expected error before the noise variance (2 for Laplace, 1 for Gaussian).
Progress = Callable[[str, int, float], None]


@dataclass(frozen=True)
class FactorResult:
    """A dense per-attribute strategy and its loss ‖A‖²·tr(V(AᵀA)⁺)."""

    matrix: np.ndarray
    loss: float
    method: str
    lower_bound: float = 0.0    # a certified lower bound on the optimal loss, when known


def sensitivity(A: np.ndarray, p: int) -> float:
    """Max column L1 (p=1) or L2 (p=2) norm (thesis Prop. 2)."""
    if p == 1:
        return float(np.abs(A).sum(axis=0).max())
    return float(np.sqrt((A * A).sum(axis=0).max()))


def factor_loss(V: np.ndarray, A: np.ndarray, p: int) -> float:
    """‖A‖_p² · tr(V (AᵀA)⁺), or inf when A does not support the workload (V(I−A⁺A) ≠ 0)."""
    tr = FactorPinv.of(A).trace(V)
    return math.inf if not math.isfinite(tr) else sensitivity(A, p) ** 2 * tr


# --- Gaussian: dual of the convex reformulation --------------------------------------------

def _dual_eval(V: np.ndarray, lam: np.ndarray):
    s = np.sqrt(lam)
    w, P = np.linalg.eigh(s[:, None] * V * s[None, :])
    root = np.sqrt(np.clip(w, 0.0, None))
    x = ((P * P) @ root) / lam            # diag X(λ)
    return x, float(root.sum()), root, P


#: Share of the sensitivity given to the null space of a rank-deficient gram (see below).
NULL_SHARE = 1e-3


def _dual_strategy(lam: np.ndarray, root: np.ndarray, P: np.ndarray) -> np.ndarray:
    """A = Σ^¼ Pᵀ Λ^-½ on the range of V, completed to full rank on its null space.

    The optimal X(λ) has range(V) (thesis §3.3.1 allows X ≻ 0 only; for singular V the
    optimum lies on the boundary).  Such a strategy supports W exactly, but once rounded to
    the measurement grid its rows leave range(V) and it supports nothing (the infinite
    OPT_0 errors of issue 16).  Adding rows √η·Nᵀ for an orthonormal basis N of null(V)
    makes it full rank, so the rounded matrix still supports every query, at a cost of
    at most a factor 1 + η in the loss: X + ηNNᵀ has the same tr(V X⁺) (V N = 0 and N is
    orthogonal to range(X)) and max diag at most (1 + η)·max diag X.
    """
    keep = root > root.max() * 1e-5
    A = (np.sqrt(root[keep])[:, None] * P[:, keep].T) / np.sqrt(lam)[None, :]
    if not keep.all():
        # null(V) = Λ^½ null(Λ^½VΛ^½): orthonormalise those directions.
        Z = np.sqrt(lam)[:, None] * P[:, ~keep]
        N = np.linalg.qr(Z)[0]
        x = (A * A).sum(axis=0)
        A = np.vstack([A, math.sqrt(NULL_SHARE * float(x.max())) * N.T])
    # Rows of the eigenbasis are signed arbitrarily by LAPACK; fix the sign so the same
    # workload always yields the same matrix (stable cache fingerprints and rounding).
    signs = np.sign(A[np.arange(A.shape[0]), np.abs(A).argmax(axis=1)])
    return A * np.where(signs == 0, 1.0, signs)[:, None]


class _Converged(Exception):
    """Raised inside the dual objective once the duality gap certifies the tolerance."""


def dual_ascent(evaluate: Callable[[np.ndarray], tuple[np.ndarray, float]], r: int, best: dict, *,
                fixed_point_steps: int, maxiter: int, gap_tol: float, refine: bool = True) -> None:
    """Maximise the dual g(λ) = 2·tr(M(λ)^½) − 1ᵀλ of OPT_0's Gaussian problem over λ ≥ 0.

    ``evaluate(λ)`` returns (x, tr(M^½)) with x_a = t_aᵀ X t_a the primal point's column
    loads, and records that point and the dual bound in ``best`` (keys "loss" and "dual").
    A few multiplicative fixed-point steps λ ← λ·(x/mean x)², the best point of the ray
    through λ (see :func:`gaussian_dual`), then, when ``refine``, L-BFGS-B in η = log λ,
    stopped as soon as the gap between them is within ``gap_tol`` (relative)."""
    lam = np.ones(r)
    for _ in range(max(fixed_point_steps, 0)):
        x, tr = evaluate(lam)
        lam = lam * (x / x.mean()) ** 2
    x, tr = evaluate(lam)
    lam = lam * (tr / lam.sum()) ** 2    # the best point of the ray

    def neg_dual(eta):
        lam_ = np.exp(eta)
        x_, tr_ = evaluate(lam_)
        if best["loss"] - best["dual"] <= gap_tol * best["loss"]:
            raise _Converged
        return -(2.0 * tr_ - lam_.sum()), -(lam_ * (x_ - 1.0))

    if refine and best["loss"] - best["dual"] > gap_tol * best["loss"]:
        # A box of e^±30 around the fixed-point start keeps a long L-BFGS step from
        # overflowing exp(η) (inf entries make the eigendecomposition fail); the optimum
        # lies well inside it for any workload whose gram is finite.
        eta0 = np.log(lam)
        try:
            so.minimize(neg_dual, eta0, jac=True, method="L-BFGS-B",
                        bounds=list(zip(eta0 - 30.0, eta0 + 30.0)),
                        options=dict(maxiter=maxiter, maxcor=20, ftol=1e-12, gtol=1e-10))
        except _Converged:
            pass


def gaussian_dual(V: np.ndarray, *, maxiter: int = 60, fixed_point_steps: int = 2,
                  gap_tol: float = 5e-4, progress: Progress | None = None) -> FactorResult:
    """OPT_0 for Gaussian noise via the dual of Definition 13 (see module docstring).

    Stops as soon as the best strategy's loss is within ``gap_tol`` (relative) of the best
    dual value, i.e. certified within that factor of the optimum.
    """
    n = V.shape[0]
    active = np.diag(V) > 1e-12 * max(float(np.abs(np.diag(V)).max()), 1e-300)
    if not active.any():
        return FactorResult(np.zeros((1, n)), 0.0, "gaussian-dual")
    Va = V[np.ix_(active, active)]
    # the best point so far, shared with dual_ascent: floats and, once one is recorded, arrays
    best: dict[str, Any] = {"loss": math.inf, "lam": None, "dual": 0.0}
    it = [0]

    def record(lam, x, tr, root, P):
        loss = float(x.max() * tr)
        # Weak duality: any λ ≥ 0 gives 2·tr(M^½) − 1ᵀλ ≤ the optimal loss; over the ray
        # cλ that is maximised at c = (tr/1ᵀλ)², giving tr²/1ᵀλ.  The best such value
        # certifies how far the returned strategy can be from optimal.
        best["dual"] = max(best["dual"], tr * tr / float(lam.sum()))
        it[0] += 1
        if loss < best["loss"]:
            best.update(loss=loss, lam=lam.copy(), root=root, P=P)
        if progress is not None:
            progress("opt0-gaussian", it[0], best["loss"])

    def evaluate(lam):
        x, tr, root, P = _dual_eval(Va, lam)
        record(lam, x, tr, root, P)
        return x, tr

    dual_ascent(evaluate, Va.shape[0], best, fixed_point_steps=fixed_point_steps, maxiter=maxiter,
                gap_tol=gap_tol, refine=maxiter > 0 and Va.shape[0] > 1)
    Aa = _dual_strategy(best["lam"], best["root"], best["P"])
    A = np.zeros((Aa.shape[0], n))
    A[:, active] = Aa
    # The completion rows may raise the largest column norm (by at most 1 + η); the
    # trace part is unchanged (see _dual_strategy).
    loss = float((Aa * Aa).sum(axis=0).max()) * float(best["root"].sum())
    return FactorResult(A, max(loss, best["loss"]), "gaussian-dual", best["dual"])


def gaussian_primal_loss(v: np.ndarray, V: np.ndarray) -> tuple[float, np.ndarray]:
    """Primal objective tr(X⁻¹V) of Definition 13 over the strict lower triangle of X
    (unit diagonal eliminated) and its gradient −2·tril(X⁻¹VX⁻¹); inf off the PD cone."""
    n = V.shape[0]
    il = np.tril_indices(n, -1)
    X = np.eye(n)
    X[il] = v
    X.T[il] = v
    try:
        c = sla.cho_factor(X, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return math.inf, np.zeros_like(v)
    Xi_V = sla.cho_solve(c, V, check_finite=False)
    G = sla.cho_solve(c, Xi_V.T, check_finite=False)     # X⁻¹ V X⁻¹
    return float(np.trace(Xi_V)), -2.0 * G[il]


# --- Laplace: p-Identity ------------------------------------------------------------------

def semiseparable_right(a: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """T ↦ T·V for V[i, j] = a[min(i,j)]·b[max(i,j)] (Prefix/AllRange grams) in O(pn).

    (TV)_kj = b_j Σ_{i≤j} a_i T_ki + a_j Σ_{i>j} b_i T_ki: two running sums along the
    rows of T instead of the O(pn²) product; with non-negative T, a and b nothing cancels.
    """
    def right(T: np.ndarray) -> np.ndarray:
        low = np.cumsum(T * a, axis=1)
        tb = T * b
        high = tb.sum(axis=1, keepdims=True) - np.cumsum(tb, axis=1)
        return low * b + high * a
    return right


def pidentity_loss(theta: np.ndarray, V: np.ndarray, p: int,
                   right: Callable[[np.ndarray], np.ndarray] | None = None,
                   vdiag: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Loss tr(SVS(I+ΘᵀΘ)⁻¹) of A(Θ) = [I; Θ]S⁻¹ and its gradient wrt Θ (Definition 15).

    With V' = SVS, M = (I+ΘᵀΘ)⁻¹ = I − ΘᵀR⁻¹Θ and Z = MV'M:
    ∂/∂Θ_kj = 2(V'M)_jj / s_j − 2(ΘZ)_kj, where (V'M)_jj = V'_jj − Σ_k(ΘV')_kj(R⁻¹Θ)_kj
    and ΘZ = R⁻¹(ΘV' − (ΘV'Θᵀ)R⁻¹Θ), because ΘM = R⁻¹Θ.
    """
    n = V.shape[0]
    T = theta.reshape(p, n)
    s = 1.0 + T.sum(axis=0)
    # ΘV' = ((Θ∘s)V)∘s: the only O(pn²) product, O(pn) for a semiseparable V.
    TV = (((T * s) @ V) if right is None else right(T * s)) * s
    # R is only p×p: invert it once and keep every n-wide product a GEMM.
    Ri = sla.cho_solve(sla.cho_factor(np.eye(p) + T @ T.T, lower=True, check_finite=False),
                       np.eye(p), check_finite=False)
    RiT = Ri @ T
    vdiag = s * s * (np.diag(V) if vdiag is None else vdiag)
    cross = np.sum(TV * RiT, axis=0)
    loss = float(vdiag.sum() - cross.sum())
    TZ = Ri @ (TV - (TV @ T.T) @ RiT)
    grad = (2.0 * (vdiag - cross) / s)[None, :] - 2.0 * TZ
    return loss, grad.ravel()


def _pidentity_matrix(T: np.ndarray) -> np.ndarray:
    T = T[T.sum(axis=1) > 1e-12 * max(T.max(initial=0.0), 1e-300)]
    s = 1.0 + T.sum(axis=0)
    return np.vstack([np.eye(T.shape[1]), T]) / s[None, :]


def projected_lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, *,
                    maxiter: int = 2000, ftol: float = 1e-4, memory: int = 3,
                    callback: Callable[[int, float], None] | None = None
                    ) -> tuple[np.ndarray, float, int]:
    """Minimise ``fun`` over x ≥ 0: L-BFGS directions on the free variables, projected
    Armijo backtracking (the two-metric projection idea of Bertsekas 1982 with a
    limited-memory metric, as in projected quasi-Newton methods).

    Why not scipy's L-BFGS-B: for p-Identity at n = 1024 (65,536 variables, ~200
    iterations) its generalised Cauchy point search and wrapper cost about 3 ms per
    evaluation, more than the loss itself (~2.5 ms); p-Identity only needs Θ ≥ 0, which a
    projection handles in O(n) per step.  Measured on ALL RANGE / PREFIX n = 1024, seeds
    0-4: equal best-of-5 loss, 40 % less CPU (bench/RESULTS.md, HDMM planner).  Three pairs
    were as good as five here and cheaper.  Stops like L-BFGS-B's ``factr``: when one
    iteration improves the loss by less than ``ftol`` relative to max(|f|, 1).
    Returns (x, f, iterations).
    """
    x = np.maximum(x0, 0.0)
    f, g = fun(x)
    S: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    it = 0
    for it in range(1, maxiter + 1):
        # Variables held at the bound whose gradient pushes outward stay fixed this step;
        # all vector work below runs on the free ones only (most of Θ ends at zero).
        idx = np.flatnonzero((x > 0.0) | (g < 0.0))
        if idx.size == 0:
            break
        gF = g[idx]
        q = gF.copy()
        # Pairs restricted to the free variables: the two-loop recursion then
        # approximates the inverse of the reduced Hessian B_FF (as L-BFGS-B's subspace
        # step does), not the free block of the full inverse.
        pairs = []
        for s, y in zip(S, Y):
            sF, yF = s[idx], y[idx]
            sy = float(sF @ yF)
            if sy > 1e-10 * float(yF @ yF):
                pairs.append((sF, yF, 1.0 / sy))
        alpha = []
        for sF, yF, r in reversed(pairs):
            a = r * float(sF @ q)
            alpha.append(a)
            q -= a * yF
        if pairs:
            sF, yF, r = pairs[-1]
            q *= 1.0 / (r * float(yF @ yF))
        else:
            q /= max(float(np.linalg.norm(q)), 1e-300)   # first step: unit length
        for (sF, yF, r), a in zip(pairs, reversed(alpha)):
            q += (a - r * float(yF @ q)) * sF
        dF = -q
        if float(gF @ dF) >= 0.0:    # the metric lost positivity on the free set: restart
            S.clear()
            Y.clear()
            dF = -gF / max(float(np.linalg.norm(gF)), 1e-300)
        xF = x[idx]
        t = 1.0
        for _ in range(40):
            stepF = np.maximum(xF + t * dF, 0.0) - xF
            xn = x.copy()
            xn[idx] += stepF
            fn, gn = fun(xn)
            if fn <= f + 1e-4 * float(gF @ stepF):
                break
            t *= 0.5
        else:
            break
        s, y = xn - x, gn - g
        S.append(s)
        Y.append(y)
        if len(S) > memory:
            S.pop(0)
            Y.pop(0)
        done = (f - fn) <= ftol * max(abs(f), abs(fn), 1.0)
        x, f, g = xn, fn, gn
        if callback is not None:
            callback(it, f)
        if done:
            break
    return x, f, it


#: From this many p-Identity variables on, the projected L-BFGS is used.  Below it scipy's
#: L-BFGS-B costs little, and on small problems its Cauchy-point path reached better local
#: optima: on single range queries over 99 cells (p = 6; the optimum is 1.0) its restarts
#: ended at 1.0-2.4 where the projected method's ended at 1.05-5.  At n = 1024 (65,536
#: variables) both reach the same losses (bench/RESULTS.md) and the projected one is 2-4x
#: faster.
PROJECTED_MIN_VARIABLES = 1 << 15


def pidentity(V: np.ndarray, p: int, rng: np.random.Generator, *, ftol: float = 1e-4,
              maxiter: int = 2000, progress: Progress | None = None,
              right: Callable[[np.ndarray], np.ndarray] | None = None) -> FactorResult:
    """One restart of p-Identity from a random non-negative Θ (L-BFGS with Θ ≥ 0).

    ``ftol`` = 1e-4 stops once an iteration improves the loss by less than 0.01 %; the
    restarts (not a tighter tolerance) are what reach the thesis values (§3.8).
    """
    n = V.shape[0]
    # Uniform [0, 1) entries give column sums ≈ p/2, and A scales the identity part by
    # 1/(1 + column sum): for p = 64 the start is far from any good strategy and about a
    # hundred iterations only shrink Θ.  Capping the expected column sum at ≈ 8 (what
    # p = 16, n = 256 starts from, where the thesis values are reached) keeps the random
    # shape and halved the iterations at n = 1024 with equal or lower loss (RESULTS.md).
    x0 = rng.random(p * n) * min(1.0, 16.0 / p)

    def cb(iteration: int, loss: float) -> None:
        if progress is not None:
            progress("opt0-laplace", iteration, loss)

    vdiag = np.diag(V).copy()
    if p * n >= PROJECTED_MIN_VARIABLES:
        x, f, _ = projected_lbfgs(lambda t: pidentity_loss(t, V, p, right, vdiag), x0,
                                  maxiter=maxiter, ftol=ftol, callback=cb)
    else:
        it = [0]

        def scipy_cb(intermediate_result):
            it[0] += 1
            cb(it[0], float(intermediate_result.fun))

        res = so.minimize(pidentity_loss, x0, args=(V, p, right, vdiag), jac=True,
                          method="L-BFGS-B",
                          bounds=so.Bounds(np.zeros(p * n), np.full(p * n, np.inf)),
                          callback=scipy_cb, options=dict(maxiter=maxiter, ftol=ftol, maxcor=5))
        x, f = res.x, float(res.fun)
    A = _pidentity_matrix(x.reshape(p, n))
    return FactorResult(A, float(f), f"p-identity(p={p})")


# --- OPT_0 operator ------------------------------------------------------------------------

def _baselines(V: np.ndarray) -> list[FactorResult]:
    n = V.shape[0]
    out = [FactorResult(np.eye(n), float(np.trace(V)), "identity")]
    mean = V.sum() / (n * n)
    if (n > 1 and mean > 0 and np.allclose(V[0], mean, rtol=1e-10, atol=0.0)
            and np.allclose(V, mean, rtol=1e-10, atol=0.0)):
        # A pure Total sub-workload (V = μ·11ᵀ): one row of ones answers it; its gram
        # pseudo-inverse is 11ᵀ/n², so the loss is μ against n·μ for the identity.
        out.append(FactorResult(np.ones((1, n)), float(mean), "total"))
    return out


def opt0(V: np.ndarray, noise: str, *, p: int | None = None, restarts: int = 1,
         rng: np.random.Generator | None = None, progress: Progress | None = None,
         right: Callable[[np.ndarray], np.ndarray] | None = None) -> FactorResult:
    """OPT_0 (thesis §3.3): best of Identity, Total (when applicable) and the optimiser.

    The problem is first reduced to the classes of cells the workload cannot tell apart
    (equal columns of W, i.e. equal rows of V; cells outside every query dropped), which
    leaves its optimum unchanged (:mod:`dpsql.plan.gram`); the strategy found on the
    classes is mapped back by repeating its columns.  ``right`` optionally computes
    T ↦ T·V faster than the dense product (structured grams, unreduced only).
    """
    rng = np.random.default_rng(0) if rng is None else rng
    n = V.shape[0]
    span = span_coefficients(V)
    if span is not None and span[0] == 0.0 and span[1] >= 0.0:
        # c·11ᵀ: one class (every cell answered alike), or none when c = 0; what the
        # O(n²) class hash below finds, without it
        if span[1] == 0.0:
            return FactorResult(np.zeros((1, n)), 0.0, "empty")
        return FactorResult(np.ones((1, n)), float(V[0, 0]), "total")
    if span is not None and span[0] > 0.0 and noise == "gaussian":
        # b·I + c·11ᵀ with b > 0 tells every cell apart: no classes to find
        return _opt0_classes(V, noise, p, restarts, rng, progress, right, span)
    labels, reps = column_classes(V)
    r = reps.size
    if r == 0:
        return FactorResult(np.zeros((1, n)), 0.0, "empty")
    if r == n and np.array_equal(labels, np.arange(n)):
        return _opt0_classes(V, noise, p, restarts, rng, progress, right)
    pp = None if p is None else (1 if p == 1 else max(1, r // 16))
    res = _opt0_classes(V[np.ix_(reps, reps)], noise, pp, restarts, rng, progress, None)
    A = np.where(labels[None, :] >= 0, res.matrix[:, np.maximum(labels, 0)], 0.0)
    method = "total" if r == 1 and np.all(labels == 0) else f"{res.method} on {r} cell classes"
    return FactorResult(A, res.loss, method, res.lower_bound)


def gaussian_span(b: float, c: float, n: int) -> FactorResult:
    """OPT_0's Gaussian optimum for V = b·I + c·11ᵀ (b > 0) in closed form.

    The problem min tr(V X⁻¹) s.t. diag X ≤ 1 is convex and, like V, invariant under
    permuting the cells, so averaging any optimum over the permutations gives one in
    span{I, 1}; there the diagonal is constant and X = V^½/d (d = the diagonal of V^½)
    reaches the SVD bound (tr V^½)²/n, which no strategy beats (thesis Prop. 10): it is the
    optimum.  A = V^¼/√d has AᵀA = X and stays αI + β11ᵀ, where the dual's eigenvectors of
    a (n − 1)-fold eigenvalue are an arbitrary dense basis; it costs O(n²) instead of one
    n³ eigendecomposition per dual step (a 1,459-label GROUP BY, issue 35 item 2).
    """
    top = max(b + c * n, 0.0)           # the eigenvalue on the ones vector
    r2 = (math.sqrt(b), math.sqrt(top))
    r4 = (math.sqrt(r2[0]), math.sqrt(r2[1]))
    d = r2[0] + (r2[1] - r2[0]) / n     # diag of V^½
    A = np.full((n, n), (r4[1] - r4[0]) / n)
    A[np.diag_indices(n)] += r4[0]
    A /= math.sqrt(d)
    trace = (n - 1) * r2[0] + r2[1]     # tr V^½
    loss = trace * trace / n
    return FactorResult(A, loss, "gaussian (closed form on span{I, 1})", loss)


def _opt0_classes(V, noise, p, restarts, rng, progress, right, span=None) -> FactorResult:
    cands = _baselines(V)
    n = V.shape[0]
    if n > 1 and not any(c.method == "total" for c in cands):
        if span is None and noise == "gaussian":
            span = span_coefficients(V)
        if span is not None and span[0] > 0.0:
            cands.append(gaussian_span(span[0], span[1], n))
        elif noise == "gaussian":
            cands.append(gaussian_dual(V, progress=progress))
        else:
            pp = max(1, n // 16) if p is None else max(1, int(p))
            for _ in range(max(1, restarts)):
                cands.append(pidentity(V, pp, rng, progress=progress, right=right))
    return min(cands, key=lambda c: c.loss)
