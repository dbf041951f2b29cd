"""Issue 36 item 1: one fit interface (``dpsql.pgm.finishers``).

The fit is an ordered list of finishers; ``model.report`` names the one that ran, its
certificate and the refusals before it; options no applicable finisher takes are refused with
a dpsql.Error (they raised TypeError from whichever solver the size picked); every threshold
is a field of ``FitLimits`` and the saved-model key changes with each of them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import Error, ProgrammingError
from dpsql.linalg import Identity, Kron
from dpsql.pgm import Measurement
from dpsql.pgm.auto import fit
from dpsql.pgm.finishers import FINISHERS, FittedModel, fit_key
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.store import load_model, save_model

from pgm_brute import marginal, random_data

GAP = (0.5, 1e-6)


def _pairs(dom, data, cliques, sd, rng):
    out = []
    for c in cliques:
        mu = marginal(dom, data, c).ravel()
        q = Kron([Identity(dom[a]) for a in c])
        out.append(Measurement(c, q, mu + rng.normal(0, sd, mu.size), sd))
    return out


def _chain(seed=0):
    """A 4-attribute chain of pairs: no Kronecker block covers the joint table."""
    dom = Domain(list("ABCD"), [4, 3, 3, 2])
    rng = np.random.default_rng(seed)
    data = random_data(rng, dom, 2_000)
    return dom, _pairs(dom, data, [("A", "B"), ("B", "C"), ("C", "D")], 1.0, rng), float(data.sum())


def _one_block(seed=0):
    """One identity block over both attributes: the dense-block case."""
    dom = Domain(["A", "B"], [5, 4])
    rng = np.random.default_rng(seed)
    data = random_data(rng, dom, 2_000)
    return dom, _pairs(dom, data, [("A", "B")], 1.0, rng), float(data.sum())


def test_options_no_finisher_takes_are_a_dpsql_error_not_a_type_error():
    """damping is Prox-PGM's: on a problem the exact model fits it raised TypeError from
    estimate(); now every exact finisher refuses it and the error names the refusals."""
    dom, ms, total = _chain()
    with pytest.raises(ProgrammingError) as info:
        fit(dom, ms, total=total, damping=0.3)
    assert isinstance(info.value, Error) and info.value.sqlstate == "42000"
    assert "first-order: does not take the option(s) damping" in info.value.detail
    assert "prox-pgm: the exact model is fitted" in info.value.detail
    with pytest.raises(ProgrammingError, match="no finisher applies"):
        fit(dom, ms, total=total, method="relaxed", bogus=1)
    # an option of the path taken is used
    relaxed = fit(dom, ms, total=total, method="relaxed", iters=20, damping=0.3)
    assert relaxed.report.path == "prox-pgm" and relaxed.fit.damping == 0.3


def test_the_report_names_the_path_its_certificate_and_the_refusals():
    dom, ms, total = _one_block()
    dense = fit(dom, ms, total=total, iters=2000, exact_method="adaptive", gap=GAP)
    assert dense.report.path == "dense-block" and dense.solved is not None
    cert = dense.report.certificate
    assert cert.kind == "Frank–Wolfe gap" and cert.certified and cert.value == dense.solved[1]
    assert dense.report.refusals == ()
    assert "finisher: dense-block; Frank–Wolfe gap ≤" in dense.summary()

    dom, ms, total = _chain()
    first = fit(dom, ms, total=total, iters=2000, exact_method="adaptive", gap=GAP)
    assert first.report.path == "first-order" and first.solved is None
    refused = {r.finisher: r.reason for r in first.report.refusals}
    assert list(refused) == ["dense-block", "joint-dual"]
    assert "no Kronecker block covers" in refused["dense-block"]
    assert "face step applies" in refused["joint-dual"]
    assert first.report.certificate.kind == ("face step" if first.polished is not None else "estimated gap")

    # without a gap tolerance the direct solves refuse and say why
    plain = fit(dom, ms, total=total, iters=50, gap=None)
    assert plain.report.path == "first-order"
    assert all(r.reason == "no gap tolerance was given" for r in plain.report.refusals)

    relaxed = fit(dom, ms, total=total, iters=50, limits=FitLimits(capacity=20))
    assert relaxed.report.path in ("residual", "prox-pgm")
    assert all(isinstance(m, FittedModel) for m in (dense, first, plain, relaxed))
    names = [r.finisher for r in relaxed.report.refusals]
    assert names[:3] == ["dense-block", "joint-dual", "first-order"]
    assert all("relaxed model is fitted" in r.reason for r in relaxed.report.refusals[:3])


def test_the_report_survives_the_saved_model(tmp_path):
    dom, ms, total = _chain()
    for limits in (FitLimits(), FitLimits(capacity=20)):
        model = fit(dom, ms, total=total, iters=50, limits=limits)
        save_model(model, tmp_path / "m.npz")
        back = load_model(tmp_path / "m.npz", dom)
        assert back is not None and back.report == model.report


def test_capacity_argument_replaces_the_limit():
    dom, ms, total = _chain()
    assert fit(dom, ms, total=total, iters=5, capacity=20).report.path in ("residual", "prox-pgm")
    assert fit(dom, ms, total=total, iters=5, limits=FitLimits(capacity=20),
               capacity=10**6).report.path == "first-order"


def test_each_limit_changes_the_key():
    base = FitLimits()
    key = fit_key(base)
    assert fit_key(FitLimits()) == key
    for f in dataclasses.fields(FitLimits):
        value = getattr(base, f.name)
        changed = dataclasses.replace(base, **{f.name: value * 2 if value else 1})
        assert fit_key(changed) != key, f.name
    # and the finishers' names and versions are part of it
    assert fit_key(base, FINISHERS[:-1]) != key


def test_limits_are_frozen_and_checked():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FitLimits().capacity = 5           # type: ignore[misc]
    with pytest.raises(ValueError, match="face_step_max_cells"):
        FitLimits(face_step_max_cells=-1)
    assert FitLimits().gap == (0.5, 1e-6)


def test_the_library_defaults_are_the_engines():
    """fit() with no options runs what the engine runs (ModelStore._fit's arguments); it
    ran plain mirror descent for 1,000 iterations without a gap test, which the engine never
    does.  estimate()'s method defaults to the engine's "adaptive" with the L2 loss."""
    from dpsql.engine.config import Config
    from dpsql.pgm.auto import DEFAULT_ITERS
    from dpsql.pgm.estimation import estimate

    assert DEFAULT_ITERS == Config.__dataclass_fields__["fit_iters"].default
    limits = FitLimits()
    for dom, ms, total in (_chain(), _one_block()):
        engine = fit(dom, ms, total=total, iters=DEFAULT_ITERS, exact_method="adaptive",
                     stop="discrepancy", gap=limits.gap, limits=limits)
        default = fit(dom, ms, total=total)
        assert default.report.path == engine.report.path
        for c in sorted(set(engine.measured)):
            np.testing.assert_array_equal(default.marginal(c).values, engine.marginal(c).values)
    dom, ms, total = _chain()
    plain = estimate(dom, ms, total=total, iters=30)
    adaptive = estimate(dom, ms, total=total, iters=30, method="adaptive")
    np.testing.assert_array_equal(plain.marginal(("A", "B")).values, adaptive.marginal(("A", "B")).values)
