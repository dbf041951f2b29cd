"""Issue 17: fits on a small joint table with no Kronecker block covering it are solved by
Newton steps along the entropic path (``dpsql.pgm.joint_dual`` via
``estimation._solve_joint``).

nltcs/ranges plans 4-way identity blocks over 16 binary attributes (a 65,536-cell joint, two
32,768-cell cliques): no block covers the joint, so ``polish.solve_clique`` has no
preconditioner, the exact face step is too large (its Hessian bound is over
``FitLimits.face_step_max_nnz``), and the first-order fit took 1,365-3,891 iterations (18-52 s on a quiet
machine, 152-310 s in the suite).  The small analogues here have the same structure; the
references are the brute-force bounded least squares of ``pgm_brute``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import Identity, Kron, Prefix
from dpsql.pgm import Measurement, joint_dual
from dpsql.pgm.auto import fit
from dpsql.pgm.junction_tree import JunctionTree
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.loss import MarginalLoss

from pgm_brute import joint_from_model, loss_full, marginal, solve_full


def _peaked(rng, dom, records, scale=3.0):
    """Counts from a sharply peaked random log-linear model: most cells near 0, as in NLTCS."""
    logits = rng.normal(scale=scale, size=dom.shape)
    p = np.exp(logits - logits.max())
    return rng.multinomial(records, (p / p.sum()).ravel()).reshape(dom.shape).astype(float)


def _four_way(seed, d=10, blocks=16):
    """``blocks`` random 4-way identity marginals over ``d`` binary attributes, σ in [1, 3]."""
    rng = np.random.default_rng(seed)
    names = [f"a{i}" for i in range(d)]
    dom = Domain(names, [2] * d)
    chosen = set()
    while len(chosen) < blocks:
        chosen.add(tuple(sorted(rng.choice(d, 4, replace=False))))
    data = _peaked(rng, dom, 20_000)
    ms = []
    for c in sorted(chosen):
        clique = tuple(names[i] for i in c)
        mu = marginal(dom, data, clique).ravel()
        sd = float(rng.uniform(1.0, 3.0))
        ms.append(Measurement(clique, Kron([Identity(2)] * 4), mu + rng.normal(0, sd, mu.size), sd))
    return dom, ms, float(data.sum())


#: The regime of nltcs: the first-order fit's exact face step is refused for its size
#: (nltcs/ranges' Hessian bound is 6.7·10⁹, far over face_step_max_nnz; these analogues' are not).
#: Only then does the fit take the entropic path.
TIGHT = FitLimits(face_step_max_nnz=0)


def _first_order_only(monkeypatch):
    """The fit as before this solver (no joint solve)."""
    monkeypatch.setattr(joint_dual, "solve_joint_dual", lambda *a, **k: "off")


@pytest.mark.parametrize("seed", [0, 1])
def test_four_way_blocks_without_a_covering_block(seed, monkeypatch):
    dom, ms, total = _four_way(seed)
    model = fit(dom, ms, iters=20000, exact_method="adaptive", gap=(0.5, 1e-6), total=total, limits=TIGHT)
    assert model.solved is not None and model.solved[2] == "dual", model.stopped
    steps, bound = model.solved[0], model.solved[1]
    _, best = solve_full(dom, ms, total)
    got = loss_full(dom, ms, joint_from_model(model.model).ravel())
    # the duality certificate bounds the true gap, and is within the tolerance
    assert got - best <= bound + 1e-7 * (1.0 + best), (got, best, model.stopped)
    assert bound <= 0.5 + 1e-6 * got
    assert steps <= 80

    _first_order_only(monkeypatch)
    # the same budget of (cheaper) first-order iterations ends far above the optimum ...
    old = fit(dom, ms, iters=steps, exact_method="adaptive", gap=(0.5, 1e-6), total=total, limits=TIGHT)
    assert old.solved is None
    assert loss_full(dom, ms, joint_from_model(old.model).ravel()) - best > 10.0
    # ... and converging takes several times as many (233 and 451 on these seeds)
    old = fit(dom, ms, iters=20000, exact_method="adaptive", gap=(0.5, 1e-6), total=total, limits=TIGHT)
    assert len(old.loss) - 1 > 4 * steps


def test_mixed_sizes_and_range_queries():
    """Attributes of 3, 4, 2 and 3 values (complex characters) and prefix factors (the loss's
    Hessian in the coefficients is not diagonal); no block covers the joint."""
    dom = Domain(["A", "B", "C", "D"], [3, 4, 2, 3])
    rng = np.random.default_rng(4)
    data = _peaked(rng, dom, 5_000, scale=2.0)
    total = float(data.sum())
    specs = [(("A", "B", "C"), Kron([Prefix(3), Identity(4), Identity(2)]), 2.0),
             (("C", "B", "D"), Kron([Identity(2), Prefix(4), Identity(3)]), 1.0),
             (("D", "A"), Kron([Prefix(3), Prefix(3)]), 0.5)]
    ms = []
    for clique, q, sd in specs:
        y = np.asarray(q.matvec(marginal(dom, data, clique).ravel()))
        ms.append(Measurement(clique, q, y + rng.normal(0, sd, y.size), sd))
    model = fit(dom, ms, iters=20000, exact_method="adaptive", gap=(0.5, 1e-6), total=total, limits=TIGHT)
    assert model.solved is not None and model.solved[2] == "dual", model.stopped
    _, best = solve_full(dom, ms, total)
    got = loss_full(dom, ms, joint_from_model(model.model).ravel())
    assert got - best <= model.solved[1] + 1e-7 * (1.0 + best), (got, best)
    assert model.solved[1] <= 0.5 + 1e-6 * got


@pytest.mark.parametrize("sizes", [(2, 2, 2, 2, 2), (3, 2, 4, 2, 3)])
def test_loss_in_coefficients_is_the_marginal_loss(sizes):
    """f(Φᴴμ) and Re Φ∇f equal the loss and gradient of MarginalLoss on the joint table."""
    names = list("ABCDE")
    dom = Domain(names, list(sizes))
    rng = np.random.default_rng(2)
    ms = []
    for clique in [("B", "A", "C"), ("C", "D"), ("E",), ("D", "E", "A"), ()]:
        n = int(np.prod([dom[a] for a in clique])) if clique else 1
        q = Kron([Prefix(dom[a]) for a in clique]) if len(clique) > 1 else np.eye(n)
        ms.append(Measurement(clique, q, rng.normal(size=q.shape[0]) * 5, float(rng.uniform(0.5, 2))))
    problem = joint_dual._Problem(names, sizes, ms)
    mu = rng.random(sizes) * 10
    c, _ = problem.coefficients(mu.ravel())
    value, gc = problem.loss(c)
    tree = JunctionTree(names, dict(zip(names, sizes)), [tuple(names)])
    want, grads = MarginalLoss(tree, ms)([mu])
    assert np.isclose(value, want, rtol=1e-10)
    assert np.allclose(problem.cells(gc), grads[0].ravel(), rtol=1e-9, atol=1e-9 * np.abs(grads[0]).max())


def test_maximum_entropy_among_the_minimisers():
    """A chain A–B–C measured on (A, B) and (B, C): the minimisers share those marginals, and
    the path's limit is the maximum-entropy one, A ⟂ C | B (thesis §4.2)."""
    dom = Domain(["A", "B", "C"], [3, 2, 4])
    rng = np.random.default_rng(9)
    data = _peaked(rng, dom, 3_000, scale=1.0)
    ms = []
    for clique in [("A", "B"), ("B", "C")]:
        mu = marginal(dom, data, clique).ravel()
        ms.append(Measurement(clique, np.eye(mu.size), mu + rng.normal(0, 0.5, mu.size), 0.5))
    model = fit(dom, ms, iters=20000, exact_method="adaptive", gap=(1e-3, 1e-9), total=float(data.sum()), limits=TIGHT)
    assert model.solved is not None and model.solved[2] == "dual", model.stopped
    p = joint_from_model(model.model)
    ab, bc, b = p.sum(axis=2), p.sum(axis=0), p.sum(axis=(0, 2))
    independent = ab[:, :, None] * bc[None, :, :] / b[None, :, None]
    assert np.allclose(p, independent, atol=1e-6 * p.sum())


def test_over_the_limits_the_first_order_fit_runs(monkeypatch):
    dom, ms, total = _four_way(0, d=8, blocks=6)
    model = fit(dom, ms, iters=3000, exact_method="adaptive", gap=(0.5, 1e-6), total=total,
                limits=FitLimits(face_step_max_nnz=0, joint_dual_max_features=10))
    assert model.solved is None
    assert "converged" in model.stopped


def test_used_only_where_the_face_step_is_refused():
    """A small problem keeps the first-order fit and its exact face step; the nltcs/ranges
    structure (16 binary attributes, 4-way identity blocks, no covering block) does not."""
    dom, small, total = _four_way(0, d=8, blocks=6)
    model = fit(dom, small, iters=3000, exact_method="adaptive", gap=(0.5, 1e-6), total=total)
    assert model.solved is None and model.polished is not None, model.stopped
    assert not joint_dual.face_step_refused(model.tree, small, FitLimits())
    names = [f"a{i}" for i in range(16)]
    rng = np.random.default_rng(0)
    cliques = {tuple(sorted(rng.choice(names, 4, replace=False))) for _ in range(60)}
    ms = [Measurement(c, Kron([Identity(2)] * 4), np.zeros(16), 5.0) for c in cliques]
    tree = JunctionTree(names, dict.fromkeys(names, 2), list(cliques))
    assert joint_dual.face_step_refused(tree, ms, FitLimits())


def test_features_are_the_characters_inside_measured_cliques():
    """K = |{k : supp(k) ⊆ some measured clique}|: for 4-way binary blocks, the union of their
    subsets (NLTCS/ranges: 460 of 65,536)."""
    dom, ms, _ = _four_way(0, d=8, blocks=5)
    subsets = set()
    for m in ms:
        for r in range(len(m.clique) + 1):
            subsets.update(frozenset(s) for s in itertools.combinations(m.clique, r))
    problem = joint_dual._Problem(dom.attributes, dom.shape, ms)
    assert problem.K == len(subsets)
