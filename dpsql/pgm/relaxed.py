"""Prox-PGM over the local polytope: relaxed estimation (NeurIPS 2021 §4, Problem 2, §6).

:func:`estimate_relaxed` solves Problem 2, min_{τ ∈ L(G)} L(τ), for a region graph G
that supports the measured cliques.  By Theorem 2, mirror descent with the entropy
Σ_r κ_r H(τ_r) as mirror map is PROX-PGM (Algorithm 1) with CONVEX-GBP as the
marginal oracle: θ ← θ − η∇L(τ), τ ← CONVEX-GBP(θ).  The loss and its gradient are
:class:`~dpsql.pgm.loss.MarginalLoss`, shared with the exact estimator (the region
graph offers the same ``host``/``cliques`` interface as a junction tree); every
measured clique is a region, so its gradient lands on its own θ_r.

Practical choices (§6):

* **Warm start, one sweep.**  The messages of CONVEX-GBP are carried from one outer
  iteration to the next and ``inner`` (default 1) sweeps are run per iteration.
  Near the optimum ∇L(τ) has a component normal to L(G) that keeps moving θ without
  changing CONVEX-GBP(θ); one (damped) sweep per step lets the messages trail that
  drift by a constant lag, which biases the iterate by O(η).  The last ``polish``
  iterations (default min(iters/10, 30)) therefore run Convex-GBP to a 1e-6 change (at
  most 10 sweeps), i.e. exact prox steps, which remove the lag.  Finally θ̂ is run to
  convergence so that the returned τ̂ = CONVEX-GBP(θ̂) lies in L(G) to ``gbp_tol``.
* **Step size without a line search.**  One warm-started sweep is not a descent
  direction, so no line search is possible; the step is set from the geometry
  instead.  With κ = 1 the Bregman divergence is D(τ', τ) = Σ_r KL(τ'_r‖τ_r) (counts),
  and D ≥ Σ_cells (τ' − τ)²/(2 max(τ, τ')).  The L2 loss has curvature
  K_r = Σ_{i on r} 2λ_max(Q_iᵀQ_i)/σ_i² on region r, so L is smooth *relative to the
  entropy* with constant max_r K_r·max_x τ_r(x) (Lu, Freund & Nesterov 2018), and
  mirror descent is safe with η_t = 1/max_r(K_r · max_x τ_r(x)).  This is recomputed
  from the current τ every iteration: it follows the largest cell rather than the
  total N (the Pinsker bound 1/(K N) is smaller by the ratio of N to the largest
  cell, i.e. far too timid for marginals with many cells), and it depends on the
  largest per-region curvature, not on the number of measurements, which keeps it
  useful at 10⁴ cliques.  ``step_scale`` (default 1) multiplies it; a float
  ``stepsize`` fixes a constant step instead.  Optionally
(``patience`` > 0) the step is halved when the loss stays more than 0.1% above its
  running best for that many iterations; it is off by default because the loss of a
  warm-started, not yet consistent iterate can dip below the optimum and then rise
  as the messages catch up, which such a guard mistakes for divergence.
* **Counting numbers** (``kappa="auto"``).  Theorem 2: any positive κ gives the same
  solution, but κ sets the geometry of the mirror map Σ_r κ_r H(τ_r), hence the speed.
  The bound above is dominated by the region with the largest K_r·max τ_r; a
  region with a sparse, fine-grained table then moves hundreds of times slower than it
  could.  ``auto_kappa`` sets κ_r ∝ K_r·m̂_r (m̂_r an estimate of the largest cell from
  the noisy measurement itself) so every measured region gets the same relative
  step; the step becomes η_t = 1/max_r(K_r · max τ_r / κ_r).  ``kappa=1`` gives the
  paper's choice.
* **Damping** of the messages, 0.5 by default (§6: it stabilises dense graphs; on
  the accuracy benchmark 0 and 0.5 give the same errors to 3 digits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dpsql.domain import Domain
from dpsql.pgm.convex_gbp import ConvexGBP
from dpsql.pgm.progress import Progress, estimated_gap
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.loss import MarginalLoss
from dpsql.pgm.measurement import Measurement, lambda_max, resolve_total
from dpsql.pgm.region_graph import RegionGraph

__all__ = ["RelaxedFit", "auto_kappa", "estimate_relaxed", "region_curvatures"]

# A loss more than this fraction above its running best counts as a rise; smaller
# wobbles are the round-off of a converged iterate and must not shrink the step.
_RISE = 1e-3
# With the exact last step, the first-order fit hands over after
# FitLimits.relaxed_exact_after iterations (the active-set method needs only a start inside
# the polytope).
# Polishing iterations run Convex-GBP to this change (log units), at most this many sweeps.
_POLISH_TOL = 1e-6
_POLISH_SWEEPS = 10


class RelaxedFit:
    """Everything :func:`estimate_relaxed` produced: the graph, θ̂, τ̂ (probabilities per
    region), the total, the messages, the loss history and the step used."""

    __slots__ = ("graph", "theta", "probs", "total", "messages", "loss", "stepsize",
                 "violation", "iterations", "kappa", "damping", "polished", "refused", "method")

    def __init__(self, graph, theta, probs, total, messages, loss, stepsize, violation,
                 iterations, kappa, damping, polished=None, refused=None,
                 method: str = "prox-pgm") -> None:
        self.graph, self.theta, self.probs, self.total = graph, theta, probs, total
        self.messages, self.loss, self.stepsize = messages, loss, stepsize
        self.violation, self.iterations, self.kappa, self.damping = violation, iterations, kappa, damping
        # (loss before, loss after, active-set rounds, KKT certified) of the exact last
        # step (dpsql.pgm.relaxed_polish), or None
        self.polished = polished
        self.refused = refused   # why the exact step was not taken, when it was tried
        # "prox-pgm" (this module) or "residual" (dpsql.pgm.residual_fit: no θ̂ or messages
        # of Convex-GBP, only the tables; θ holds their logarithms as a warm start)
        self.method = method


def _check(domain: Domain, measurements: Sequence[Measurement]) -> None:
    if not measurements:
        raise ValueError("estimate_relaxed: at least one measurement is needed")
    for m in measurements:
        for a in m.clique:
            if a not in domain:
                raise ValueError(f"measurement clique {m.clique} names {a!r}, not in the domain")
        if int(m.query.shape[1]) != domain.size(m.clique):
            raise ValueError(f"measurement on {m.clique}: query has {m.query.shape[1]} columns, "
                             f"the marginal has {domain.size(m.clique)} cells")


class _Curvature:
    """One measured clique c on host region h: K_c = Σ_{i on c} 2λ_max(Q_iᵀQ_i)/σ_i², the
    axes of h summed to reach c, and m̂_c, the largest measured cell (or N)."""

    __slots__ = ("host", "axes", "k", "peak")

    def __init__(self, host: int, axes: tuple[int, ...], k: float, peak: float) -> None:
        self.host, self.axes, self.k, self.peak = host, axes, k, peak


def region_curvatures(graph: RegionGraph, measurements: Sequence[Measurement], total: float,
                      norm: str = "l2") -> list[_Curvature]:
    """Per measured clique: the curvature K_c of the loss (see the module docstring).

    For the non-smooth L1 loss the analogous scale Σ ‖Q_i‖₂/σ_i is used, which has the
    units of a gradient per record and so sets the same kind of step.
    """
    from dpsql.pgm.measurement import identity_scale

    per: dict[tuple[str, ...], _Curvature] = {}
    for m in measurements:
        canon = graph.canonical(m.clique)
        h = graph.host(canon)
        lam = lambda_max(m.query)
        k = 2.0 * lam / m.stddev ** 2 if norm == "l2" else np.sqrt(lam) / m.stddev
        s = identity_scale(m.query)
        est = float(np.max(m.values)) / s if s is not None and s > 0 else total
        peak = min(max(est, total / max(graph.region_size(canon), 1)), total)
        c = per.get(canon)
        if c is None:
            region = graph.regions[h]
            axes = tuple(i for i, a in enumerate(region) if a not in canon)
            per[canon] = _Curvature(h, axes, k, peak)
        else:
            c.k += k
            c.peak = max(c.peak, peak)
    return list(per.values())


def _relative_step(curv: list[_Curvature], tau: Sequence[np.ndarray], kappa: np.ndarray) -> float:
    """1 / max_r (Σ_{c on r} K_c · max P_{r→c}τ_r / κ_r): the relative-smoothness step.

    ‖P_{r→c}δ‖₂² ≤ max(P_{r→c}τ_r)·2KL_r(τ'‖τ) to second order, so each measured clique
    contributes its curvature times its own largest cell to its host region's bound.
    """
    worst: dict[int, float] = {}
    for c in curv:
        t = tau[c.host]
        top = float((t.sum(axis=c.axes) if c.axes else t).max())
        worst[c.host] = worst.get(c.host, 0.0) + c.k * top
    return 1.0 / max(max(w / kappa[h] for h, w in worst.items()), 1e-300)


def auto_kappa(graph: RegionGraph, curv: list[_Curvature]) -> np.ndarray:
    """Counting numbers κ_r = Σ_{c on r} K_c · m̂_c that equalise the step across regions.

    m̂_c estimates the largest cell of τ_c: the largest measured value when the query
    is a scaled identity (the noisy marginal itself), else N.  Regions without
    measurements take the largest κ among their parents (they carry no gradient; a
    larger κ only makes their beliefs smoother), or 1 (the scale of the largest).
    """
    n = len(graph.regions)
    kappa = np.zeros(n)
    for c in curv:
        kappa[c.host] += c.k * c.peak
    top = float(kappa.max()) if kappa.max() > 0 else 1.0
    kappa /= top  # only ratios matter (a common factor is absorbed by the step)
    for i in sorted(range(n), key=lambda i: -len(graph.regions[i])):
        if kappa[i] <= 0:
            parents = [kappa[graph.edges[e][0]] for e in graph.parents[i]]
            kappa[i] = max(parents) if parents else 1.0
    return kappa


def _initial(graph: RegionGraph, oracle: ConvexGBP, warm_start) -> tuple[list[np.ndarray], list | None]:
    theta = [np.zeros(s) for s in oracle.shapes]
    if warm_start is None:
        return theta, None
    old_graph = getattr(warm_start, "graph", None)
    old_theta = getattr(warm_start, "theta", None)
    if isinstance(old_graph, RegionGraph) and old_theta is not None:
        # θ of a previous relaxed fit: regions that still exist keep their potentials;
        # the messages are reused only when the structure is unchanged.
        for r, th in zip(old_graph.regions, old_theta):
            i = graph.index.get(r)
            if i is not None:
                theta[i] = np.array(th, dtype=float)
        same = old_graph.regions == graph.regions and old_graph.edges == graph.edges
        return theta, (list(warm_start.messages) if same and len(warm_start.messages) else None)
    # Any other model: start from its marginals on the maximal regions, the
    # Convex-GBP parameters that reproduce them when those regions do not overlap.
    for i, r in enumerate(graph.regions):
        if not graph.parents[i]:
            mu = warm_start.marginal(r).values
            theta[i] = np.log(np.maximum(mu / max(mu.sum(), 1e-300), np.finfo(float).tiny))
    return theta, None


def estimate_relaxed(domain: Domain, measurements: Sequence[Measurement], *,
                     region_graph: str | RegionGraph = "saturated", region_capacity: int | None = None,
                     iters: int = 1000,
                     stepsize: float | None = None, step_scale: float = 1.0,
                     inner: int = 1, damping: float = 0.5, kappa: float | str = "auto",
                     warm_start=None, total: float | None = None, norm: str = "l2",
                     tol: float = 0.0, patience: int = 0, gbp_tol: float = 1e-9,
                     final_sweeps: int = 2000, polish: int | None = None,
                     callback: Callable[[Progress], bool | None] | None = None,
                     gap: tuple[float, float] | None = None,
                     exact_after: int | None = FitLimits().relaxed_exact_after,
                     exact_memory: int | None = None, limits: FitLimits | None = None) -> RelaxedFit:
    """Solve Problem 2 by Prox-PGM with warm-started CONVEX-GBP (see the module docstring).

    ``region_graph`` is "saturated" (default), "capped" (needs ``region_capacity``
    cells), "factor" or a prebuilt :class:`RegionGraph` that supports every measured
    clique.  ``tol`` stops early once the relative loss
    decrease over 10 iterations stays below it; ``gap = (atol, rtol)`` once the estimated
    optimality gap (``dpsql.pgm.estimation.estimated_gap``) is at most atol + rtol·loss, after
    ``polish`` more exact-prox iterations.  With ``gap`` and the L2 loss the fit ends with
    Problem 2 solved exactly (:mod:`dpsql.pgm.relaxed_polish`) where the graph is small
    enough: first after ``exact_after`` iterations (None: only at the end), and if that step
    is refused, the first-order fit goes on to its stop and the step is tried again (unless
    it was refused for its size).  ``exact_memory`` caps the step's memory in bytes (default
    ``limits.relaxed_step_memory_fraction`` of the machine's; ``limits``: the step's size
    limits, :class:`~dpsql.pgm.limits.FitLimits`).  Returns a :class:`RelaxedFit`.
    """
    limits = limits if limits is not None else FitLimits()
    measurements = list(measurements)
    _check(domain, measurements)
    if norm not in ("l1", "l2"):
        raise ValueError(f"estimate_relaxed: norm must be 'l1' or 'l2', got {norm!r}")
    sizes = dict(zip(domain.attributes, domain.shape))
    cliques = [m.clique for m in measurements]
    if isinstance(region_graph, RegionGraph):
        graph = region_graph
        for c in cliques:
            if not graph.supports(c):
                raise ValueError(f"estimate_relaxed: the region graph does not support {c}")
    else:
        graph = RegionGraph.build(region_graph, domain.attributes, sizes, cliques, region_capacity)
    total = resolve_total(measurements, total, warm_start, "estimate_relaxed")
    curv = region_curvatures(graph, measurements, total, norm)
    if isinstance(kappa, str):
        if kappa != "auto":
            raise ValueError(f"estimate_relaxed: kappa must be 'auto' or positive numbers, got {kappa!r}")
        given: float | np.ndarray = auto_kappa(graph, curv)
    else:
        given = kappa
    kappas = np.broadcast_to(np.asarray(given, dtype=float), (len(graph.regions),)).copy()
    oracle = ConvexGBP(graph, kappas, damping)
    loss = MarginalLoss(graph, measurements, norm)
    theta, messages = _initial(graph, oracle, warm_start)
    if polish is None:
        polish = min(iters // 10, 30)
    psi, lam = oracle.start(theta, messages)
    oracle.advance(psi, lam, max(inner, 1))
    tau = oracle.beliefs(psi, total)
    value, grad = loss(tau)
    hosts = [h for h, g in enumerate(grad) if g is not None]
    adaptive = stepsize is None
    scale = float(step_scale)
    eta = _relative_step(curv, tau, kappas) * scale if stepsize is None else float(stepsize)
    history = [value]
    best, worse = value, 0
    it = 0
    stop_at = None   # set when the gap test passes: the polishing iterations, then stop
    exact = gap is not None and norm == "l2"
    early = None     # (tables, polished, messages) of an exact step taken before the stop
    refused = None
    for it in range(1, iters + 1):
        if adaptive:
            eta = _relative_step(curv, tau, kappas) * scale
        for h in hosts:
            gh = grad[h]
            assert gh is not None          # the loss has a gradient on the same hosts each time
            step = eta * gh
            theta[h] -= step
            oracle.shift(psi, h, -step)
        if it > iters - polish or stop_at is not None:
            oracle.advance(psi, lam, _POLISH_SWEEPS, _POLISH_TOL)
        else:
            oracle.advance(psi, lam, inner)
        tau = oracle.beliefs(psi, total)
        value, grad = loss(tau)
        history.append(value)
        if not patience or value <= best * (1.0 + _RISE):
            best, worse = min(best, value), 0
        else:
            worse += 1
            if worse >= patience:
                scale *= 0.5
                eta *= 0.5
                worse = 0
        if callback is not None and callback(Progress(it, value, eta)):
            break
        if tol > 0 and len(history) > 10:
            old = history[-11]
            if old - value <= tol * max(abs(value), 1e-300) * 10:
                break
        if stop_at is None and gap is not None and estimated_gap(history) <= gap[0] + gap[1] * abs(value):
            stop_at = it + polish
        if stop_at is not None and it >= stop_at:
            break
        if exact and it == exact_after and it < iters:
            final = oracle.run(theta, total, lam, sweeps=final_sweeps, tol=gbp_tol)
            tables, polished = _exact_step(graph, measurements, final.marginals, total, exact_memory, limits)
            if not isinstance(polished, str):
                early = (tables, polished, final.messages)
                break
            refused = f"after {it} iterations: {polished}"
            if isinstance(polished, _Refusal) and polished.too_large:
                exact = False   # its size does not change: the first-order fit goes on alone
    if early is not None:
        tables, polished, messages = early
        history.append(polished[0])
    else:
        final = oracle.run(theta, total, lam, sweeps=final_sweeps, tol=gbp_tol)
        tables, messages = final.marginals, final.messages
        history.append(loss.value(tables))
        polished = None
        if exact:
            tables, polished = _exact_step(graph, measurements, tables, total, exact_memory, limits)
            if isinstance(polished, str):
                refused = "; ".join(x for x in (refused, f"at the end: {polished}") if x)
                polished = None
    if polished is not None:
        history.append(polished[1])
        refused = None
    probs = [t / total for t in tables]
    return RelaxedFit(graph, theta, probs, total, messages, history, eta,
                      oracle.violation(probs), it, kappas, damping, polished, refused)


class _Refusal(str):
    """Why the exact step was not taken; ``too_large``: for the problem's size, which the
    first-order iterations do not change (so it is not tried again)."""
    too_large = False


def _refusal(text: str, too_large: bool) -> _Refusal:
    out = _Refusal(text)
    out.too_large = too_large
    return out


def _exact_step(graph, measurements, tables, total, max_bytes, limits: FitLimits):
    """Problem 2 solved exactly from the first-order fit (:mod:`dpsql.pgm.relaxed_polish`):
    (tables, (loss before, loss after, rounds, certified)), or the fit's own tables and why
    the step was refused (a :class:`_Refusal`)."""
    from dpsql.pgm.relaxed_polish import TooLarge, active_set_step, loss_matrix  # scipy: fitting only

    built = loss_matrix(graph, measurements, limits.relaxed_step_max_nnz, limits.relaxed_step_dense_entries)
    if built is None:
        return tables, _refusal("a query is too large to write as a sparse matrix, or the Hessian "
                                f"would have more than {limits.relaxed_step_max_nnz:,} non-zeros", True)
    P, w, y = built
    step = active_set_step(graph, P, w, y, tables, total, max_bytes=max_bytes,
                           fraction=limits.relaxed_step_memory_fraction)
    if isinstance(step, str):
        return tables, _refusal(step, isinstance(step, TooLarge))
    new, rounds, optimal = step

    def value(t):
        r = P @ np.concatenate([np.ravel(x) for x in t]) - y
        return float(w @ (r * r))
    return new, (value(tables), value(new), rounds, optimal)
