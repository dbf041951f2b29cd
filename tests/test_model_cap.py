"""One default for the model-size cap (issue 36 item 4).

It was written five times with three values: dpsql.toml's ``[planner] max_model_cells``
(2·10⁷, what the engine runs), the planner's ``Caps.model_size`` (10⁸), the fit's
``dpsql.pgm.DEFAULT_CAPACITY`` (10⁷), and AIM's cap twice (engine config and plan/aim.py).
A library caller planning with ``Caps()`` or fitting with ``pgm.fit`` got another cap than
the engine; now every one reads dpsql/triangulation.py."""

from __future__ import annotations

from inspect import signature

from dpsql.engine.config import PlannerOptions
from dpsql.plan.aim import AIMOptions
from dpsql.plan.planner import Caps


def test_the_library_caps_the_model_where_the_engine_does():
    from dpsql import pgm
    from dpsql.pgm.auto import fit
    from dpsql.pgm.estimation import estimate
    from dpsql.pgm.limits import FitLimits

    cap = PlannerOptions().max_model_cells
    assert Caps().model_size == cap
    assert pgm.DEFAULT_CAPACITY == cap
    # the fit's capacity is FitLimits.capacity unless a caller passes one (issue 36 item 1)
    assert FitLimits().capacity == cap
    assert signature(fit).parameters["capacity"].default is None
    assert signature(estimate).parameters["capacity"].default is None


def test_aims_cap_has_one_default():
    assert AIMOptions().max_model_cells == PlannerOptions().aim_max_model_cells
