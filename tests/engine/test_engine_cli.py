"""The `dpsql` command line, run as a user would (a subprocess per command)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"


def run(*args, cwd=None, input=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True, timeout=600)


def test_init_drafts_schema_only_config(tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text("age,name,score\n31,Ann,2.5\n45,Bob,3.0\n")
    r = run("init", str(csv), "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    domain = (tmp_path / "people.domain.toml").read_text()
    assert 'type = "integer"' in domain and 'type = "categorical"' in domain and 'type = "numeric"' in domain
    # nothing read off the rows: no value of the data appears in the draft
    for value in ("31", "45", "Ann", "Bob", "2.5"):
        assert value not in domain
    assert "PUBLIC" in domain
    again = run("init", str(csv), "-o", str(tmp_path / "dpsql.toml"))
    assert again.returncode == 2 and "--force" in again.stderr


@pytest.fixture()
def config(tmp_path):
    """The adult example with a temp ledger (the example's paths are absolute here)."""
    text = CONFIG.read_text()
    text = text.replace('ledger = "adult.ledger"', f'ledger = "{tmp_path / "adult.ledger"}"')
    text = text.replace('cache_dir = ".dpsql-cache"', f'cache_dir = "{tmp_path / "cache"}"')
    text = text.replace('domain = "adult.toml"', f'domain = "{CONFIG.parent / "adult.toml"}"')
    text = text.replace('source = { csv = "adult.csv" }', f'source = {{ csv = "{CONFIG.parent / "adult.csv"}" }}')
    text = text.replace('files = ["dashboard.sql"]', 'queries = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex", '
                        '"SELECT race, COUNT(*) FROM adult GROUP BY race"]')
    path = tmp_path / "dpsql.toml"
    path.write_text(text)
    return path


def test_plan_measure_query_budget(config):
    r = run("plan", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert "expected RMSE" in r.stdout and "baseline" in r.stdout
    # the per-query table (issue 16): std err, baseline, ratio, floor, weight per query
    assert "std err" in r.stdout and "ratio" in r.stdout and "floor" in r.stdout
    assert "SELECT race, COUNT(*) FROM adult GROUP BY race" in r.stdout
    r = run("measure", "--config", str(config), input="no\n")
    assert r.returncode == 1 and "nothing spent" in r.stdout
    r = run("budget", "--config", str(config))
    assert "spent rho = 0" in r.stdout
    r = run("measure", "--config", str(config), "--yes")
    assert r.returncode == 0, r.stderr
    assert "spent rho" in r.stdout
    r = run("query", "--config", str(config), "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    assert r.returncode == 0, r.stderr
    assert "Female" in r.stdout and "±" in r.stdout and "(2 rows)" in r.stdout
    r = run("query", "--config", str(config), "SELECT * FROM adult")
    assert r.returncode == 2 and "42501" in r.stderr and "HINT" in r.stderr
