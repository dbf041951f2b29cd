"""Fitting a graphical model to noisy measurements (thesis §4.3, Algorithms 2 and 3).

:func:`estimate` solves thesis Problem 4, min over the marginal polytope of L(μ), by
entropic mirror descent: every iterate is μ = MARGINAL-ORACLE(θ) for log-potentials
θ on the junction tree's cliques, so the answer is a graphical model p_θ (the
maximum-entropy distribution with the fitted marginals).

* ``method="adaptive"`` (the default with the L2 loss, and the engine's) — the accelerated
  method with K backtracked to the local curvature and restarted when the loss rises
  (:func:`_adaptive`); the fastest to a tight optimum, since the worst-case K of Algorithm 3
  is usually far too large.
* ``method="md"`` (Algorithm 2 with an Armijo line search; with the L1 loss the η₀/√t
  schedule) and ``method="accelerated"`` (Algorithm 3) — the thesis's own methods, which the
  engine never runs: references for tests and benches, in :mod:`dpsql.pgm.experimental`.

μ is kept on the scale of counts (it sums to the total N), as the measurements are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError
from dpsql.pgm.inference import BeliefPropagation
from dpsql.pgm.junction_tree import JunctionTree
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.loss import MarginalLoss, SparseLoss
from dpsql.pgm.measurement import Measurement, identity_scale, lipschitz, resolve_total
from dpsql.pgm.model import GraphicalModel
from dpsql.pgm.progress import GapTest, Progress, converged, estimated_gap
from dpsql.triangulation import MAX_MODEL_CELLS

__all__ = ["DEFAULT_CAPACITY", "ExactSetup", "JointTable", "Progress", "check_capacity", "estimate",
           "estimated_gap", "exact_setup", "first_order", "joint_table", "solve_dense_block",
           "solve_dual"]

# The largest junction tree a fit builds by default: the engine's [planner] max_model_cells,
# declared once in dpsql/triangulation.py (FitLimits.capacity's default).
DEFAULT_CAPACITY = MAX_MODEL_CELLS


def check_capacity(tree: JunctionTree, capacity: int) -> None:
    """Raise ModelTooLargeError when JT-SIZE exceeds ``capacity`` cells (Remark 1)."""
    if tree.size <= capacity:
        return
    sizes = sorted(((tree.clique_size(c), c) for c in tree.cliques), reverse=True)
    offending, excess = [], tree.size - capacity
    for size, c in sizes:
        offending.append(c)
        excess -= size
        if excess <= 0:
            break
    raise ModelTooLargeError(
        f"the graphical model needs {tree.size:,} cells, over the capacity of {capacity:,}",
        cliques=offending, size=tree.size,
        hint="measure fewer or smaller marginals (coarser bins, fewer attributes per "
             "clique), raise the model capacity, or use the relaxed (region-graph) estimator")


def _check(domain: Domain, measurements: Sequence[Measurement]) -> None:
    if not measurements:
        raise ValueError("estimate: at least one measurement is needed")
    for m in measurements:
        for a in m.clique:
            if a not in domain:
                raise ValueError(f"measurement clique {m.clique} names {a!r}, not in the domain")
        n = domain.size(m.clique)
        if int(m.query.shape[1]) != n:
            raise ValueError(f"measurement on {m.clique}: query has {m.query.shape[1]} columns, "
                             f"the marginal has {n} cells")


def _initial_theta(domain: Domain, tree: JunctionTree, bp: BeliefPropagation,
                   warm_start: GraphicalModel | None) -> list[np.ndarray]:
    theta = [np.zeros(s) for s in bp.shapes]
    if warm_start is None:
        return theta
    old = warm_start.potential_arrays()
    try:
        for clique, arr in old:
            h = tree.host(clique)
            shape = tuple(tree.sizes[a] if a in clique else 1 for a in tree.cliques[h])
            theta[h] += arr.reshape(shape)
        return theta
    except KeyError:
        pass
    # The new structure does not contain the old one: start from the old model's
    # marginals on the new cliques (the max-entropy model that matches them).
    return _theta_from_marginals(tree, [warm_start.marginal(c).values for c in tree.cliques])


def _least_squares_start(tree: JunctionTree, bp: BeliefPropagation, measurements: Sequence[Measurement],
                         total: float, sweeps: int = 2) -> list[np.ndarray]:
    """Potentials whose measured marginals are near their least-squares estimates.

    Per measured clique that some measurement observes directly (an identity query), the
    inverse-variance weighted mean of those measurements (the least-squares estimate of the
    marginal from them), clipped to a small positive floor, is a target; iterative
    proportional fitting (a few sweeps, one belief propagation per target) moves the
    maximum-entropy model towards the targets.  When the noise is small the targets are
    nearly consistent and the model starts close to the optimum, which cuts the iterations a
    fit needs on the adult dashboards by a third; when they disagree, IPF still starts from a
    sensible compromise.  (Other queries are left to the fit: solving their normal equations
    here cost more than the iterations it saved, dense LAPACK being slow on a loaded
    machine.)"""
    position = {a: i for i, a in enumerate(tree.attributes)}
    groups: dict[tuple[str, ...], list[tuple[float, np.ndarray]]] = {}
    for m in measurements:
        n = int(np.prod([tree.sizes[a] for a in m.clique], dtype=np.int64)) if m.clique else 1
        scale = identity_scale(m.query) if m.clique and tuple(m.query.shape) == (n, n) else None
        if not scale:
            continue
        canon = tuple(sorted(m.clique, key=position.__getitem__))
        given = tuple(tree.sizes[a] for a in m.clique)
        values = (np.asarray(m.values, dtype=float) / scale).reshape(given)
        values = values.transpose([m.clique.index(a) for a in canon])
        groups.setdefault(canon, []).append(((scale / m.stddev) ** 2, values))
    targets = []
    for canon, group in groups.items():
        w = sum(g[0] for g in group)
        est = np.maximum(sum(g[0] * g[1] for g in group) / w, 1e-3)
        targets.append((canon, est * (total / est.sum())))
    theta = [np.zeros(s) for s in bp.shapes]
    for _ in range(sweeps if targets else 0):
        for canon, target in targets:
            h = tree.host(canon)
            host = tree.cliques[h]
            mu = bp.marginals(theta, total)[h]
            axes = tuple(i for i, a in enumerate(host) if a not in canon)
            current = mu.sum(axis=axes, keepdims=True) if axes else mu
            kd = tuple(tree.sizes[a] if a in canon else 1 for a in host)
            theta[h] = theta[h] + (np.log(target).reshape(kd) - np.log(np.maximum(current, 1e-300)))
    return theta


def _theta_from_marginals(tree: JunctionTree, mu: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Potentials of p = Π_C μ_C / Π_S μ_S, whose clique marginals are ``mu`` (calibrated)."""
    tiny = np.finfo(float).tiny
    theta = [np.log(np.maximum(m, tiny)) for m in mu]
    for (_, c), sep in tree.separators.items():
        if not sep:
            continue
        clique = tree.cliques[c]
        axes = tuple(i for i, a in enumerate(clique) if a not in sep)
        marg = mu[c].sum(axis=axes, keepdims=True)
        theta[c] = theta[c] - np.log(np.maximum(marg, tiny))
    return theta


def estimate(domain: Domain, measurements: Sequence[Measurement], *, iters: int = 1000,
             method: str | None = None, warm_start: GraphicalModel | None = None, tol: float | GapTest = 0.0,
             callback: Callable[[Progress], bool | None] | None = None,
             capacity: int | None = None, total: float | None = None,
             norm: str = "l2", stepsize: float | None = None,
             gap: tuple[float, float] | None = None, start: str = "maxent",
             workload: Sequence | None = None, limits: FitLimits | None = None) -> GraphicalModel:
    """Fit a graphical model to ``measurements`` (thesis Algorithm 2 or 3).

    ``method`` is "md" (Algorithm 2), "accelerated" (Algorithm 3) or "adaptive" (accelerated
    with a backtracked Lipschitz estimate and restarts); by default "adaptive" with the L2 loss,
    the engine's method, and "md" with the L1 loss (the only one for it).
    ``warm_start`` continues from a previous model's potentials (or, when its cliques
    do not fit the new tree, from its marginals).  ``callback(Progress)`` runs after
    every iteration; returning True stops the fit.

    ``total`` is the number of records when known; otherwise it is estimated from
    the measurements by inverse-variance weighting (ICML appendix E.1), falling back
    to ``warm_start.total``.  ``tol`` stops early once the relative loss decrease
    stays below it for 10 iterations.  ``gap = (atol, rtol)`` stops once the estimated
    optimality gap (:func:`estimated_gap`) is at most atol + rtol·loss: the loss is a sum of
    squared residuals in units of their own σ, so the test does not depend on the noise
    scale.  ``start`` is "maxent" (θ = 0, the uniform model: the path early stopping relies
    on) or "least_squares" (:func:`_least_squares_start`; used when no ``warm_start`` is
    given).  ``capacity`` bounds the junction tree in cells (default ``limits.capacity``);
    beyond it ModelTooLargeError is raised before any work.  ``norm`` is "l2"
    (default; Gaussian likelihood) or "l1" (Laplace; md only).  ``workload``: the query
    matrices (over the whole domain) the answers are scored on, or a function returning them
    (called only where they are used); where the fit is solved on the joint table of the
    measured attributes, it is then solved in the workload's metric
    (:mod:`dpsql.pgm.workload_fit`; ``model.metric`` says which metric was used).
    ``limits``: the size thresholds of the direct solves and the face step
    (:class:`~dpsql.pgm.limits.FitLimits`).  :func:`dpsql.pgm.auto.fit` runs the same
    pieces as finishers (:mod:`dpsql.pgm.finishers`) and reports which one ran.
    """
    limits = limits if limits is not None else FitLimits()
    if method is None:
        method = "adaptive" if norm == "l2" else "md"
    if start not in ("maxent", "least_squares"):
        raise ValueError(f"estimate: start must be 'maxent' or 'least_squares', got {start!r}")
    setup = exact_setup(domain, measurements, method, norm, capacity if capacity is not None
                        else limits.capacity, total, warm_start)
    if gap is not None and norm == "l2":
        solved = _solve_joint(domain, setup, gap, workload, limits)
        if solved is not None:
            return solved
    return first_order(domain, setup, iters=iters, method=method, warm_start=warm_start, tol=tol,
                       callback=callback, norm=norm, stepsize=stepsize, gap=gap, start=start,
                       limits=limits)


@dataclass(frozen=True)
class ExactSetup:
    """What every exact finisher starts from: the checked measurements, the junction tree
    (within the capacity), the number of records and the marginal oracle."""

    measurements: list[Measurement]
    tree: JunctionTree
    total: float
    bp: BeliefPropagation


def exact_setup(domain: Domain, measurements: Sequence[Measurement], method: str, norm: str,
                capacity: int, total: float | None, warm_start: GraphicalModel | None) -> ExactSetup:
    """Check the arguments, triangulate (ModelTooLargeError beyond ``capacity``) and resolve
    the total (see :func:`estimate`)."""
    measurements = list(measurements)
    _check(domain, measurements)
    if method not in ("md", "accelerated", "adaptive"):
        raise ValueError(f"estimate: method must be 'md', 'accelerated' or 'adaptive', "
                         f"got {method!r}")
    if method != "md" and norm != "l2":
        raise ValueError("estimate: the accelerated method needs the smooth L2 loss")
    sizes = dict(zip(domain.attributes, domain.shape))
    tree = JunctionTree(domain.attributes, sizes, [m.clique for m in measurements])
    check_capacity(tree, capacity)
    return ExactSetup(measurements, tree, resolve_total(measurements, total, warm_start, "estimate"),
                      BeliefPropagation(tree))


def first_order(domain: Domain, setup: ExactSetup, *, iters: int, method: str,
                warm_start: GraphicalModel | None, tol: float | GapTest = 0.0,
                callback: Callable[[Progress], bool | None] | None = None, norm: str = "l2",
                stepsize: float | None = None, gap: tuple[float, float] | None = None,
                start: str = "maxent", limits: FitLimits) -> GraphicalModel:
    """The first-order fit (Algorithm 2 or 3, see :func:`estimate`), ended by the exact
    face step (:func:`_polish_step`) when ``gap`` is given with the L2 loss."""
    measurements, tree, total, bp = setup.measurements, setup.tree, setup.total, setup.bp
    loss = choose_loss(tree, measurements, norm, method, limits)
    if start not in ("maxent", "least_squares"):
        raise ValueError(f"estimate: start must be 'maxent' or 'least_squares', got {start!r}")
    if warm_start is None and start == "least_squares" and norm == "l2":
        theta = _least_squares_start(tree, bp, measurements, total)
    else:
        theta = _initial_theta(domain, tree, bp, warm_start)
    face: SparseLoss | str | None = None
    if gap is not None and norm == "l2":
        face = _face_loss(tree, loss, measurements, limits)
        if isinstance(face, str):
            # No exact step will finish this fit, so the first-order method's own tail is all
            # that is left: its tolerance becomes relative, as the relaxed fit's is.  On
            # examples/flights (89,031 cells, the 1,459-label dest in a 74,409-cell clique)
            # 0.5 absolute took 10,269 iterations, 58.5 s of CPU, where the dashboard's
            # answers had stopped moving by ~3,000 (bench/RESULTS.md, "Fit of the flights
            # example"; FitLimits.unpolished_rtol).
            gap = (gap[0], max(gap[1], limits.unpolished_rtol))
    if gap is not None:
        tol = GapTest(*gap)
    if method == "adaptive":
        theta, history = _adaptive(bp, loss, theta, total, measurements, iters, tol, callback)
    else:
        # the thesis's own methods, which the engine never runs (references for tests and benches)
        from dpsql.pgm import experimental
        if method == "md" and norm == "l1":
            theta, history = experimental.subgradient(bp, loss, theta, total, measurements, iters,
                                                      tol, callback, stepsize)
        elif method == "md":
            theta, history = experimental.mirror_descent(bp, loss, theta, total, measurements, iters,
                                                         tol, callback, stepsize)
        else:
            mu, history = experimental.accelerated(bp, loss, theta, total, measurements, iters, tol,
                                                   callback)
            theta = _theta_from_marginals(tree, mu)
    polished = refused = None
    if isinstance(face, str):
        refused = face
    elif face is not None:
        theta, polished = _polish_step(tree, bp, face, theta, total, limits)
        if isinstance(polished, str):
            polished, refused = None, polished
    model = _fitted(domain, tree, theta, total, measurements, history, polished=polished,
                    refused=refused)
    model.gap = gap
    return model


def _fitted(domain, tree, theta, total, measurements, history, polished=None, solved=None,
            metric=None, refused=None) -> GraphicalModel:
    """The fitted model with how its fit ended: ``polished`` (the exact face step's report),
    ``solved`` (the direct solve's certificate), ``metric`` (the workload-metric choice),
    ``refused`` (why the face step was not taken, when it was tried)."""
    model = GraphicalModel(domain, tree, theta, total,
                           measured=[m.clique for m in measurements], loss=history)
    model.polished = polished
    model.solved = solved
    model.metric = metric
    model.refused = refused
    return model


def choose_loss(tree: JunctionTree, measurements: Sequence[Measurement], norm: str = "l2",
                method: str = "adaptive", limits: FitLimits | None = None) -> MarginalLoss | SparseLoss:
    """The loss the estimator evaluates: the sparse one (L2, accelerated methods) when it is
    the cheaper of the two (at most ``limits.sparse_nnz_per_measurement`` non-zeros per
    measurement, ``limits.sparse_max_nnz`` in all), else the sum-tree loss."""
    limits = limits if limits is not None else FitLimits()
    if norm == "l2" and method in ("adaptive", "accelerated"):
        loss = SparseLoss.build(tree, measurements, max_nnz=min(
            limits.sparse_max_nnz, limits.sparse_nnz_per_measurement * len(measurements)))
        if loss is not None:
            return loss
    return MarginalLoss(tree, measurements, norm)


@dataclass(frozen=True)
class JointTable:
    """Problem 4 on the joint table of the measured attributes (``joint``, sizes ``shape``):
    its loss and, when one Kronecker block covers the table, the block's Gram inverse as a
    preconditioner (else None)."""

    joint: tuple[str, ...]
    shape: tuple[int, ...]
    loss: MarginalLoss
    precond: object | None


def joint_table(setup: ExactSetup, limits: FitLimits) -> JointTable | str:
    """The joint table of the measured attributes, or why there is none to solve on (over
    ``limits.dense_block_max_cells``).

    Over the measured attributes' joint table the marginal polytope is the scaled simplex,
    and every measured clique's marginal is a sum of its cells, so the loss is the same
    function of the measured marginals; the junction tree's clique tables are the joint's
    marginals (consistent by construction) and the potentials reproduce them (thesis §4.2:
    the model is the maximum-entropy distribution with those marginals).  With a Kronecker
    block over the whole joint table, its Gram inverse preconditions an active-set Newton
    method (the dense-block case: OPT_⊗ on the workload's attributes).  Without one
    (nltcs/ranges' 4-way blocks), conjugate gradients did not certify in 40 rounds; there,
    when the first-order fit's exact last step would be refused for its size, the entropic
    path of :mod:`dpsql.pgm.joint_dual` solves the problem in the few Fourier coefficients the
    measured marginals span."""
    from dpsql.pgm.polish import preconditioner   # fitting only

    tree = setup.tree
    position = {a: i for i, a in enumerate(tree.attributes)}
    joint = tuple(sorted({a for m in setup.measurements for a in m.clique}, key=position.__getitem__))
    shape = tuple(tree.sizes[a] for a in joint)
    if not joint:
        return "no attribute is measured"
    cells = int(np.prod(shape, dtype=np.int64))
    if cells > limits.dense_block_max_cells:
        return (f"the joint table of the measured attributes has {cells:,} cells, over "
                f"dense_block_max_cells = {limits.dense_block_max_cells:,}")
    jtree = JunctionTree(joint, {a: tree.sizes[a] for a in joint}, [joint])
    loss = MarginalLoss(jtree, setup.measurements)
    return JointTable(joint, shape, loss, preconditioner(loss, shape))


def _joint_theta(setup: ExactSetup, jt: JointTable, table: np.ndarray) -> list[np.ndarray]:
    """Potentials of the model whose clique tables are the joint table's marginals."""
    tree, bp, total = setup.tree, setup.bp, setup.total
    mu = bp.marginals([np.zeros(s) for s in bp.shapes], total)   # unmeasured cliques: uniform
    for i, clique in enumerate(tree.cliques):
        if set(clique) <= set(jt.joint):
            axes = tuple(k for k, a in enumerate(jt.joint) if a not in clique)
            mu[i] = table.sum(axis=axes) if axes else table
    return _theta_from_marginals(tree, mu)


def solve_dense_block(domain: Domain, setup: ExactSetup, jt: JointTable, gap: tuple[float, float],
                      workload, limits: FitLimits) -> GraphicalModel | str:
    """Problem 4 solved on the joint table by :func:`dpsql.pgm.polish.solve_clique`
    (preconditioned active-set Newton), certified by its Frank–Wolfe gap; or why not (the
    solve did not certify within its budget).  With a ``workload`` whose rows over the joint
    table fit ``limits.workload_max_entries``, the fit in the workload's metric is computed
    too (:mod:`dpsql.pgm.workload_fit`) and kept when Stein's estimate of the workload's error
    is lower (``model.metric``, the ``MetricChoice``)."""
    from dpsql.pgm.polish import solve_clique   # fitting only

    total = setup.total
    loss, shape = jt.loss, jt.shape
    table, history, certified = solve_clique(loss, shape, total, gap[0], gap[1], precond=jt.precond)
    if not certified:
        return "the active-set Newton solve did not certify the optimum within its budget"
    metric = None
    if callable(workload):
        # Compiled only here: the engine's workload costs the planner's imports (scipy) and
        # ~0.2 s, which fits off this path never need (bench/trust.py --parts fit).
        workload = workload() or None
    if workload is not None:
        # the fit in the workload's metric, kept when its error estimate is lower
        from dpsql.pgm.workload_fit import choose_fit, joint_workload
        W = joint_workload(domain, workload, jt.joint, limits.workload_max_entries)
        if W is not None:
            table, history, loss, metric = choose_fit(loss, shape, total, W, gap[0], gap[1],
                                                      jt.precond, table, history)
    _, grads = loss([table])
    fw = float(np.vdot(grads[0], table)) - total * float(grads[0].min()) if grads[0] is not None else 0.0
    return _fitted(domain, setup.tree, _joint_theta(setup, jt, table), total, setup.measurements,
                   history, solved=(len(history) - 1, fw, "clique"), metric=metric)


def solve_dual(domain: Domain, setup: ExactSetup, jt: JointTable, gap: tuple[float, float],
               limits: FitLimits) -> GraphicalModel | str:
    """Problem 4 solved on the joint table by :func:`dpsql.pgm.joint_dual.solve_joint_dual`,
    certified by its duality gap; or why not (over the limits, or not certified)."""
    from dpsql.pgm.joint_dual import solve_joint_dual

    result = solve_joint_dual(jt.joint, jt.shape, setup.measurements, setup.total, gap[0], gap[1],
                              limits=limits)
    if isinstance(result, str):
        return result
    table, history, certified, info = result
    if not certified:
        return f"the entropic path did not certify the optimum in {info['steps']} Newton steps"
    return _fitted(domain, setup.tree, _joint_theta(setup, jt, table), setup.total,
                   setup.measurements, history, solved=(info["steps"], info["gap"], "dual"))


def _solve_joint(domain, setup: ExactSetup, gap, workload, limits: FitLimits) -> GraphicalModel | None:
    """The direct solves on the joint table of the measured attributes (:func:`joint_table`):
    the dense-block solve when a Kronecker block covers the table, else the joint dual when
    the first-order fit's face step would be refused for its size; the model when one
    certifies the optimum within the gap tolerance, else None (the first-order fit then
    runs).  :mod:`dpsql.pgm.finishers` runs the same two as finishers of their own."""
    from dpsql.pgm.joint_dual import face_step_refused

    jt = joint_table(setup, limits)
    if isinstance(jt, str):
        return None
    if jt.precond is not None:
        out = solve_dense_block(domain, setup, jt, gap, workload, limits)
    elif face_step_refused(setup.tree, setup.measurements, limits):
        out = solve_dual(domain, setup, jt, gap, limits)
    else:
        return None
    return None if isinstance(out, str) else out


def _face_loss(tree, loss, measurements, limits: FitLimits) -> SparseLoss | str:
    """The sparse loss the exact face step of :mod:`dpsql.pgm.polish` solves with, or why
    that step is refused for the size of the tree or of its Hessian (public sizes only, known
    before the fit, so the fit's tolerance can depend on it)."""
    if tree.size > limits.face_step_max_cells:
        return (f"the junction tree has {tree.size:,} cells, over face_step_max_cells = "
                f"{limits.face_step_max_cells:,}")
    # Σ_rows nnz(row)² ≥ nnz²/rows: a matrix past this many non-zeros fails the Hessian test
    # below anyway, so it is not built (NLTCS's marginals: 9 million).
    rows = sum(int(m.query.shape[0]) for m in measurements)
    sparse = loss if isinstance(loss, SparseLoss) else SparseLoss.build(
        tree, measurements, dense_limit=limits.face_step_dense_entries,
        max_nnz=int(np.sqrt(float(limits.face_step_max_nnz) * rows)) + 1)
    # The size test before the matrix goes to scipy: a fit too large for the step never
    # imports scipy (issue 17).
    if sparse is None or sparse.hessian_nnz_bound() > limits.face_step_max_nnz:
        return (f"its Hessian could have more than face_step_max_nnz = "
                f"{limits.face_step_max_nnz:,} non-zeros")
    return sparse


def _polish_step(tree, bp, sparse: SparseLoss, theta, total, limits: FitLimits):
    """The exact step of :mod:`dpsql.pgm.polish` after a converged fit, on ``_face_loss``'s
    matrix: returns the potentials and the loss (first-order, polished), or the fit's own
    potentials and why the step was not taken."""
    from dpsql.pgm.polish import polish

    mu = bp.marginals(theta, total)
    tables = polish(tree, sparse.P.to_scipy(), sparse.w, sparse.y, mu, total,
                    limits.face_step_max_cells, limits.face_step_max_nnz)
    if tables is None:
        return theta, "the solve on the face did not lower the loss"
    before, after = sparse.value(mu), sparse.value(tables)
    return _theta_from_marginals(tree, tables), (before, after)


class _FlatLoss:
    """The L2 loss on the flat layout (``BeliefPropagation.split``) through a linear image.

    For :class:`SparseLoss`, L(μ) = Σ w (Pμ − y)² depends on μ only through its image Pμ (one
    value per noisy measurement); images of convex combinations are the same combinations of
    images, so the adaptive loop combines images instead of tables and pays one product
    each way per trial.  Any other loss takes the tables themselves as the image."""

    def __init__(self, bp: BeliefPropagation, loss) -> None:
        self.bp, self.loss = bp, loss
        self.sparse = isinstance(loss, SparseLoss)

    def image(self, mu: np.ndarray) -> np.ndarray:
        return self.loss.P @ mu if self.sparse else mu

    def value(self, img: np.ndarray) -> float:
        if self.sparse:
            r = img - self.loss.y
            return float(self.loss.w @ (r * r))
        return self.loss.value(self.bp.split(img))

    def value_and_grad(self, img: np.ndarray) -> tuple[float, np.ndarray]:
        if self.sparse:
            wr = self.loss.w * (img - self.loss.y)
            return float(wr @ (img - self.loss.y)), 2.0 * self.loss.P.rmatvec(wr)
        v, grads = self.loss(self.bp.split(img))
        g = np.zeros(self.bp.size)
        for part, gh in zip(self.bp.split(g), grads):
            if gh is not None:
                part[...] = gh
        return v, g


#: The adaptive method's curvature estimate shrinks by this factor before each iteration
#: (halving made nearly every iteration backtrack once: 2 oracle calls).
_DECAY = 0.8
#: Images of the iterates are recomputed from the tables this often (rounding drift).
_REFRESH = 64


def _adaptive(bp, loss, theta0, total, measurements, iters, tol, callback):
    """Accelerated entropic mirror descent with a backtracked Lipschitz estimate.

    Nesterov's method of similar triangles (Tseng 2008, Alg. 1 with the entropy as
    prox function): y = (1−τ)x + τz, z ← MARGINAL-ORACLE(θ_z − a∇L(y)), x ← (1−τ)x + τz,
    with a²L = A + a, τ = a/(A + a).  Algorithm 3 uses the worst-case K of the queries;
    here L is halved before every iteration and doubled until the descent inequality
    L(x) ≤ L(y) + ⟨∇L(y), x − y⟩ + (L/2N)‖x − y‖₁² holds.  ‖·‖₁ over p is bounded below
    by the largest clique-marginal L1 distance, so checking with that bound is a
    stricter test and keeps the O(L·D/t²) guarantee, while L tracks the local
    curvature, which is usually orders of magnitude below K.

    Every vector (θ, μ, ∇L) is one flat array over all cliques (``BeliefPropagation.split``),
    so an iteration is a fixed handful of numpy calls besides the oracle's: on small trees
    the per-clique Python of list-of-arrays updates cost as much as the arithmetic (issue 17).
    The loss is evaluated on images of the iterates (:class:`_FlatLoss`), and the trial point's
    x' − y is τ(z' − z), so neither y nor a rejected x' is ever formed as tables.
    """
    N = total
    f = _FlatLoss(bp, loss)
    starts = bp.offsets[:-1]
    L = max(lipschitz(measurements), 1e-300) * N
    theta_z = bp.flatten(theta0)
    z = bp.flat_marginals(theta_z, N)
    x = z
    Px = Pz = f.image(x)
    A = 0.0
    history = [f.value(Px)]
    for t in range(1, iters + 1):
        if t % _REFRESH == 0 and f.sparse:
            Px, Pz = f.image(x), f.image(z)
        while True:
            a = (1.0 + np.sqrt(1.0 + 4.0 * L * A)) / (2.0 * L)
            tau = a / (A + a)
            fy, gy = f.value_and_grad((1 - tau) * Px + tau * Pz)
            new_theta = theta_z - a * gy
            new_z = bp.flat_marginals(new_theta, N)
            Pnz = f.image(new_z)
            Pnx = (1 - tau) * Px + tau * Pnz
            fx = f.value(Pnx)
            dz = new_z - z                      # x' − y = τ (z' − z)
            lin = tau * float(gy @ dz)
            norm = tau * float(np.add.reduceat(np.abs(dz), starts).max())
            if fx <= fy + lin + L / (2 * N) * norm * norm + 1e-12 * abs(fy) or L > 1e300:
                break
            L *= 2.0
        if fx > history[-1]:
            # Adaptive restart (O'Donoghue & Candès 2015): momentum overshot, so
            # restart the sequence from the current point x, whose junction-tree
            # potentials reproduce it exactly.
            theta_z = bp.flatten(_theta_from_marginals(bp.tree, bp.split(x)))
            z, Pz, A = x, Px, 0.0
            history.append(history[-1])
        else:
            A += a
            x = (1 - tau) * x + tau * new_z
            z, theta_z, Px, Pz = new_z, new_theta, Pnx, Pnz
            history.append(fx)
        L *= _DECAY
        if callback is not None and callback(Progress(t, history[-1], a)):
            break
        if converged(history, tol):
            break
    return _theta_from_marginals(bp.tree, bp.split(x)), history
