"""Every charge has exactly one release, whatever step of a measurement a crash interrupts
(issue 34 item 4).

A SIGKILL after the durable charge and before the release was recorded used to leave a charge
without a release, and the next ``dpsql measure`` charged again (0.000321 → 0.000642; with the
default configuration the table could then never be measured again).  Each test kills
``dpsql measure`` at one named step (``DPSQL_KILL_AT``, ``dpsql.engine.engine.kill_point``),
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
from dpsql.engine.engine import KILL_AT_ENV

ROOT = Path(__file__).resolve().parents[2]

DOMAIN = """
[tables.t]
source = { csv = "t.csv" }

[tables.t.columns.age]
type = "integer"
lo = 17
hi = 90
bin_width = 10

[tables.t.columns.sex]
type = "categorical"
labels = ["Female", "Male"]
"""

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
    rows = [f"{17 + (i * 7) % 70},{['Female', 'Male'][i % 2]}" for i in range(50)]
    (tmp / "t.csv").write_text("\n".join(["age,sex"] + rows) + "\n")
    (tmp / "d.toml").write_text(DOMAIN)
    (tmp / "dpsql.toml").write_text(CONFIG)
    return tmp / "dpsql.toml"


def _measure(config: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(KILL_AT_ENV, None)
    if kill_at:
        env[KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "dpsql.cli", "measure", "--config", str(config), "--yes",
                           "--no-fit"], env=env, capture_output=True, text=True, timeout=300)


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
