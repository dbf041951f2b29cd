"""Issue 35 (wide tables): Problem 2 solved by residual reconstruction (GReM-LNN,
``dpsql.pgm.residual_fit``) on measurements in the marginal algebra — identity marginals, a
total and ResidualPlanner's integer residual blocks.

References are independent of the module: least squares over the whole (small) domain from the
dense design matrix (``pgm_brute.design``), and Problem 2 over the local polytope by
bounded-variable least squares with the equalities enforced by multipliers
(``test_relaxed_polish._brute_problem_2``, the relaxed exact step's oracle).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import Explicit, Identity, Kron, Prefix
from dpsql.pgm import Measurement
from dpsql.pgm.auto import ExactModel, fit
from dpsql.pgm.measurement import estimate_total
from dpsql.pgm.relaxed_model import RelaxedModel
from dpsql.pgm.residual_fit import residual_form
from dpsql.pgm.store import load_model, save_model
from dpsql.plan.algebra import residual_factor

from pgm_brute import design, marginal, random_data
from test_relaxed_polish import _brute_problem_2


def _factor(n: int, kind: str):
    return Identity(n) if kind == "I" else Explicit(residual_factor(n))


def _norm(n: int, kind: str) -> float:
    """The factor's root-mean-square singular value (ResidualPlanner weighs its blocks so)."""
    return 1.0 if kind == "I" else float(np.sqrt(np.sum(residual_factor(n) ** 2) / (n - 1)))


def _release(dom: Domain, data, rng, sigma: float, identity_pairs=(("A", "B"),)):
    """Every pair measured by a residual block R_a ⊗ R_b (an identity marginal for
    ``identity_pairs``), every attribute by R_a, and the total by one identity marginal's
    ∅ part: the kinds of blocks ResidualPlanner releases, with unequal noise."""
    out = []
    for k, (a, b) in enumerate(itertools.combinations(dom.attributes, 2)):
        kind = "I" if (a, b) in identity_pairs else "R"
        q = Kron([_factor(dom[a], kind), _factor(dom[b], kind)])
        mu = marginal(dom, data, (a, b)).ravel()
        y = np.asarray(q.matvec(mu), dtype=float)
        sd = sigma * (1.0 + 0.5 * k) * _norm(dom[a], kind) * _norm(dom[b], kind)
        out.append(Measurement((a, b), q, y + rng.normal(0, sd, y.size), sd))
    for a in dom.attributes:
        q = _factor(dom[a], "R")
        y = np.asarray(q.matvec(marginal(dom, data, (a,)).ravel()), dtype=float)
        sd = sigma * _norm(dom[a], "R")
        out.append(Measurement((a,), q, y + rng.normal(0, sd, y.size), sd))
    return out


def _setup(seed: int, records: int = 40, sigma: float = 2.0):
    dom = Domain(list("ABCD"), [3, 4, 2, 3])
    rng = np.random.default_rng(seed)
    data = random_data(rng, dom, records)
    return dom, data, _release(dom, data, rng, sigma)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_least_squares_marginals_equal_the_full_domain_least_squares(seed):
    dom, _, ms = _setup(seed)
    A, b = design(dom, ms)
    x = np.linalg.lstsq(A, b, rcond=None)[0]
    pairs = list(itertools.combinations(dom.attributes, 2))
    form = residual_form(dom, ms)
    for pair, got in zip(pairs, form.least_squares(pairs)):
        want = marginal(dom, x.reshape(dom.shape), pair)
        np.testing.assert_allclose(got, want, atol=1e-8 * x.sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_is_the_optimum_of_problem_2(seed):
    """Sparse data (40 records over 72 cells) and noise of σ ≥ 2, so that non-negativity
    binds: the tables are the optimum of the QP over the local polytope with the total at its
    least-squares value — what the relaxed fit solves — and exactly consistent."""
    dom, _, ms = _setup(seed)
    total = estimate_total(ms)[0]
    model = fit(dom, ms, method="residual", gap=(1e-6, 0.0), iters=5000)
    assert isinstance(model, RelaxedModel) and model.fit.method == "residual"
    assert "certified" in model.stopped, model.stopped
    graph = model.graph
    want, best = _brute_problem_2(graph, ms, total)
    got = [np.ravel(model.marginal(r).values) for r in graph.regions]
    for r, g, w in zip(graph.regions, got, want):
        assert np.abs(g - w).max() < 1e-4 * total, (r, np.abs(g - w).max())
    assert min(float(g.min()) for g in got) >= 0.0
    assert abs(model.total - total) < 1e-9 * total
    # it does bind: least squares has negative cells
    assert min(float(t.min()) for t in residual_form(dom, ms).least_squares(graph.maximal())) < 0


def test_answers_are_consistent_and_match_the_relaxed_fit():
    dom, _, ms = _setup(3)
    model = fit(dom, ms, method="residual")
    for a in dom.attributes:
        tables = [model.marginal(r).values.sum(axis=tuple(i for i, x in enumerate(r) if x != a))
                  for r in model.graph.maximal() if a in r]
        for t in tables[1:]:
            np.testing.assert_allclose(t, tables[0], atol=1e-9 * model.total)
    for r in model.graph.maximal():
        assert model.marginal(r).values.min() >= 0
        assert abs(model.marginal(r).values.sum() - model.total) < 1e-9 * model.total
    q = Kron([Identity(3), Prefix(4), Explicit(np.ones((1, 2))), Explicit(np.ones((1, 3)))])
    np.testing.assert_allclose(model.answer(q), np.ravel(
        np.cumsum(model.marginal(("A", "B")).values, axis=1)), atol=1e-9 * model.total)
    relaxed = fit(dom, ms, method="relaxed", iters=3000, gap=(0.5, 1e-6))
    for r in model.graph.regions:
        np.testing.assert_allclose(model.marginal(r).values, relaxed.marginal(r).values,
                                   atol=0.05 * np.sqrt(model.total))


def test_auto_chooses_the_residual_reconstruction_only_where_it_applies():
    dom, data, ms = _setup(4)
    # the junction tree fits: exact, as before
    assert isinstance(fit(dom, ms, iters=50), ExactModel)
    # over the capacity: the relaxed problem, solved by residual reconstruction
    model = fit(dom, ms, capacity=10, gap=(0.5, 1e-6))
    assert isinstance(model, RelaxedModel) and model.fit.method == "residual"
    assert "residual reconstruction" in model.summary()
    # a range factor mixes an attribute's total with its differences: Prox-PGM as before
    rng = np.random.default_rng(0)
    q = Kron([Prefix(4), Identity(2)])
    y = np.asarray(q.matvec(marginal(dom, data, ("B", "C")).ravel()), dtype=float)
    mixed = ms + [Measurement(("B", "C"), q, y + rng.normal(0, 1.0, y.size), 1.0)]
    model = fit(dom, mixed, capacity=10, iters=50)
    assert isinstance(model, RelaxedModel) and model.fit.method == "prox-pgm"
    assert "no residual reconstruction" in model.reason
    with pytest.raises(ValueError, match="residual"):
        fit(dom, mixed, method="residual")


def test_saved_and_loaded(tmp_path):
    dom, _, ms = _setup(5)
    model = fit(dom, ms, capacity=10, gap=(0.5, 1e-6))
    save_model(model, tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz", dom)
    assert isinstance(back, RelaxedModel) and back.fit.method == "residual"
    for r in model.graph.regions:
        np.testing.assert_array_equal(back.marginal(r).values, model.marginal(r).values)
    assert "residual reconstruction" in back.summary()
    # a later relaxed fit can warm-start from it (no Convex-GBP messages to reuse)
    again = fit(dom, ms, method="relaxed", warm_start=back, iters=20)
    assert isinstance(again, RelaxedModel)
