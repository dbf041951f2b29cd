"""The dense-block fit in the workload's metric (thesis ch. 4 §4.3 Problem 4, §4.6.1).

With the L2 loss, Problem 4 is a projection: on the affine hull of the measurements
L(μ) = L(x̂) + ‖μ − x̂‖²_A, where x̂ is a least-squares estimate and ‖v‖²_A = Σ_i ‖Q_i v‖²/σ_i²,
so the fitted μ is the point of the marginal polytope nearest to x̂ in the *measurement*
metric.  The truth lies in the polytope, and projections onto a convex set do not expand
distances, so the fit is never farther from the truth than least squares in that metric.
Users score answers in the *workload's* metric ‖W·‖, which HDMM's strategy weighs
differently: on adult/prefix the fit lost to least squares on some releases (bench/RESULTS.md,
"Why the model is not ahead on prefix").  This module projects in the workload's metric instead:
it minimises

    F(μ) = L(μ) + κ‖W(μ − x̂)‖²  =  F(x̂) + ‖μ − x̂‖²_M,   M = AᵀΣ⁻¹A + κWᵀW,

(the fit to the real measurements plus the pseudo-measurements (W, Wx̂)), with κ chosen so that
W's term is ``WORKLOAD_WEIGHT`` times the measurements' in spectral norm: W's directions follow
W's metric, and the directions W does not see keep what the measurements say (ad hoc queries).
The same argument gives ‖μ − μ*‖_M ≤ ‖x̂ − μ*‖_M on every release for the truth μ*; the proof
and its conditions are in docs/engine.md, "The fit's metric".  It is post-processing of the
released values (and of the public workload): no privacy cost.

Applied where x̂ and Wx̂ are cheap: one Kronecker block covering the joint table of the measured
attributes (the dense-block path of :func:`dpsql.pgm.estimation.estimate`, solved by
:func:`dpsql.pgm.polish.solve_clique`), and a workload whose rows over that table fit in
``FitLimits.workload_max_entries`` dense entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.domain import Domain
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.measurement import dense
from dpsql.pgm.polish import _pcg, solve_clique, top_eigenvalue

__all__ = ["WORKLOAD_WEIGHT", "MetricChoice", "WorkloadLoss", "choose_fit",
           "joint_workload", "solve_in_workload_metric", "workload_risks"]

#: W's term against the measurements', in the spectral norms of their Hessians.  Chosen on
#: simulated releases of adult's prefix and ranges blocks (bench/RESULTS.md, "The fit in the
#: workload's metric"): 10 lowered the workload's mean squared error against the
#: measurement-metric fit on both; 100 (W's metric nearly alone) lost on ranges, whose 200
#: range rows are then held at least squares' answers and lose what non-negativity gains there.
WORKLOAD_WEIGHT = 10.0
#: Conjugate-gradient iterations and relative residual of the least-squares estimate x̂.
LS_ITERS = 500
LS_RTOL = 1e-10
#: Ridge of the least-squares solve, relative to the Hessian's largest eigenvalue: where the
#: measurements do not determine x̂ it stays near the minimum-norm solution.
LS_RIDGE = 1e-12
#: Power iterations for the largest eigenvalues (of H and of WᵀW) that scale the ridge and κ.
POWER_ITERS = 30


def _terms(query, coef: float = 1.0):
    """[(coefficient, factors)] of a Union / Weighted / Kron query tree, rows in order; None
    for anything else (duck-typed on the ``dpsql.linalg`` contract, as ``GraphicalModel.answer``)."""
    if hasattr(query, "blocks"):
        out = []
        for b in query.blocks:
            t = _terms(b, coef)
            if t is None:
                return None
            out.extend(t)
        return out
    if hasattr(query, "weight") and hasattr(query, "base"):
        return _terms(query.base, coef * float(query.weight))
    if hasattr(query, "factors"):
        return [(coef, list(query.factors))]
    return None


def _outside(f, size: int) -> np.ndarray:
    """F·u for the uniform distribution u over an attribute outside the joint table (the model
    keeps such attributes uniform and independent): one column."""
    kind = type(f).__name__
    if kind == "Total":
        return np.ones((1, 1))
    if kind == "Identity":
        return np.full((size, 1), 1.0 / size)
    return (dense(f).sum(axis=1) / size)[:, None]


def joint_workload(domain: Domain, workload: Sequence, joint: Sequence[str],
                   max_entries: int = FitLimits().workload_max_entries) -> np.ndarray | None:
    """The workload's rows as a dense matrix over the joint table of ``joint`` (attributes in
    domain order, C-order cells): each Kron term's factors on ``joint``, its other attributes at
    the model's uniform completion.  ``workload`` holds query matrices over the whole domain
    (factors aligned with ``domain.attributes``, weights applied).  None when a query is not a
    Union / Weighted / Kron tree, the rows would exceed ``max_entries`` entries, or
    there are none."""
    members = set(joint)
    n = int(np.prod([domain[a] for a in domain.attributes if a in members], dtype=np.int64))
    blocks, entries = [], 0
    for query in workload:
        terms = _terms(query)
        if terms is None:
            return None
        for coef, factors in terms:
            if len(factors) != len(domain.attributes):
                return None
            mats, rows = [], 1
            for a, size, f in zip(domain.attributes, domain.shape, factors):
                if int(f.shape[1]) != size:
                    return None
                rows *= int(f.shape[0])
                mats.append(f if a in members else None)
            entries += rows * n
            if entries > max_entries:
                return None
            m = np.full((1, 1), float(coef))
            for a, size, f in zip(domain.attributes, domain.shape, factors):
                m = np.kron(m, dense(f) if a in members else _outside(f, size))
            blocks.append(m)
    return np.vstack(blocks) if blocks else None


class WorkloadLoss:
    """F(μ) = L(μ) + κ‖Wμ − z‖² on a one-clique table, called as the measurement loss is
    (``loss([table]) -> (value, [gradient])``), so that ``solve_clique`` minimises it."""

    def __init__(self, loss, W: np.ndarray, z: np.ndarray, kappa: float, shape) -> None:
        self.loss, self.W, self.z, self.kappa, self.shape = loss, W, z, float(kappa), tuple(shape)

    def workload_term(self, table: np.ndarray) -> float:
        r = self.W @ np.ravel(table) - self.z
        return float(r @ r)

    def __call__(self, tables):
        value, grads = self.loss(tables)
        x = np.ravel(tables[0])
        r = self.W @ x - self.z
        g = (2.0 * self.kappa) * (r @ self.W)
        if grads[0] is not None:
            g = g + np.ravel(grads[0])
        return value + self.kappa * float(r @ r), [g.reshape(self.shape)]


def _cg(apply, precond, rhs: np.ndarray, iters: int, rtol: float) -> np.ndarray:
    """Preconditioned conjugate gradients for apply(x) = rhs (symmetric positive definite),
    unconstrained (``polish._pcg`` solves on a face of the simplex).  Stops on the plain
    residual, ‖r‖ ≤ rtol·‖rhs‖: ``_pcg``'s preconditioned-residual stop ran the least-squares
    solve ~40% longer on an adult prefix release for the same loss."""
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = precond(r) if precond is not None else r.copy()
    p = z.copy()
    rz = float(r @ z)
    stop = rtol * rtol * max(float(rhs @ rhs), 1e-300)
    for _ in range(iters):
        if float(r @ r) <= stop or rz <= 0.0:
            break
        ap = apply(p)
        pap = float(p @ ap)
        if pap <= 0.0:
            break
        a = rz / pap
        x += a * p
        r -= a * ap
        z = precond(r) if precond is not None else r
        new = float(r @ z)
        p = z + (new / rz) * p
        rz = new
    return x


def least_squares(loss, shape, precond) -> tuple[np.ndarray, float]:
    """(x̂, λ_max of L's Hessian): a minimiser of L over all tables (no constraints), by
    conjugate gradients preconditioned by the block's Kronecker Gram inverse."""
    hvp, g0 = _hvp(loss, shape)
    top = top_eigenvalue(hvp, g0.size, POWER_ITERS)
    ridge = LS_RIDGE * max(top, 1e-300)
    xhat = _cg(lambda x: hvp(x) + ridge * x, precond, -g0, LS_ITERS, LS_RTOL)
    return xhat, top


def _compress(W: np.ndarray) -> np.ndarray:
    """Rows R with RᵀR = WᵀW and at most as many rows as columns (the metric is all the fit
    needs of W)."""
    if W.shape[0] <= W.shape[1]:
        return W
    R: np.ndarray = np.linalg.qr(W, mode="r")  # type: ignore[assignment]  # numpy's stub: mode="r" gives R only
    return R


def solve_in_workload_metric(loss, shape, total: float, W: np.ndarray, atol: float, rtol: float,
                             precond, start: np.ndarray | None = None,
                             weight: float = WORKLOAD_WEIGHT):
    """Problem 4 in the metric M above, on the scaled simplex of the joint table.

    ``loss``: the measurement loss on the one-clique tree; ``W``: :func:`joint_workload`'s rows;
    ``precond``: the block's Kronecker Gram inverse (``polish.preconditioner``); ``start``: a
    table to begin from (the measurement-metric fit: its face is nearly this one's, which
    halves the active-set rounds on adult/ranges), else x̂.  Returns (table, history,
    certified, workload loss, x̂) with ``solve_clique``'s first three."""
    xhat, top = least_squares(loss, shape, precond)
    W = _compress(np.asarray(W, dtype=float))
    w_top = top_eigenvalue(lambda v: W.T @ (W @ v), W.shape[1], POWER_ITERS)
    kappa = weight * top / (2.0 * w_top) if w_top > 0.0 else 0.0
    wloss = WorkloadLoss(loss, W, W @ xhat, kappa, shape)
    table, history, certified = solve_clique(wloss, shape, total, atol, rtol,
                                             start=xhat if start is None else start, precond=precond)
    return table, history, certified, wloss, xhat


#: Random sign probes of the trace estimate in :func:`workload_risks` (common to every fit).
RISK_PROBES = 8
#: Conjugate-gradient iterations and relative tolerance of each probe's solve on a face.
RISK_CG_ITERS = 100
RISK_CG_RTOL = 1e-3


def _hvp(loss, shape):
    """(H·, ∇L(0)) of the quadratic loss on one table: Hx = ∇L(x) − ∇L(0)."""
    n = int(np.prod(shape))

    def grad(x):
        _, g = loss([x.reshape(shape)])
        return np.zeros(n) if g[0] is None else np.asarray(g[0], dtype=float).ravel()

    g0 = grad(np.zeros(n))
    return (lambda x: grad(x) - g0), g0


def workload_risks(loss, shape, xhat: np.ndarray, W: np.ndarray, fits, precond,
                   probes: int = RISK_PROBES, seed: int = 0) -> list[float]:
    """Stein's unbiased estimates of E‖W(μ − μ*)‖² for each of ``fits`` (pairs (table, the loss
    it minimises)), up to a constant common to all.

    x̂ ~ N(μ*, Σ) with Σ = 2H⁻¹ (H: the measurement loss's Hessian), and a fit is a projection of
    x̂, Lipschitz and locally affine: on its face (free cells, total 1ᵀx̂) its Jacobian D sends u
    to the M-nearest point of the face's directions, one conjugate-gradient solve.  Stein's lemma
    gives E‖W(μ − μ*)‖² = E‖W(μ − x̂)‖² + 2 tr(W D Σ Wᵀ) − tr(W Σ Wᵀ); the trace is estimated
    with random sign probes (Hutchinson), the same for every fit so that their difference is
    estimated more closely than either.  The probes are public randomness of a post-processing
    step: numpy's generator, seeded, is fine here (no privacy noise is drawn)."""
    h_meas, g0 = _hvp(loss, shape)
    top = top_eigenvalue(h_meas, g0.size, POWER_ITERS)
    ridge = LS_RIDGE * max(top, 1e-300)

    def cov(v):
        return 2.0 * _cg(lambda x: h_meas(x) + ridge * x, precond, v, LS_ITERS, LS_RTOL)

    rng = np.random.default_rng(seed)
    Z = rng.choice([-1.0, 1.0], size=(probes, W.shape[0]))
    U = [cov(W.T @ z) for z in Z]
    risks = []
    for table, fit_loss in fits:
        table = np.ravel(table)
        hv, _ = _hvp(fit_loss, shape)
        free = table > 0.0
        count = max(int(free.sum()), 1)
        trace = 0.0
        for z, u in zip(Z, U):
            base = np.where(free, u.sum() / count, 0.0)
            d = _pcg(hv, precond, hv(u - base), free, RISK_CG_ITERS, RISK_CG_RTOL)
            trace += float(z @ (W @ (base + d)))
        r = W @ (table - xhat)
        risks.append(float(r @ r) + 2.0 * trace / probes)
    return risks


@dataclass(frozen=True)
class MetricChoice:
    """Which fit :func:`choose_fit` kept, and why (``model.metric``; public: a function of the
    released values and the declared workload)."""

    weight: float          # WORKLOAD_WEIGHT
    rows: int              # workload rows over the joint table
    kappa: float
    risk_measurement: float   # Stein estimates of ‖W(μ − μ*)‖², up to a common constant
    risk_workload: float
    workload: bool         # True: the workload-metric fit was kept

    def describe(self) -> str:
        gain = (self.risk_measurement - self.risk_workload) / max(self.rows, 1)
        which = "the workload's metric" if self.workload else "the measurements' metric"
        return (f"in {which}: Stein's estimate of the workload's mean squared error is "
                f"{abs(gain):.3g} per row {'lower' if gain > 0 else 'higher'} in the workload's "
                f"metric ({self.rows:,} rows at weight {self.weight:g}; dpsql.pgm.workload_fit)")


def choose_fit(loss, shape, total: float, W: np.ndarray, atol: float, rtol: float, precond,
               table: np.ndarray, history):
    """The measurement-metric fit ``table`` (certified) or the workload-metric fit, whichever has
    the smaller estimate of the workload's error (:func:`workload_risks`).  Returns (table,
    history, the loss it minimises, MetricChoice or None when the workload fit did not certify)."""
    wtable, whistory, certified, wloss, xhat = solve_in_workload_metric(
        loss, shape, total, W, atol, rtol, precond, start=table)
    if not certified:
        return table, history, loss, None
    risks = workload_risks(loss, shape, xhat, wloss.W, [(table, loss), (wtable, wloss)], precond)
    keep = risks[1] < risks[0]
    choice = MetricChoice(WORKLOAD_WEIGHT, int(W.shape[0]), wloss.kappa, risks[0], risks[1], keep)
    if keep:
        return wtable, whistory, wloss, choice
    return table, history, loss, choice
