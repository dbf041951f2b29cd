"""Issue 17: the relaxed fit reaches the optimum of Problem 2 (``dpsql.pgm.relaxed_polish``).

On adult's 121 one- and two-way marginals at ε = 100 the relaxed model lost to least squares
because its first-order fit stopped ~10³ times above its optimum (20,000 iterations): one-way
marginals, sums of many cells of nearly exactly measured pair tables, came out 10× further from
the truth than least squares'.  The exact step solves the quadratic program over the local
polytope L(G) (NeurIPS 2021 §4, Problem 2 and Definition 3) by an active-set method.

References here are independent of the fit: the local polytope's constraints are built from the
definition with plain index arithmetic, and the QP is solved by bounded-variable least squares
(scipy's BVLS) with the equalities enforced by the method of multipliers.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from dpsql.domain import Domain
from dpsql.linalg import Identity, Kron
from dpsql.pgm import Measurement
from dpsql.pgm.auto import fit
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.region_graph import RegionGraph
from dpsql.pgm.relaxed_polish import local_constraints

from pgm_brute import marginal, random_data


def _project(graph: RegionGraph, p: int, t: int) -> np.ndarray:
    """Dense 0/1 matrix summing region p's table onto region t (from the definition)."""
    shape_p, shape_t = graph.shape(p), graph.shape(t)
    rp, rt = graph.regions[p], graph.regions[t]
    M = np.zeros((int(np.prod(shape_t)), int(np.prod(shape_p))))
    for j, cell in enumerate(itertools.product(*[range(n) for n in shape_p])):
        sub = tuple(cell[rp.index(a)] for a in rt)
        M[np.ravel_multi_index(sub, shape_t), j] = 1.0
    return M


def _brute_problem_2(graph: RegionGraph, measurements, total: float):
    """min Σ ‖Q_i τ_{host(i)} − y_i‖²/σ_i² over L(G): (tables, loss), by BVLS + multipliers."""
    sizes = [int(np.prod(graph.shape(i))) for i in range(len(graph.regions))]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n = int(offsets[-1])
    A, b = [], []
    for m in measurements:
        h = graph.host(m.clique)
        region = graph.regions[h]
        t = graph.index[tuple(m.clique)]
        proj = _project(graph, h, t) if region != tuple(m.clique) else np.eye(sizes[h])
        row = np.zeros((m.query.shape[0], n))
        row[:, offsets[h]:offsets[h + 1]] = np.asarray(m.query.dense()) @ proj
        A.append(row / m.stddev)
        b.append(m.values / m.stddev)
    A, b = np.vstack(A), np.concatenate(b)
    E, e = [], []
    for p, t in graph.edges:
        row = np.zeros((sizes[t], n))
        row[:, offsets[p]:offsets[p + 1]] = _project(graph, p, t)
        row[:, offsets[t]:offsets[t + 1]] -= np.eye(sizes[t])
        E.append(row)
        e.append(np.zeros(sizes[t]))
    for r in range(len(graph.regions)):
        row = np.zeros((1, n))
        row[0, offsets[r]:offsets[r + 1]] = 1.0
        E.append(row)
        e.append([total])
    E, e = np.vstack(E), np.concatenate(e)
    w = 30.0 * max(1.0, np.linalg.norm(A, 2))
    shift = np.zeros_like(e)
    for _ in range(200):
        x = lsq_linear(np.vstack([A, w * E]), np.concatenate([b, w * (e + shift)]),
                       bounds=(0, np.inf), method="bvls", tol=1e-15).x
        gap = e - E @ x
        shift += gap
        if np.abs(gap).max() <= 1e-11 * total:
            break
    r = A @ x - b
    return [x[offsets[i]:offsets[i + 1]] for i in range(len(sizes))], float(r @ r)


def _pairs(dom: Domain, data, sds, rng):
    out = []
    for (a, b), sd in zip(itertools.combinations(dom.attributes, 2), sds):
        mu = marginal(dom, data, (a, b)).ravel()
        out.append(Measurement((a, b), Kron([Identity(dom[a]), Identity(dom[b])]),
                               mu + rng.normal(0, sd, mu.size), sd))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_relaxed_fit_is_the_optimum_of_problem_2(seed):
    """Every pair of a loopy domain measured (the saturated graph is pairs + singletons, a
    relaxation: L(G) ⊋ M), sparse data so that cells are held at 0: the fitted tables are the
    QP's optimum and the step says it certified it."""
    dom = Domain(list("ABCD"), [4, 3, 3, 2])
    rng = np.random.default_rng(seed)
    data = random_data(rng, dom, 300)
    ms = _pairs(dom, data, [0.5, 2.0, 1.0, 0.05, 1.0, 3.0], rng)
    total = float(data.sum())
    model = fit(dom, ms, method="relaxed", iters=2000, gap=(0.5, 1e-6), total=total)
    graph = model.graph
    want, best = _brute_problem_2(graph, ms, total)
    got = [np.ravel(model.marginal(r).values) for r in graph.regions]
    polished = model.fit.polished
    assert polished is not None and polished[3], model.stopped
    assert polished[1] <= best + 1e-6 * (1.0 + best)
    for r, g, w in zip(graph.regions, got, want):
        assert np.abs(g - w).max() < 1e-5 * total, (r, model.stopped)
    assert min(float(t.min()) for t in got) >= 0.0
    assert model.fit.violation < 1e-9


def test_one_way_marginals_of_exactly_measured_pairs_come_back_exactly():
    """The adult ε = 100 situation in small: a 1-way marginal is measured only through pair
    tables, one of them almost exactly (sd 10⁻³, as ``release.fit_stddev`` weights a block
    whose discrete-Gaussian noise is nearly always 0), the others with real noise.  Its
    optimum is within the exact table's noise: n_B cells of sd 10⁻³ summed, each also
    clipped at 0 where the truth is 0, so |error| ≤ 3·n_B·10⁻³.  The first-order fit alone,
    stopped at the engine's limits, was 0.8 off (least squares: ~0.004)."""
    dom = Domain(list("ABCD"), [30, 12, 3, 2])
    rng = np.random.default_rng(7)
    data = random_data(rng, dom, 5_000)
    ms = _pairs(dom, data, [1e-3, 1.0, 1.0, 1.0, 1.0, 1.0], rng)
    model = fit(dom, ms, method="relaxed", iters=1000, gap=(0.5, 1e-3))
    for attr in "A", "B":
        err = np.abs(model.marginal((attr,)).values - marginal(dom, data, (attr,))).max()
        other = dom["B"] if attr == "A" else dom["A"]
        assert err <= 3 * other * 1e-3, (attr, err, model.stopped)


def test_constraints_vanish_exactly_on_consistent_tables():
    dom = Domain(list("ABC"), [3, 2, 4])
    rng = np.random.default_rng(3)
    data = random_data(rng, dom, 500)
    graph = RegionGraph.saturated(dom.attributes, dict(zip(dom.attributes, dom.shape)),
                                  [("A", "B"), ("B", "C"), ("A", "C")])
    C, b, offsets = local_constraints(graph, float(data.sum()))
    tau = np.concatenate([marginal(dom, data, r).ravel() for r in graph.regions])
    assert np.abs(C @ tau - b).max() == 0.0
    tau[offsets[1]] += 1.0   # one cell of one region moved: some row must see it
    assert np.abs(C @ tau - b).max() > 0.5


def test_a_step_over_its_memory_limit_is_refused_and_the_summary_says_so():
    """The exact step's size limit is its estimated peak memory (``relaxed_polish.step_bytes``,
    measured by bench/relaxed_exact_step.py).  Over the limit the first-order fit goes on to
    its own stop, the model is still consistent and non-negative, the step is not tried a
    second time, and the model's summary says why."""
    from dpsql.pgm import relaxed_polish

    dom = Domain(list("ABCD"), [4, 3, 3, 2])
    rng = np.random.default_rng(5)
    data = random_data(rng, dom, 300)
    ms = _pairs(dom, data, [0.5, 2.0, 1.0, 0.05, 1.0, 3.0], rng)
    total = float(data.sum())
    small = relaxed_polish.step_bytes(dom.size(("A", "B")), 0) - 1   # below even the cells' bound
    model = fit(dom, ms, method="relaxed", iters=2000, gap=(0.5, 1e-6), total=total,
                exact_after=50, exact_memory=small)
    assert model.fit.polished is None
    assert model.fit.iterations > 50       # refused after 50, the first-order fit went on to its stop
    summary = model.summary()
    assert "the exact step was refused (after 50 iterations: it would need" in summary, summary
    assert "GB of memory" in summary and "the caller's" in summary, summary
    assert "at the end" not in summary, summary   # refused once: its size does not change
    # the first-order fit's own consistency: Convex-GBP run to its final tolerance or sweep limit
    assert model.fit.violation < 1e-4
    assert min(float(t.min()) for t in model.fit.probs) >= 0.0
    # With room, the same release takes the step (the limit is what refused it).
    roomy = fit(dom, ms, method="relaxed", iters=2000, gap=(0.5, 1e-6), total=total, exact_after=50)
    assert roomy.fit.polished is not None, roomy.stopped


def test_the_memory_estimate_grows_with_the_hessian_and_the_limit_follows_the_machine():
    from dpsql.pgm import relaxed_polish as rp

    assert rp.step_bytes(2_000_000, 0) == 2 * rp.step_bytes(1_000_000, 0) > 0
    assert rp.step_bytes(0, 2_000) == 4 * rp.step_bytes(0, 1_000) > 0
    assert rp.memory_limit(123) == 123
    phys = rp.physical_memory()
    if phys is not None:
        assert rp.memory_limit() == int(FitLimits().relaxed_step_memory_fraction * phys)
