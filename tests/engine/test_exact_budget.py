"""Issue 28 item 4: configured budgets reach the engine exactly, rounded toward privacy.

Before, ``BudgetSpec.parse`` kept ``float(epsilon_delta_to_rho(ε, δ))``: the float nearest to
the exact ρ, above it for 22 of 32 common (ε, δ) pairs, and the ledger's total and per-user
caps were that float.  Now every configured ρ is a Fraction never above the exact one.
"""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.privacy.accountant import epsilon_delta_to_rho

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "adult" / "dpsql.toml"
SQL = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"


def _budgets(eps: float, delta: float) -> dict:
    """Every place dpsql.toml takes a budget, at ε, ε/2, ε/3, ε/5 and one δ."""
    return dict(budget={"epsilon": eps, "delta": delta, "per_user": {"epsilon": eps / 2},
                        "users": {"bob": {"epsilon": eps / 3}}},
                workload={"queries": [SQL], "epsilon": eps / 5},
                policy={"unsupported": "measure", "epsilon": eps / 5})


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(eps=st.floats(0.01, 30.0), log10_delta=st.floats(2.0, 14.0))
def test_configured_rho_never_exceeds_the_exact_conversion(eps, log10_delta):
    delta = 10.0 ** -log10_delta
    cfg = load_config(CONFIG, ledger="unused.ledger", **_budgets(eps, delta))
    specs = {"total": (cfg.budget, eps), "per_user": (cfg.default_user_budget, eps / 2),
             "bob": (cfg.user_budgets["bob"], eps / 3), "workload": (cfg.workload_budget, eps / 5),
             "query": (cfg.query_budget, eps / 5)}
    for name, (spec, epsilon) in specs.items():
        exact = epsilon_delta_to_rho(epsilon, delta)
        assert Fraction(spec.rho) <= exact, (name, epsilon, delta, spec.rho, exact)
        assert isinstance(spec.rho, Fraction), name   # exact, not a float near it


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-6), (0.3, 1e-9), (7.0, 1e-5)])
def test_ledger_caps_and_workload_share_are_the_exact_rho(eps, delta):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(CONFIG, ledger=str(Path(tmp) / "t.ledger"), cache_dir=str(Path(tmp) / "cache"),
                          **_budgets(eps, delta))
        engine = Engine(cfg)
        try:
            assert engine.ledger.total_rho == epsilon_delta_to_rho(eps, delta)
            assert engine.ledger.remaining("alice") == epsilon_delta_to_rho(eps / 2, delta)
            assert engine.ledger.remaining("bob") == epsilon_delta_to_rho(eps / 3, delta)
            assert engine.workload_rho() == epsilon_delta_to_rho(eps / 5, delta)
        finally:
            engine.backend.close()


@pytest.mark.parametrize("value", [0.1, 0.3, 0.7, 1e-3, 2.5, 3])
def test_a_configured_rho_is_read_toward_privacy(value):
    """``rho = 0.1`` stands for 1/10, stored as a binary64 slightly above it: the budget is
    never more than either reading."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(CONFIG, ledger=str(Path(tmp) / "t.ledger"),
                          budget={"rho": value, "per_user": value})
    for spec in (cfg.budget, cfg.default_user_budget):
        assert spec.rho <= Fraction(str(value)) and spec.rho <= Fraction(value)
        assert spec.rho == min(Fraction(str(value)), Fraction(value))
