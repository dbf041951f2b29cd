"""The fit as an ordered list of finishers (issue 36 item 1; mbi's estimator protocol).

A :class:`Problem` is the measurements, the caller's choices and the :class:`FitLimits`.
Each :class:`Finisher` says whether it applies (:meth:`~Finisher.applies`: an
:class:`Accepted` or a :class:`~dpsql.pgm.report.Refusal` with its reason, from public sizes
only) and solves; :func:`run` takes the first that applies and solves, collecting the
refusals of those before it (a solve may give up too, e.g. when it cannot certify the optimum
within its budget: that is a refusal as well, and the next finisher runs).  The order:

============  =============================================================  ======================
finisher      applies when                                                   certificate
============  =============================================================  ======================
dense-block   exact model (JT-SIZE ≤ capacity), gap tolerance given, L2, no  Frank–Wolfe gap
              discrepancy stop, joint table of the measured attributes ≤
              ``dense_block_max_cells`` and one Kronecker block covers it
joint-dual    as dense-block but no covering block, and the face step would  duality gap
              be refused for its size; joint table ≤ ``joint_dual_max_cells``
first-order   exact model (then the face step when the tree and its Hessian  estimated gap or
              are within ``face_step_max_*``)                                discrepancy stop
residual      relaxed model (not ``method="relaxed"``), L2, saturated region  Lagrange dual gap
              graph, no Prox-PGM options, every query a Kronecker product
              sharing the attribute's eigenbasis (attributes ≤
              ``residual_max_attribute_cells``)
prox-pgm      relaxed model (then the exact step when its Hessian and memory KKT conditions or
              are within ``relaxed_step_*``)                                 estimated gap
============  =============================================================  ======================

(docs/architecture.md has the same table.)  The numbers each finisher computes are those of
the solvers it calls (:mod:`dpsql.pgm.estimation`, :mod:`dpsql.pgm.joint_dual`,
:mod:`dpsql.pgm.residual_fit`, :mod:`dpsql.pgm.relaxed`); this module only decides and
reports.  :func:`fit_key` names the fit for saved models: the finishers' names and versions
and every limit, so a saved model is never loaded after either changed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dpsql.domain import Domain
from dpsql.pgm import estimation as est
from dpsql.pgm.exact_model import ExactModel
from dpsql.pgm.junction_tree import model_size
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.measurement import Measurement
from dpsql.pgm.model import GraphicalModel
from dpsql.pgm.relaxed import RelaxedFit, estimate_relaxed
from dpsql.pgm.relaxed_model import RelaxedModel
from dpsql.pgm.report import Certificate, FitReport, Refusal
from dpsql.pgm.residual_fit import ResidualForm, estimate_residual, residual_form

__all__ = ["Accepted", "FINISHERS", "Finisher", "FittedModel", "Problem", "discrepancy_level", "fit_key",
           "run"]


@dataclass(frozen=True)
class Accepted:
    """A finisher's answer when it applies."""


ACCEPTED = Accepted()


def discrepancy_level(measurements: Sequence[Measurement]) -> int:
    """m = Σ_i rows(Q_i): E‖Q_i μ* − y_i‖²/σ_i² summed, the L2 loss the true data has."""
    return int(sum(np.asarray(m.values).size for m in measurements))


@dataclass
class Problem:
    """One fit's inputs (see :func:`dpsql.pgm.auto.fit` for each) and the facts the
    finishers share, each computed once on first use (tree size, junction tree, joint table,
    residual form)."""

    domain: Domain
    measurements: list[Measurement]
    method: str
    exact_method: str
    region_graph: str
    norm: str
    stop: str | None
    gap: tuple[float, float] | None
    iters: int
    total: float | None
    warm_start: Any
    callback: Callable | None
    workload: Any
    options: dict[str, Any]
    limits: FitLimits
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def _cached(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return [tuple(m.clique) for m in self.measurements]

    @property
    def size(self) -> int:
        """JT-SIZE of the measured cliques, in cells (thesis Remark 1)."""
        return self._cached("size", lambda: model_size(self.domain, self.cliques))

    @property
    def exact(self) -> bool:
        """Whether the exact model is fitted: requested, or "auto" within the capacity."""
        if self.method in ("relaxed", "residual"):
            return False
        return self.method == "exact" or self.size <= self.limits.capacity

    @property
    def reason(self) -> str:
        """Why this kind of model (the summary's "why")."""
        if self.method in ("relaxed", "residual"):
            return f"the relaxed estimator was requested (method={self.method!r})"
        if self.method == "exact":
            return f"the exact estimator was requested (junction tree {self.size:,} cells)"
        if self.exact:
            return (f"the junction tree of the measured cliques has {self.size:,} cells, "
                    f"within the capacity of {self.limits.capacity:,}")
        return (f"the junction tree of the measured cliques would need {self.size:,} cells, "
                f"over the capacity of {self.limits.capacity:,}; the saturated region graph "
                f"relaxes global to local consistency")

    @property
    def discrepancy(self) -> bool:
        """Whether the exact fit stops at the discrepancy principle (large models only)."""
        return self.stop is not None and self.size > self.limits.discrepancy_above

    def exact_warm_start(self) -> GraphicalModel | None:
        ws = self.warm_start.model if isinstance(self.warm_start, ExactModel) else self.warm_start
        return ws if isinstance(ws, GraphicalModel) else None

    def setup(self) -> est.ExactSetup:
        # method="exact" beyond the capacity raises ModelTooLargeError here, before any work
        return self._cached("setup", lambda: est.exact_setup(
            self.domain, self.measurements, self.exact_method, self.norm, self.limits.capacity,
            self.total, self.exact_warm_start()))

    def joint(self) -> est.JointTable | str:
        return self._cached("joint", lambda: est.joint_table(self.setup(), self.limits))

    def residual(self) -> ResidualForm | str:
        return self._cached("residual", lambda: residual_form(
            self.domain, self.measurements, self.limits.residual_max_attribute_cells))


@runtime_checkable
class FittedModel(Protocol):
    """What every finisher returns (:class:`ExactModel`, :class:`RelaxedModel`) and every
    caller may use: answers from the fitted marginals, a summary and the fit's report."""

    domain: Domain
    total: float
    report: FitReport | None

    def marginal(self, attrs): ...

    def answer(self, query): ...

    def answer_many(self, queries): ...

    def supports(self, attrs) -> bool: ...

    def summary(self) -> str: ...


@dataclass(frozen=True)
class Solved:
    """A finisher's result: the model, its certificate."""

    model: ExactModel | RelaxedModel
    certificate: Certificate


class Finisher(Protocol):
    """One way to end a fit (the estimator protocol: ``applies`` from public sizes, then
    ``solve``).  ``name`` and ``version`` are part of every saved model's key
    (:func:`fit_key`): bump ``version`` when the finisher's numbers change."""

    name: str
    version: str
    #: The caller's options (``fit(**options)``) it takes; others make it refuse.
    options: frozenset[str]

    def applies(self, problem: Problem) -> Accepted | Refusal: ...

    def solve(self, problem: Problem, start: float) -> Solved | Refusal: ...


def _options_refusal(finisher: Finisher, problem: Problem) -> Refusal | None:
    extra = sorted(set(problem.options) - finisher.options)
    if not extra:
        return None
    return Refusal(finisher.name, f"does not take the option(s) {', '.join(extra)}")


def _exact_refusal(finisher: Finisher, problem: Problem, direct: bool) -> Refusal | None:
    """The refusals every exact finisher shares; ``direct``: the joint-table solves, which
    need the gap tolerance, the L2 loss and no discrepancy stop."""
    refused = _options_refusal(finisher, problem)
    if refused is not None:
        return refused
    if not problem.exact:
        return Refusal(finisher.name, "the relaxed model is fitted" + (
            "" if problem.method in ("relaxed", "residual") else
            f" (junction tree {problem.size:,} cells, over the capacity)"))
    if not direct:
        return None
    if problem.gap is None:
        return Refusal(finisher.name, "no gap tolerance was given")
    if problem.norm != "l2":
        return Refusal(finisher.name, "the loss is not L2")
    if problem.discrepancy:
        return Refusal(finisher.name, f"the fit stops at the discrepancy principle (model of "
                                      f"{problem.size:,} cells, over discrepancy_above = "
                                      f"{problem.limits.discrepancy_above:,})")
    joint = problem.joint()
    if isinstance(joint, str):
        return Refusal(finisher.name, joint)
    return None


#: First-order options of the exact fit (``estimation.estimate``), beyond those fit passes.
_EXACT_OPTIONS = frozenset({"tol", "stepsize"})


class DenseBlock:
    """Problem 4 on the joint table of the measured attributes, preconditioned by the Gram
    inverse of the Kronecker block covering it (``estimation.solve_dense_block``)."""

    name, version = "dense-block", "1"
    # it falls back to the first-order fit when it does not certify: that fit's options too
    options = _EXACT_OPTIONS

    def applies(self, problem: Problem) -> Accepted | Refusal:
        refused = _exact_refusal(self, problem, direct=True)
        if refused is not None:
            return refused
        joint = problem.joint()
        assert not isinstance(joint, str)
        if joint.precond is None:
            return Refusal(self.name, "no Kronecker block covers the joint table of the measured "
                                      "attributes")
        return ACCEPTED

    def solve(self, problem: Problem, start: float) -> Solved | Refusal:
        joint = problem.joint()
        assert problem.gap is not None and not isinstance(joint, str)
        model = est.solve_dense_block(problem.domain, problem.setup(), joint, problem.gap,
                                      problem.workload, problem.limits)
        if isinstance(model, str):
            return Refusal(self.name, model)
        assert model.solved is not None
        rounds, bound, _ = model.solved
        note = (f"solved on the joint table of the measured attributes by {rounds} active-set "
                f"Newton rounds; optimality gap ≤ {bound:.3g} (Frank–Wolfe certificate, in "
                f"units of the noise; dpsql.pgm.polish.solve_clique)")
        note += ("; in the measurements' metric" if model.metric is None
                 else f"; {model.metric.describe()}")
        return Solved(ExactModel(model, problem.reason, time.perf_counter() - start, note),
                      Certificate("Frank–Wolfe gap", float(bound), True))


class JointDual:
    """Problem 4 on the joint table by the entropic path in the Fourier coefficients the
    measured marginals span (``estimation.solve_dual``, :mod:`dpsql.pgm.joint_dual`)."""

    name, version = "joint-dual", "1"
    options = _EXACT_OPTIONS

    def applies(self, problem: Problem) -> Accepted | Refusal:
        from dpsql.pgm.joint_dual import face_step_refused

        refused = _exact_refusal(self, problem, direct=True)
        if refused is not None:
            return refused
        joint = problem.joint()
        assert not isinstance(joint, str)
        if joint.precond is not None:
            return Refusal(self.name, "a Kronecker block covers the joint table (dense-block)")
        setup = problem.setup()
        if not face_step_refused(setup.tree, setup.measurements, problem.limits):
            return Refusal(self.name, "the first-order fit's face step applies (tree within "
                                      "face_step_max_cells and its Hessian within face_step_max_nnz)")
        return ACCEPTED

    def solve(self, problem: Problem, start: float) -> Solved | Refusal:
        joint = problem.joint()
        assert problem.gap is not None and not isinstance(joint, str)
        model = est.solve_dual(problem.domain, problem.setup(), joint, problem.gap, problem.limits)
        if isinstance(model, str):
            return Refusal(self.name, model)
        assert model.solved is not None
        steps, bound, _ = model.solved
        note = (f"solved on the joint table of the measured attributes by {steps} Newton "
                f"steps along the entropic path; optimality gap ≤ {bound:.3g} (duality "
                f"certificate, in units of the noise; dpsql.pgm.joint_dual)")
        return Solved(ExactModel(model, problem.reason, time.perf_counter() - start, note),
                      Certificate("duality gap", float(bound), True))


class _Stopper:
    """Wraps the caller's callback; ends the fit once the loss reaches ``level``."""

    def __init__(self, level: float | None, callback) -> None:
        self.level, self.callback = level, callback
        self.iteration: int | None = None
        self.loss: float | None = None

    def __call__(self, progress: est.Progress) -> bool:
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


def _gap_note(history, iters: int, gap) -> str | None:
    """How the fit ended, for ``summary()``: converged (estimated gap within the tolerance)
    or stopped at the iteration limit, with the estimated gap either way."""
    if gap is None or not history:
        return None
    gap_est = est.estimated_gap(history)
    done = len(history) - 1
    bound = gap[0] + gap[1] * abs(history[-1])
    if gap_est <= bound and done < iters:
        return (f"converged: estimated optimality gap {gap_est:.3g} ≤ {bound:.3g} (in units of the "
                f"noise) after {done:,} iterations")
    return f"iteration limit {iters:,} reached; estimated optimality gap {gap_est:.3g} (tolerance {bound:.3g})"


class FirstOrder:
    """Entropic mirror descent over the marginal polytope (thesis Algorithms 2-3,
    ``estimation.first_order``), ended by the exact step on its face (:mod:`dpsql.pgm.polish`)
    where the tree is small enough, or at the discrepancy principle for large models.  When
    the face step is refused, the gap tolerance's relative part is at least
    ``unpolished_rtol``."""

    name, version = "first-order", "2"
    options = _EXACT_OPTIONS

    def applies(self, problem: Problem) -> Accepted | Refusal:
        refused = _exact_refusal(self, problem, direct=False)
        return ACCEPTED if refused is None else refused

    def solve(self, problem: Problem, start: float) -> Solved | Refusal:
        stop = problem.discrepancy
        gap = problem.gap
        stopper = _Stopper(discrepancy_level(problem.measurements) if stop else None, problem.callback)
        model = est.first_order(problem.domain, problem.setup(), iters=problem.iters,
                                method=problem.exact_method, warm_start=problem.exact_warm_start(),
                                callback=stopper if stop else problem.callback, norm=problem.norm,
                                gap=None if stop else gap,
                                start="least_squares" if gap is not None and not stop else "maxent",
                                limits=problem.limits, **problem.options)
        applied = None if stop else (model.gap or gap)
        note = stopper.note() or _gap_note(model.loss, problem.iters, applied)
        if note and applied is not None and gap is not None and applied != tuple(gap):
            note += (f" (relative tolerance {applied[1]:g} of the loss, unpolished_rtol: the face "
                     f"step is refused: {model.refused})")
        history = model.loss
        if stop:
            cert = Certificate("discrepancy", None, False)
        else:
            cert = Certificate("estimated gap", float(est.estimated_gap(history)), False)
        polished = model.polished
        if polished is not None:
            # loss = the first-order history; the face step's loss is reported beside it
            face = (f"solved exactly on its face of the polytope (loss {polished[0]:.6g} → "
                    f"{polished[1]:.6g}, dpsql.pgm.polish)")
            note = f"{note}; then {face}" if note else face
            cert = Certificate("face step", None, False)
        return Solved(ExactModel(model, problem.reason, time.perf_counter() - start, note), cert)


class Residual:
    """Problem 2 over the saturated region graph by residual reconstruction (GReM least
    squares, then a dual L-BFGS-B for non-negativity; :mod:`dpsql.pgm.residual_fit`)."""

    name, version = "residual", "1"
    options: frozenset[str] = frozenset()

    def applies(self, problem: Problem) -> Accepted | Refusal:
        if problem.exact:
            return Refusal(self.name, "the exact model is fitted")
        if problem.method not in ("auto", "residual"):
            return Refusal(self.name, f"method={problem.method!r} asks for Prox-PGM")
        refused = _options_refusal(self, problem)
        if refused is not None:
            return refused
        if problem.norm != "l2":
            return Refusal(self.name, "the loss is not L2")
        if problem.region_graph != "saturated":
            return Refusal(self.name, f"the region graph is {problem.region_graph!r}, not saturated")
        form = problem.residual()
        if isinstance(form, str):
            if problem.method == "residual":
                raise ValueError(f"fit: method='residual' does not apply: {form}")
            return Refusal(self.name, form)
        return ACCEPTED

    def solve(self, problem: Problem, start: float) -> Solved | Refusal:
        form = problem.residual()
        assert not isinstance(form, str)
        tol = problem.gap if problem.gap is not None else problem.limits.gap
        callback = problem.callback

        def progress(evals: int, loss: float, certified: float) -> bool:
            return bool(callback(est.Progress(evals, loss, certified))) if callback is not None else False

        res = estimate_residual(form, gap=tol, iters=problem.iters, total=problem.total,
                                callback=progress)
        graph = res.graph
        tiny = np.finfo(float).tiny
        theta = [np.log(np.maximum(p, tiny)) if not graph.parents[i] else np.zeros(p.shape)
                 for i, p in enumerate(res.probs)]
        fitted = RelaxedFit(graph, theta, res.probs, res.total, [], res.loss, 0.0, 0.0,
                            res.iterations, np.ones(len(graph.regions)), 0.0, method="residual")
        bound = tol[0] + tol[1] * res.loss[-1]
        certified = res.gap <= bound
        note = (f"{'certified' if certified else 'evaluation limit reached'}: optimality gap "
                f"≤ {res.gap:.3g} (Lagrange dual, in units of the noise; tolerance {bound:.3g}) after "
                f"{res.iterations:,} dual evaluations; least-squares tables shrunk toward uniform by "
                f"{res.shrink:.2g} to be non-negative")
        why = (f"{problem.reason}; every measurement is a Kronecker product whose factors share an "
               f"eigenbasis with the attribute's total, so Problem 2 is solved by residual "
               f"reconstruction (dpsql.pgm.residual_fit)")
        return Solved(RelaxedModel(problem.domain, fitted, measured=problem.cliques, reason=why,
                                   seconds=time.perf_counter() - start, stopped=note),
                      Certificate("Lagrange dual gap", float(res.gap), bool(certified)))


#: Prox-PGM options (``relaxed.estimate_relaxed``), beyond those fit passes.
_RELAXED_OPTIONS = frozenset({"region_capacity", "stepsize", "step_scale", "inner", "damping", "kappa",
                              "tol", "patience", "gbp_tol", "final_sweeps", "polish", "exact_after",
                              "exact_memory"})


class ProxPGM:
    """Prox-PGM with warm-started Convex-GBP over the local polytope (NeurIPS 2021 §4, §6;
    :func:`dpsql.pgm.relaxed.estimate_relaxed`), ended by Problem 2 solved exactly
    (:mod:`dpsql.pgm.relaxed_polish`) where the step fits its limits."""

    name, version = "prox-pgm", "1"
    options = _RELAXED_OPTIONS

    def applies(self, problem: Problem) -> Accepted | Refusal:
        if problem.exact:
            return Refusal(self.name, "the exact model is fitted")
        if problem.method == "residual":
            return Refusal(self.name, "method='residual' was requested")
        refused = _options_refusal(self, problem)
        return ACCEPTED if refused is None else refused

    def solve(self, problem: Problem, start: float) -> Solved | Refusal:
        reason = problem.reason
        if problem.norm == "l2" and problem.method == "auto" and problem.region_graph == "saturated":
            form = problem.residual()
            if isinstance(form, str):
                reason = f"{reason} (no residual reconstruction: {form})"
        ws = problem.warm_start.fit if isinstance(problem.warm_start, RelaxedModel) else problem.warm_start
        if isinstance(ws, ExactModel):
            ws = ws.model
        gap = problem.gap
        if gap is not None:
            # The relaxed problem is itself an approximation (locally consistent
            # pseudo-marginals, inner GBP sweeps) and its first-order method converges as
            # O(1/t): its tolerance is relative (FitLimits.relaxed_rtol).  Where the region graph
            # is small enough the fit ends with the exact step instead (dpsql.pgm.relaxed_polish),
            # and this tolerance only matters when that step is refused.
            gap = (gap[0], max(gap[1], problem.limits.relaxed_rtol))
        options = {"exact_after": problem.limits.relaxed_exact_after, **problem.options}
        result = estimate_relaxed(problem.domain, problem.measurements, region_graph=problem.region_graph,
                                  iters=problem.iters, warm_start=ws, callback=problem.callback,
                                  total=problem.total, norm=problem.norm, gap=gap, limits=problem.limits,
                                  **options)
        polished = result.polished
        if polished is None:
            note = _gap_note(result.loss[:-1], problem.iters, gap)
            if result.refused:
                note = f"{note}; the exact step was refused ({result.refused})"
            history = result.loss[:-1]
            cert = Certificate("estimated gap", float(est.estimated_gap(history)) if history else None,
                               False)
        else:
            # loss = [first-order history..., after the final Convex-GBP run, after the exact step]
            note = (f"{result.iterations:,} first-order iterations, then Problem 2 solved exactly by "
                    f"an active-set method (loss {polished[0]:.6g} → {polished[1]:.6g}, "
                    f"{polished[2]} rounds, "
                    + ("optimality certified by its KKT conditions" if polished[3] else
                       "feasible, not certified: some cells were held at 0")
                    + "; dpsql.pgm.relaxed_polish)")
            cert = Certificate("KKT", None, bool(polished[3]))
        if problem.stop is not None:
            note = ("stop='discrepancy' was not applied: the relaxed estimator's iterates regularise "
                    "poorly (docs/relaxed.md)" + (f"; {note}" if note else ""))
        return Solved(RelaxedModel(problem.domain, result, measured=problem.cliques, reason=reason,
                                   seconds=time.perf_counter() - start, stopped=note), cert)


#: The finishers in the order they are tried.
FINISHERS: tuple[Finisher, ...] = (DenseBlock(), JointDual(), FirstOrder(), Residual(), ProxPGM())


def run(problem: Problem, finishers: Sequence[Finisher] = FINISHERS) -> ExactModel | RelaxedModel:
    """The model of the first finisher that applies and solves, with its :class:`FitReport`
    (``model.report``); a :class:`~dpsql.errors.ProgrammingError` naming every refusal when
    none does (options that no applicable finisher takes)."""
    from dpsql.errors import ProgrammingError

    start = time.perf_counter()
    refusals: list[Refusal] = []
    for finisher in finishers:
        verdict = finisher.applies(problem)
        if isinstance(verdict, Refusal):
            refusals.append(verdict)
            continue
        out = finisher.solve(problem, start)
        if isinstance(out, Refusal):
            refusals.append(out)
            continue
        out.model.report = FitReport(finisher.name, out.certificate, tuple(refusals),
                                     time.perf_counter() - start)
        return out.model
    taken = sorted({name for f in finishers for name in f.options})
    raise ProgrammingError(
        "fit: no finisher applies to this problem with these options",
        detail="; ".join(r.describe() for r in refusals),
        hint=f"options are taken only by the path that uses them ({', '.join(taken)}); "
             "pass method='relaxed' for the Prox-PGM options")


def fit_key(limits: FitLimits, finishers: Sequence[Finisher] = FINISHERS) -> str:
    """The identity of the fit for saved models: the finishers' names and versions in order,
    and every limit (a model fitted under other limits or finishers is never loaded)."""
    text = json.dumps({"finishers": [[f.name, f.version] for f in finishers],
                       "limits": limits.values()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
