"""AIM through the engine: ledger order, restart safety (SIGKILL), config and CLI wiring."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import dpsql
from dpsql.engine import aim as engine_aim
from dpsql.errors import BudgetExhaustedError, ConfigError
from dpsql.privacy import noise

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"
WORKLOAD = ["SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income",
            "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex",
            "SELECT education, income, COUNT(*) FROM adult GROUP BY education, income",
            "SELECT age, COUNT(*) FROM adult WHERE age < 40 GROUP BY age"]
BUDGET = {"epsilon": 1.0, "delta": 1e-6}


def connect(tmp: Path, **kw):
    kw.setdefault("budget", BUDGET)
    return dpsql.connect(CONFIG, user="op", ledger=str(tmp / "aim.ledger"), cache_dir=str(tmp / "cache"),
                         workload=WORKLOAD, fit_iters=150, **kw)


def _run_charges(con, key):
    return [e for e in con.session.engine.ledger.entries()
            if e.kind == "charge" and (e.mechanism or {}).get("aim_run") == key]


@pytest.mark.slow
def test_every_round_is_charged_before_its_values_are_used(tmp_path, monkeypatch):
    con = connect(tmp_path)
    ledger = con.session.engine.ledger
    seen = {"draws": 0, "fits": 0}

    def last_is_open_charge():
        entries = ledger.entries()
        charges = [e for e in entries if e.kind == "charge"]
        released = {e.charge_id for e in entries if e.kind == "release"}
        assert charges and charges[-1].seq not in released, "noise drawn without a fresh charge"
        return charges[-1]

    real_em, real_dg = noise.exponential_mechanism, noise.discrete_gaussian

    def em(*a, **k):
        last_is_open_charge()
        seen["draws"] += 1
        return real_em(*a, **k)

    def dg(sigma2, size, **k):
        charge = last_is_open_charge()
        assert Fraction(charge.mechanism["sigma2"]) == Fraction(sigma2)
        return real_dg(sigma2, size, **k)

    real_fit = engine_aim._Driver.fit

    def fit(self, measured, previous):
        # every value the fit sees is a recorded release of this run
        entries = ledger.entries()
        charges = {e.seq for e in entries if e.kind == "charge"}
        releases = [e for e in entries if e.kind == "release" and e.key.startswith(self.prefix)]
        assert all(r.charge_id in charges for r in releases)
        stored = [(b.clique, y.tobytes()) for r in releases
                  for b, y, _ in engine_aim.rel.unpack(ledger.release(r.key))]
        for clique, y, _ in measured:
            assert (tuple(clique), np.asarray(y, dtype=np.float64).tobytes()) in stored
        seen["fits"] += 1
        return real_fit(self, measured, previous)

    monkeypatch.setattr(noise, "exponential_mechanism", em)
    monkeypatch.setattr(noise, "discrete_gaussian", dg)
    monkeypatch.setattr(engine_aim._Driver, "fit", fit)
    report = con.session.measure(mode="aim")
    assert seen["draws"] == report.rounds - 1 and seen["fits"] >= report.rounds - 1
    charges = _run_charges(con, report.run)
    assert len(charges) == report.rounds
    spent = sum((c.rho for c in charges), Fraction(0))
    rho = Fraction(con.session.engine.workload_rho())
    assert spent == rho == report.rho      # the last round takes exactly what is left (issue 28)
    assert con.session.budget()["total_remaining_rho"] == 0
    assert abs(report.rho_select + report.rho_measure - float(rho)) < 1e-12
    # a second call re-uses every round: nothing spent, no data read
    monkeypatch.setattr(con.session.engine.backend, "count_marginals",
                        lambda *a, **k: pytest.fail("a replay must not read the data"))
    again = con.session.measure(mode="aim")
    assert again.reused and again.rho == 0 and again.selected == report.selected
    assert con.session.measure_cost(mode="aim") == 0.0
    # the model answers from the AIM measurements
    rows = con.cursor().execute("SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income").fetchall()
    assert abs(sum(r[-1] for r in rows) - 48842) < 2000


def test_a_crash_between_charge_and_release_is_completed_under_that_charge(tmp_path, monkeypatch):
    """Issue 34 item 4: the interrupted round used to be counted as lost (charged, never
    released); the restarted run now releases it under that charge, with its σ and ε."""
    con = connect(tmp_path)
    ledger = con.session.engine.ledger
    real = type(ledger).record_release
    calls = {"n": 0}

    def crash(self, charge_id, key, payload):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated crash after the charge")
        return real(self, charge_id, key, payload)

    monkeypatch.setattr(type(ledger), "record_release", crash)
    with pytest.raises(KeyboardInterrupt):
        con.session.measure(mode="aim")
    monkeypatch.setattr(type(ledger), "record_release", real)
    con.close()
    con = connect(tmp_path)
    report = con.session.measure(mode="aim")
    assert report.replayed == 2 and report.lost_rho == 0
    rho = Fraction(con.session.engine.workload_rho())
    charges = _run_charges(con, report.run)
    spent = sum((c.rho for c in charges), Fraction(0))
    assert spent <= rho and rho - spent < rho * Fraction(1, 10**9)
    released = [e.charge_id for e in con.session.engine.ledger.entries() if e.kind == "release"]
    assert sorted(released) == sorted(c.seq for c in charges)      # every charge: one release


_CHILD = textwrap.dedent("""
    import sys, dpsql
    con = dpsql.connect(sys.argv[1], user="op", ledger=sys.argv[2], cache_dir=sys.argv[3],
                        workload=sys.argv[4].split("|"), fit_iters=150,
                        budget={"epsilon": 1.0, "delta": 1e-6})
    def progress(event):
        print("round", event["round"], flush=True)
    con.session.measure(mode="aim", progress=progress)
    print("done", flush=True)
""")


@pytest.mark.slow
def test_sigkill_mid_run_loses_no_charge_and_restart_reuses_released_rounds(tmp_path):
    ledger_path = tmp_path / "aim.ledger"
    args = [sys.executable, "-c", _CHILD, str(CONFIG), str(ledger_path), str(tmp_path / "cache"),
            "|".join(WORKLOAD)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    try:
        for line in child.stdout:
            if line.startswith("round") and int(line.split()[1]) >= 4:
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    con = connect(tmp_path)
    ledger = con.session.engine.ledger
    before = ledger.entries()
    charged_before = [e for e in before if e.kind == "charge"]
    released_before = [e for e in before if e.kind == "release"]
    assert len(released_before) >= 5 and len(charged_before) >= len(released_before)
    report = con.session.measure(mode="aim")
    after = ledger.entries()
    # nothing from before the kill disappeared, and every earlier release was re-used
    assert [e.hash for e in after[:len(before)]] == [e.hash for e in before]
    assert report.replayed == len(released_before)
    charges = _run_charges(con, report.run)
    assert charges[:len(charged_before)] == charged_before
    rho = Fraction(con.session.engine.workload_rho())
    spent = sum((c.rho for c in charges), Fraction(0))
    assert spent == rho and report.rho <= rho


def test_budget_refusal_reads_nothing(tmp_path, monkeypatch):
    con = connect(tmp_path, budget={"rho": 1e-4})
    engine = con.session.engine
    monkeypatch.setattr(engine, "workload_rho", lambda table=None: 1.0)  # the run wants more than exists
    monkeypatch.setattr(engine.backend, "count_marginals",
                        lambda *a, **k: pytest.fail("read data before the budget check"))
    with pytest.raises(BudgetExhaustedError):
        con.session.measure(mode="aim")
    assert engine.ledger.spent() == 0


def test_planner_mode_is_validated(tmp_path):
    with pytest.raises(ConfigError):
        connect(tmp_path, planner={"mode": "magic"})
    con = connect(tmp_path, planner={"mode": "aim", "aim_max_model_cells": 5000})
    assert con.session.engine.config.planner.mode == "aim"
    assert engine_aim.aim_options(con.session.engine, "adult").max_model_cells == 5000
    summary = engine_aim.aim_summary(con.session.engine, "adult")
    assert summary["oneway"] == 5 and summary["rho_select"] > 0
    assert "rows" in con.session.plan().advice
