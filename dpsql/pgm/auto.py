"""Choosing between exact and relaxed estimation (NeurIPS 2021 §4–§6).

:func:`fit` is the one entry point the engine needs: it fits the exact Private-PGM
model (:func:`dpsql.pgm.estimate`, thesis Algorithm 2) when the junction tree of the
measured cliques fits ``capacity`` cells (JT-SIZE, thesis Remark 1, computed from
public metadata before any work), and the relaxed model of the local polytope
(:func:`dpsql.pgm.relaxed.estimate_relaxed` with a saturated region graph) otherwise.
Exact is preferred whenever it fits: its marginals are globally consistent and its
out-of-model answers use global information (App. B.5), while the relaxed model's
size grows only linearly with the number of cliques (Figure 2c).

Both results answer the same calls; :class:`ExactModel` adds ``summary()`` to a
:class:`~dpsql.pgm.model.GraphicalModel` (every other attribute is the wrapped
model's), and :class:`~dpsql.pgm.relaxed_model.RelaxedModel` has its own.  The
summary states which estimator ran and why.

``stop="discrepancy"`` ends the exact estimator at the first iteration whose loss is
at most the number of noisy values m = Σ_i rows(Q_i), the expected loss of the true
data (Morozov's discrepancy principle; the measurements' ``stddev`` must be the
noise's standard deviation).  When the tables have many more cells than the noise can
resolve, the minimiser of the loss fits the noise, and the exact iterates — maximum-
entropy joint distributions — pass through a better estimate on the way.  The relaxed
estimator's iterates do not (at loss m they are worse than its optimum on adult), so
there the stop is not applied and the summary says so (docs/relaxed.md,
"Regularisation by early stopping").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from dpsql.domain import Domain
from dpsql.pgm.estimation import DEFAULT_CAPACITY, Progress, estimate, estimated_gap
from dpsql.pgm.junction_tree import model_size
from dpsql.pgm.measurement import Measurement
from dpsql.pgm.model import GraphicalModel
from dpsql.pgm.relaxed import RelaxedFit, estimate_relaxed
from dpsql.pgm.relaxed_model import RelaxedModel
from dpsql.pgm.residual_fit import ResidualForm, estimate_residual, residual_form

__all__ = ["ExactModel", "discrepancy_level", "fit"]


class ExactModel:
    """A fitted :class:`GraphicalModel` plus the reason it was chosen (``summary()``)."""

    def __init__(self, model: GraphicalModel, reason: str, seconds: float | None = None,
                 stopped: str | None = None) -> None:
        self.model = model
        self.reason = reason
        self.seconds = seconds
        self.stopped = stopped

    # The GraphicalModel interface, stated explicitly so that it is documented here.
    @property
    def domain(self) -> Domain:
        return self.model.domain

    @property
    def cliques(self):
        return self.model.cliques

    @property
    def total(self) -> float:
        return self.model.total

    def marginal(self, attrs):
        return self.model.marginal(attrs)

    def marginals_many(self, cliques):
        return self.model.marginals_many(cliques)

    def answer(self, query):
        return self.model.answer(query)

    def answer_many(self, queries):
        return self.model.answer_many(queries)

    def supports(self, attrs) -> bool:
        return self.model.supports(attrs)

    def synthetic(self, *args, **kwargs):
        return self.model.synthetic(*args, **kwargs)

    def __getattr__(self, name):
        # Everything else (tree, theta, loss, potentials, ...) is the wrapped model's.
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def summary(self) -> str:
        m = self.model
        lines = [
            "exact model (Private-PGM: mirror descent over the marginal polytope, thesis §4.3)",
            f"why: {self.reason}",
            f"structure: junction tree with {len(m.tree.cliques)} maximal cliques, "
            f"{m.tree.size:,} cells, largest clique "
            f"{max(m.tree.clique_size(c) for c in m.tree.cliques):,} cells",
            f"measured cliques: {len(set(m.measured))}; total N = {m.total:,.6g}",
        ]
        if m.loss:
            lines.append(f"loss: {m.loss[0]:.6g} → {m.loss[-1]:.6g} over {len(m.loss) - 1} iterations")
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        if self.seconds is not None:
            lines.append(f"fitted in {self.seconds:.2f} s")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ExactModel({self.model!r})"


def _cliques(measurements: Iterable[Measurement]) -> list[tuple[str, ...]]:
    return [tuple(m.clique) for m in measurements]


def discrepancy_level(measurements: Iterable[Measurement]) -> int:
    """m = Σ_i rows(Q_i): E‖Q_i μ* − y_i‖²/σ_i² summed, the L2 loss the true data has."""
    return int(sum(np.asarray(m.values).size for m in measurements))


class _Stopper:
    """Wraps the caller's callback; ends the fit once the loss reaches ``level``."""

    def __init__(self, level: float | None, callback) -> None:
        self.level, self.callback = level, callback
        self.iteration: int | None = None
        self.loss: float | None = None

    def __call__(self, progress: Progress) -> bool:
        stop = bool(self.callback(progress)) if self.callback is not None else False
        if self.level is not None and progress.loss <= self.level:
            self.iteration, self.loss = progress.iteration, progress.loss
            return True
        return stop

    def note(self) -> str | None:
        if self.level is None:
            return None
        if self.iteration is None:
            return (f"the loss stayed above the discrepancy level m = {self.level:,.0f} "
                    f"for every iteration (stop='discrepancy' did not trigger)")
        return (f"discrepancy principle: iteration {self.iteration}, loss {self.loss:,.6g} ≤ "
                f"m = {self.level:,.0f} noisy values")


#: The relaxed estimator's relative gap tolerance floor (see ``fit``).
RELAXED_RTOL = 1e-3


def _gap_note(history, iters: int, gap) -> str | None:
    """How the fit ended, for ``summary()``: converged (estimated gap within the tolerance)
    or stopped at the iteration limit, with the estimated gap either way."""
    if gap is None or not history:
        return None
    est = estimated_gap(history)
    done = len(history) - 1
    bound = gap[0] + gap[1] * abs(history[-1])
    if est <= bound and done < iters:
        return (f"converged: estimated optimality gap {est:.3g} ≤ {bound:.3g} (in units of the "
                f"noise) after {done:,} iterations")
    return f"iteration limit {iters:,} reached; estimated optimality gap {est:.3g} (tolerance {bound:.3g})"


def fit(domain: Domain, measurements: Sequence[Measurement], *, capacity: int = DEFAULT_CAPACITY,
        iters: int = 1000, warm_start=None, callback: Callable[[Progress], bool | None] | None = None,
        method: str = "auto", exact_method: str = "md", region_graph: str = "saturated",
        total: float | None = None, norm: str = "l2", stop: str | None = None,
        stop_above: int = 0, gap: tuple[float, float] | None = None,
        workload=None, **options) -> ExactModel | RelaxedModel:
    """Fit a model to ``measurements``: exact if JT-SIZE ≤ ``capacity`` cells, else relaxed.

    ``method`` is "auto" (default), "exact" (raises ModelTooLargeError beyond
    ``capacity``) or "relaxed"; ``exact_method`` is the exact estimator's ``method``
    ("md", "accelerated" or "adaptive").  ``warm_start`` is a previous model: an ExactModel /
    GraphicalModel for the exact path; a RelaxedModel (θ̂ and messages reused) or any
    model (its marginals as a start) for the relaxed path.  ``stop`` is None (run
    ``iters`` iterations) or "discrepancy" (exact estimator only: stop once the loss is
    at most the number of noisy values, see the module docstring; L2 loss only), applied
    only to models of more than ``stop_above`` cells (the size is known here, after
    triangulation, so callers need not triangulate twice).  ``gap = (atol, rtol)`` ends
    either estimator once the estimated optimality gap is at most atol + rtol·loss
    (``dpsql.pgm.estimation.estimated_gap``; scale-free: the loss is in units of each
    measurement's σ); ``iters`` is then only a limit.  ``workload``: the query matrices the
    answers are scored on (over the whole domain), or a function returning them, called only
    when they are used; an exact fit solved on the joint table of
    the measured attributes then projects in their metric (``dpsql.pgm.workload_fit``), other
    fits ignore it.  Remaining ``options``
    go to the chosen estimator (e.g. ``stepsize``, ``damping`` for the relaxed one).
    """
    if method not in ("auto", "exact", "relaxed", "residual"):
        raise ValueError(f"fit: method must be 'auto', 'exact', 'relaxed' or 'residual', "
                         f"got {method!r}")
    if stop not in (None, "discrepancy"):
        raise ValueError(f"fit: stop must be None or 'discrepancy', got {stop!r}")
    if stop is not None and norm != "l2":
        raise ValueError("fit: stop='discrepancy' needs the L2 loss (Gaussian noise)")
    measurements = list(measurements)
    if not measurements:
        raise ValueError("fit: at least one measurement is needed")
    for m in measurements:
        for a in m.clique:
            if a not in domain:
                raise ValueError(f"measurement clique {m.clique} names {a!r}, not in the domain")
    cliques = _cliques(measurements)
    if method in ("relaxed", "residual"):
        reason = f"the relaxed estimator was requested (method={method!r})"
        use_exact = False
    else:
        size = model_size(domain, cliques)
        use_exact = method == "exact" or size <= capacity
        if method == "exact":
            reason = f"the exact estimator was requested (junction tree {size:,} cells)"
        elif use_exact:
            reason = (f"the junction tree of the measured cliques has {size:,} cells, "
                      f"within the capacity of {capacity:,}")
        else:
            reason = (f"the junction tree of the measured cliques would need {size:,} cells, "
                      f"over the capacity of {capacity:,}; the saturated region graph "
                      f"relaxes global to local consistency")
    start = time.perf_counter()
    if use_exact:
        if size <= stop_above:
            stop = None
        stopper = _Stopper(discrepancy_level(measurements) if stop else None, callback)
        callback = stopper if stop else callback
        ws = warm_start.model if isinstance(warm_start, ExactModel) else warm_start
        if not isinstance(ws, GraphicalModel):
            ws = None
        model = estimate(domain, measurements, iters=iters, method=exact_method, warm_start=ws,
                         callback=callback, capacity=capacity, total=total, norm=norm,
                         gap=None if stop else gap,
                         start="least_squares" if gap is not None and not stop else "maxent",
                         workload=workload, **options)
        solved = model.solved
        note: str | None
        if solved is not None and solved[2] == "dual":
            note = (f"solved on the joint table of the measured attributes by {solved[0]} Newton "
                    f"steps along the entropic path; optimality gap ≤ {solved[1]:.3g} (duality "
                    f"certificate, in units of the noise; dpsql.pgm.joint_dual)")
        elif solved is not None:
            note = (f"solved on the joint table of the measured attributes by {solved[0]} active-set "
                    f"Newton rounds; optimality gap ≤ {solved[1]:.3g} (Frank–Wolfe certificate, in "
                    f"units of the noise; dpsql.pgm.polish.solve_clique)")
            metric = model.metric
            note += "; in the measurements' metric" if metric is None else f"; {metric.describe()}"
        else:
            note = stopper.note() or _gap_note(model.loss, iters, gap)
        polished = model.polished
        if polished is not None:
            face = (f"solved exactly on its face of the polytope (loss {polished[0]:.6g} → "
                    f"{polished[1]:.6g}, dpsql.pgm.polish)")
            note = f"{note}; then {face}" if note else face
        return ExactModel(model, reason, time.perf_counter() - start, note)
    if norm == "l2" and method in ("auto", "residual") and region_graph == "saturated":
        form = residual_form(domain, measurements)
        if isinstance(form, ResidualForm):
            return _fit_residual(domain, form, cliques, reason, gap, iters, callback, start, total)
        if method == "residual":
            raise ValueError(f"fit: method='residual' does not apply: {form}")
        reason = f"{reason} (no residual reconstruction: {form})"
    ws = warm_start.fit if isinstance(warm_start, RelaxedModel) else warm_start
    if isinstance(ws, ExactModel):
        ws = ws.model
    if gap is not None:
        # The relaxed problem is itself an approximation (locally consistent pseudo-marginals,
        # inner GBP sweeps) and its first-order method converges as O(1/t): at 0.5 absolute a
        # 55-marginal adult fit at ε = 1 ran 11,300 iterations (95 s; 1,000 had been the
        # default).  Its tolerance is relative, 0.1% of the loss.  Where the region graph is
        # small enough the fit ends with the exact step instead (dpsql.pgm.relaxed_polish),
        # and this tolerance only matters when that step is refused.
        gap = (gap[0], max(gap[1], RELAXED_RTOL))
    result = estimate_relaxed(domain, measurements, region_graph=region_graph, iters=iters,
                              warm_start=ws, callback=callback, total=total, norm=norm, gap=gap,
                              **options)
    polished = result.polished
    if polished is None:
        note = _gap_note(result.loss[:-1], iters, gap)
        if result.refused:
            note = f"{note}; the exact step was refused ({result.refused})"
    else:
        # loss = [first-order history..., after the final Convex-GBP run, after the exact step]
        note = (f"{result.iterations:,} first-order iterations, then Problem 2 solved exactly by "
                f"an active-set method (loss {polished[0]:.6g} → {polished[1]:.6g}, "
                f"{polished[2]} rounds, "
                + ("optimality certified by its KKT conditions" if polished[3] else
                   "feasible, not certified: some cells were held at 0")
                + "; dpsql.pgm.relaxed_polish)")
    if stop is not None:
        note = ("stop='discrepancy' was not applied: the relaxed estimator's iterates regularise "
                "poorly (docs/relaxed.md)" + (f"; {note}" if note else ""))
    return RelaxedModel(domain, result, measured=cliques, reason=reason,
                        seconds=time.perf_counter() - start, stopped=note)


def _fit_residual(domain: Domain, form: ResidualForm, cliques, reason: str, gap, iters: int,
                  callback, start: float, total: float | None) -> RelaxedModel:
    """Problem 2 over the saturated region graph solved by residual reconstruction
    (``dpsql.pgm.residual_fit``): the same optimum as the Prox-PGM path, found in closed form
    plus a dual L-BFGS-B; the result is a :class:`RelaxedModel` with the same tables."""
    tol = gap if gap is not None else (0.5, 1e-6)

    def progress(evals: int, loss: float, certified: float) -> bool:
        return bool(callback(Progress(evals, loss, certified))) if callback is not None else False

    res = estimate_residual(form, gap=tol, iters=iters, total=total, callback=progress)
    graph = res.graph
    tiny = np.finfo(float).tiny
    theta = [np.log(np.maximum(p, tiny)) if not graph.parents[i] else np.zeros(p.shape)
             for i, p in enumerate(res.probs)]
    fitted = RelaxedFit(graph, theta, res.probs, res.total, [], res.loss, 0.0, 0.0,
                        res.iterations, np.ones(len(graph.regions)), 0.0, method="residual")
    bound = tol[0] + tol[1] * res.loss[-1]
    note = (f"{'certified' if res.gap <= bound else 'evaluation limit reached'}: optimality gap "
            f"≤ {res.gap:.3g} (Lagrange dual, in units of the noise; tolerance {bound:.3g}) after "
            f"{res.iterations:,} dual evaluations; least-squares tables shrunk toward uniform by "
            f"{res.shrink:.2g} to be non-negative")
    why = (f"{reason}; every measurement is a Kronecker product whose factors share an "
           f"eigenbasis with the attribute's total, so Problem 2 is solved by residual "
           f"reconstruction (dpsql.pgm.residual_fit)")
    return RelaxedModel(domain, fitted, measured=cliques, reason=why,
                        seconds=time.perf_counter() - start, stopped=note)
