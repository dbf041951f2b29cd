"""Every charge has exactly one release, whatever step of a measurement a crash interrupts
(issue 34 item 4).

A SIGKILL after the durable charge and before the release was recorded used to leave a charge
without a release, and the next ``dpsql measure`` charged again (0.000321 → 0.000642; with the
default configuration the table could then never be measured again).  Each test kills
``dpsql measure`` at one named step (``DPSQL_KILL_AT``, ``dpsql.engine.measuring.kill_point``),
runs it again, and checks the ledger: one charge, one release of that charge, spent = its cost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import dpsql
from age_sex import write_table
from dpsql.engine.measuring import KILL_AT_ENV

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
[dpsql]
ledger = "t.ledger"
cache_dir = "cache"

[budget]
epsilon = 1.0
delta = 1e-6

[tables.t]
domain = "d.toml"

[workload]
queries = ["SELECT age, sex, COUNT(*) FROM t GROUP BY age, sex"]
"""


def _make(tmp: Path) -> Path:
    write_table(tmp, 50)
    (tmp / "dpsql.toml").write_text(CONFIG)
    return tmp / "dpsql.toml"


def _measure(config: Path, kill_at: str | None = None, mode: str = "hdmm") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(KILL_AT_ENV, None)
    if kill_at:
        env[KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "dpsql.cli", "measure", "--config", str(config), "--yes",
                           "--no-fit", "--mode", mode], env=env, capture_output=True, text=True, timeout=300)


def _ledger(config: Path):
    con = dpsql.connect(str(config))
    try:
        entries = con.session.engine.ledger.entries()
        return ([e for e in entries if e.kind == "charge"], [e for e in entries if e.kind == "release"],
                con.session.engine.ledger.spent(None))
    finally:
        con.close()


@pytest.mark.parametrize("step, charged_before_crash", [
    ("counted", False),    # counted, nothing charged yet
    ("charged", True),     # charged (fsync'd), no noise drawn
    ("drawn", True),       # noise drawn, never written
    ("released", True),    # release recorded, the process dies before using it
])
def test_a_crash_at_any_step_ends_with_one_charge_and_one_release(tmp_path, step, charged_before_crash):
    config = _make(tmp_path)
    crashed = _measure(config, kill_at=step)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    charges, releases, _ = _ledger(config)
    assert len(charges) == (1 if charged_before_crash else 0)
    assert len(releases) == (1 if step == "released" else 0)
    if step == "charged":     # the operator sees it
        budget = subprocess.run([sys.executable, "-m", "dpsql.cli", "budget", "--config", str(config)],
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                                timeout=300)
        assert "charged, not released" in budget.stdout and f"#{charges[0].seq} t workload" in budget.stdout, \
            budget.stdout

    again = _measure(config)
    assert again.returncode == 0, again.stderr
    charges, releases, spent = _ledger(config)
    assert len(charges) == 1 and len(releases) == 1, (charges, releases)
    assert releases[0].charge_id == charges[0].seq
    assert spent == charges[0].rho                      # paid once
    if step in ("charged", "drawn"):
        assert "nothing spent now" in again.stdout, again.stdout
    elif step == "released":
        assert "already measured" in again.stdout, again.stdout

    third = _measure(config)                            # and from now on it is re-used
    assert third.returncode == 0 and "already measured" in third.stdout, third.stdout
    assert _ledger(config)[2] == spent


@pytest.mark.parametrize("step", ["charged", "drawn"])
def test_aim_completes_the_interrupted_round_under_its_charge(tmp_path, step):
    """AIM's rounds (``dpsql.engine.aim``): killed after a round's charge, the restarted run
    replays nothing twice, releases that round under its charge and loses nothing."""
    config = _make(tmp_path)
    crashed = _measure(config, kill_at=step, mode="aim")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    charges, releases, _ = _ledger(config)
    assert len(charges) == 1 and releases == []        # the first round: charged, never released
    again = _measure(config, mode="aim")
    assert again.returncode == 0, again.stderr
    assert "lost" not in again.stdout, again.stdout
    charges, releases, spent = _ledger(config)
    assert sorted(r.charge_id for r in releases) == [c.seq for c in charges]   # one release each
    assert spent == sum(c.rho for c in charges)


def test_the_measure_policy_completes_an_interrupted_measurement_under_its_charge(tmp_path, monkeypatch):
    """An analyst's on-demand measurement interrupted after its charge (here an exception in
    place of the SIGKILL) is completed when the query is asked again: no second charge."""
    config = _make(tmp_path)
    config.write_text(CONFIG + '\n[budget.per_user]\nepsilon = 1.0\n\n[policy]\nunsupported = "measure"\n'
                      'epsilon = 0.5\nallow_spend = true\n')
    con = dpsql.connect(str(config))
    ledger = con.session.engine.ledger
    real = type(ledger).record_release

    def crash(self, charge_id, key, payload):
        raise KeyboardInterrupt("simulated crash after the charge")

    monkeypatch.setattr(type(ledger), "record_release", crash)
    sql = "SELECT sex, COUNT(*) FROM t GROUP BY sex"
    with pytest.raises(KeyboardInterrupt):
        con.cursor().execute(sql)
    monkeypatch.setattr(type(ledger), "record_release", real)
    con.close()
    charges, releases, spent = _ledger(config)
    assert len(charges) == 1 and releases == [] and spent > 0
    con = dpsql.connect(str(config))
    cur = con.cursor().execute(sql)
    assert cur.cost == 0 and cur.fetchall()            # answered, nothing spent now
    con.close()
    charges, releases, again = _ledger(config)
    assert len(charges) == 1 and [r.charge_id for r in releases] == [charges[0].seq] and again == spent
