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
summary states which estimator ran and why; ``model.report`` says the same as data.  Which
solver finishes the fit is decided by the ordered finishers of :mod:`dpsql.pgm.finishers`.

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

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from dpsql.domain import Domain
from dpsql.pgm.estimation import Progress
from dpsql.pgm.exact_model import ExactModel
from dpsql.pgm.finishers import Problem, discrepancy_level, run
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.measurement import Measurement
from dpsql.pgm.relaxed_model import RelaxedModel

__all__ = ["DEFAULT_ITERS", "ExactModel", "discrepancy_level", "fit"]


#: ``fit``'s defaults are the engine's (``ModelStore._fit``; issue 36 item 1: the library
#: defaults were plain mirror descent for 1,000 iterations without a gap test, a path the engine
#: never takes): iterations up to ``Config.fit_iters``' default, the adaptive method, the gap
#: tolerance of the limits and the discrepancy stop for large exact models.
DEFAULT_ITERS = 20_000


def fit(domain: Domain, measurements: Sequence[Measurement], *, limits: FitLimits | None = None,
        capacity: int | None = None, iters: int = DEFAULT_ITERS, warm_start=None,
        callback: Callable[[Progress], bool | None] | None = None,
        method: str = "auto", exact_method: str = "adaptive", region_graph: str = "saturated",
        total: float | None = None, norm: str = "l2",
        stop: str | None | Literal["default"] = "default",
        gap: tuple[float, float] | None | Literal["limits"] = "limits", workload=None,
        **options) -> ExactModel | RelaxedModel:
    """Fit a model to ``measurements``: exact if JT-SIZE ≤ ``limits.capacity`` cells, else relaxed.

    The defaults are the engine's (:data:`DEFAULT_ITERS`): ``exact_method="adaptive"``,
    ``gap="limits"`` (``limits.gap``), ``stop="default"`` ("discrepancy" with the L2 loss, else
    None); pass ``gap=None``/``stop=None`` for a fixed number of iterations.

    The fit is the first of the finishers of :mod:`dpsql.pgm.finishers` that applies (the
    table there and in docs/architecture.md); ``model.report`` (a
    :class:`~dpsql.pgm.report.FitReport`) names it, its certificate and the refusals of the
    ones before it.  ``limits`` holds every size threshold (:class:`~dpsql.pgm.limits.FitLimits`);
    ``capacity``, when given, replaces ``limits.capacity``.

    ``method`` is "auto" (default), "exact" (raises ModelTooLargeError beyond the
    capacity), "relaxed" (Prox-PGM) or "residual" (residual reconstruction, ValueError where it
    does not apply); ``exact_method`` is the exact estimator's ``method``
    ("md", "accelerated" or "adaptive").  ``warm_start`` is a previous model: an ExactModel /
    GraphicalModel for the exact path; a RelaxedModel (θ̂ and messages reused) or any
    model (its marginals as a start) for the relaxed path.  ``stop`` is None (run
    ``iters`` iterations) or "discrepancy" (exact estimator only: stop once the loss is
    at most the number of noisy values, see the module docstring; L2 loss only), applied
    only to models of more than ``limits.discrepancy_above`` cells.  ``gap = (atol, rtol)`` ends
    either estimator once the estimated optimality gap is at most atol + rtol·loss
    (``dpsql.pgm.estimation.estimated_gap``; scale-free: the loss is in units of each
    measurement's σ); ``iters`` is then only a limit.  ``workload``: the query matrices the
    answers are scored on (over the whole domain), or a function returning them, called only
    when they are used; an exact fit solved on the joint table of
    the measured attributes then projects in their metric (``dpsql.pgm.workload_fit``), other
    fits ignore it.  Remaining ``options`` go to the finisher that takes them (``stepsize``,
    ``tol`` for the exact first-order fit; ``damping``, ``kappa``, ... for Prox-PGM): a finisher
    refuses options it does not take, and when no finisher is left a
    :class:`~dpsql.errors.ProgrammingError` names every refusal (never a TypeError).
    """
    if method not in ("auto", "exact", "relaxed", "residual"):
        raise ValueError(f"fit: method must be 'auto', 'exact', 'relaxed' or 'residual', "
                         f"got {method!r}")
    if stop == "default":
        stop = "discrepancy" if norm == "l2" else None
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
    limits = limits if limits is not None else FitLimits()
    if capacity is not None:
        limits = replace(limits, capacity=int(capacity))
    if gap == "limits":
        gap = limits.gap
    problem = Problem(domain, measurements, method, exact_method, region_graph, norm, stop, gap,
                      iters, total, warm_start, callback, workload, dict(options), limits)
    return run(problem)
