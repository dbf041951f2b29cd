"""Issue 28 item 5: a full spend leaves exactly 0, and a measurement whose share would only
release noise is refused before any data is read.

Before: a workload measurement charged its calibrated cost, ~1e-9 below its share, so after
spending the whole budget ρ ≈ 2.4e-11 was shown as "left", and ``dpsql measure --increment``
spent it on answers such as ``9,691 ± 280,822``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"
SEX = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
RACE = "SELECT race, COUNT(*) FROM adult GROUP BY race"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_full_spend_leaves_exactly_zero_and_no_increment(adult_config):
    path = adult_config(queries=[SEX], table_options={"rows": 48842})
    r = cli("measure", "--yes", "--no-fit", "--config", str(path))
    assert r.returncode == 0, r.stderr
    con = dpsql.connect(path, user="op")
    b = con.session.budget()
    assert b["total_remaining_rho"] == 0 and b["total_spent_rho"] == con.session.engine.config.budget.rho
    con.close()
    r = cli("budget", "--config", str(path))
    assert r.returncode == 0, r.stderr
    assert "total: spent rho = 0.024356, remaining rho = 0 (epsilon = 0 " in r.stdout, r.stdout
    # the workload grows; nothing is left to measure it with, and nothing is spent trying
    text = path.read_text()
    assert f'queries = ["{SEX}"]' in text
    path.write_text(text.replace(f'queries = ["{SEX}"]', f'queries = ["{SEX}", "{RACE}"]'))
    before = dpsql.connect(path, user="op").session.engine.ledger.entries()
    r = cli("measure", "--increment", "--yes", "--no-fit", "--config", str(path))
    assert r.returncode != 0 and "no budget is left" in r.stderr + r.stdout, r.stdout + r.stderr
    assert dpsql.connect(path, user="op").session.engine.ledger.entries() == before


class NoReads:
    """A backend that fails the test if the rows are read."""

    def __init__(self, backend):
        self._backend = backend

    def count_marginals(self, *args, **kwargs):
        raise AssertionError("a refused measurement read the data")

    def __getattr__(self, name):
        return getattr(self._backend, name)


@pytest.mark.parametrize("declared", [True, False])
def test_a_share_too_small_to_answer_is_refused_before_reading_data(tmp_path, declared):
    tables = None
    if not declared:   # the adult table without its public size: judged by the total budget
        tables = {"adult": {"domain": str(CONFIG.parent / "adult.toml"),
                            "source": {"csv": str(CONFIG.parent / "adult.csv")}}}
    cfg = load_config(CONFIG, ledger=str(tmp_path / "t.ledger"), cache_dir=str(tmp_path / "cache"),
                      budget={"epsilon": 1.0, "delta": 1e-6}, workload={"queries": [SEX], "epsilon": 0.5},
                      tables=tables)
    engine = Engine(cfg)
    engine.measure("adult")
    engine.backend = engine.measuring.backend = NoReads(engine.backend)   # the measurer counts
    entries = engine.ledger.entries()
    tiny = Fraction(24, 10**12)       # the residue the float charge used to leave
    with pytest.raises(dpsql.UselessMeasurementError) as info:
        engine.measure_increment("adult", tiny, [SEX, RACE])
    err = info.value
    assert isinstance(err, dpsql.BudgetExhaustedError) and err.sqlstate == "53P01"
    assert err.expected_error > 100_000 and f"±{err.expected_error:,.0f}" in err.message
    assert ("48,842 rows" in err.message) == declared and err.hint
    with pytest.raises(dpsql.UselessMeasurementError):   # the preview refuses as well
        engine.spend_preview("adult", engine.increment_strategy("adult", tiny, [SEX, RACE]), tiny,
                             engine.WORKLOAD_PRINCIPAL, "workload-increment")
    assert engine.ledger.entries() == entries             # nothing spent
    # a share that gives useful answers is still measured, and charged exactly its share
    engine.backend = engine.measuring.backend = engine.backend._backend
    left = engine.ledger.remaining(None)
    report = engine.measure_increment("adult", left, [SEX, RACE])
    assert report.rho == left and engine.ledger.remaining(None) == 0
    engine.backend.close()


def test_the_demo_never_prints_a_whole_budget_spend_above_the_total():
    """The demo printed "spent rho = 0.024356" and then "budget left: rho = 0 of 0.024355"."""
    from fractions import Fraction

    from dpsql.demo import _spent
    from dpsql.privacy.accountant import format_rho

    total = Fraction(7020130496958621, 288230376151711744)
    assert _spent(total, total) == f"{format_rho(total, 'down', 5)}, the whole budget"
    part = total / 3
    assert float(_spent(part, total)) >= float(part)   # a partial spend still rounds up
