"""A column with tens of thousands of cells, end to end: plan → measure → answer (issue 16).

Reproduced: declaring an integer column ``lo = 0, hi = 99999`` made ``dpsql plan`` fail
with "refusing to materialise a 100000x100000 query matrix"; the planner, the lattice
blocks of the measure step and the standard errors all formed n×n matrices over it.
Here a 6,000-cell column (above the planner's 4,096-cell dense limit; a 100,000-cell
column is planned in ``bench/planner.py --parts scale``: measuring it end to end in a test
would spend its time building the measurement SQL's CASE over every cell) is planned,
measured and answered at a
near-infinite budget, where every answer must equal DuckDB's.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql import testing
from measured import measured

N_CELLS = 6_000
QUERIES = [
    "SELECT COUNT(*) FROM people WHERE income BETWEEN 1200 AND 3000",
    "SELECT sex, COUNT(*) FROM people WHERE income > 3600 GROUP BY sex",
    "SELECT sex, AVG(income) FROM people GROUP BY sex",
    "SELECT COUNT(*) FROM people WHERE income < 600",
    "SELECT age, COUNT(*) FROM people GROUP BY age",
]


def write_domain(tmp) -> None:
    # the income of the fine-column tests with an age of 18..89 (72 cells: the message below)
    testing.write_domain(tmp / "people.toml", "people", testing.income_columns(N_CELLS, age=(18, 89)),
                         source={"csv": "people.csv"})


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("large")
    rng = np.random.default_rng(7)
    rows = 3000
    income = np.minimum(N_CELLS - 1, rng.lognormal(7.2, 0.8, rows).astype(int))
    with open(tmp / "people.csv", "w") as f:
        f.write("income,sex,age\n")
        for a, b, c in zip(income, rng.choice(["F", "M"], rows), rng.integers(18, 90, rows)):
            f.write(f"{a},{b},{c}\n")
    write_domain(tmp)
    config = {
        "dpsql": {"ledger": str(tmp / "people.ledger"), "cache_dir": str(tmp / "cache")},
        "budget": {"epsilon": 1e7, "delta": 1e-6},
        "tables": {"people": {"domain": str(tmp / "people.toml"),
                              "source": {"csv": str(tmp / "people.csv")}}},
        "workload": {"queries": QUERIES},
    }
    yield from measured(config, tmp)


@pytest.mark.slow
def test_plan_uses_thin_factors_over_the_large_column(people):
    _, report, _ = people
    assert math.isfinite(report.rmse) and report.rmse < report.baseline_rmse
    assert not report.flagged
    for b in report.strategy.kron_blocks:
        assert b.factors[0].shape[0] <= 8          # a few rows over 6,000 cells


@pytest.mark.slow
@pytest.mark.parametrize("sql", QUERIES[:4])
def test_answers_equal_duckdb_at_a_huge_budget(people, sql):
    con, _, tmp = people
    got = sorted(con.cursor().execute(sql).fetchall())
    ref = duckdb.connect()
    want = sorted(ref.execute(sql.replace("FROM people", f"FROM '{tmp / 'people.csv'}'")).fetchall())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[:-1] == w[:-1]
        assert g[-1] == pytest.approx(w[-1], rel=1e-3, abs=0.5)


def test_a_marginal_over_the_cap_names_its_columns_and_query(tmp_path):
    # Reproduced (issue 16): the refusal named the cap but not the column or the query.
    (tmp_path / "people.csv").write_text("income,sex,age\n1,F,20\n")
    write_domain(tmp_path)
    wide = "SELECT age, COUNT(*) FROM people WHERE income BETWEEN 100 AND 2000 GROUP BY age"
    config = {"dpsql": {"ledger": str(tmp_path / "p.ledger"), "cache_dir": str(tmp_path / "cache")},
              "budget": {"epsilon": 1.0, "delta": 1e-6},
              "planner": {"max_clique_cells": 100_000},
              "tables": {"people": {"domain": str(tmp_path / "people.toml"),
                                    "source": {"csv": str(tmp_path / "people.csv")}}},
              "workload": {"queries": ["SELECT sex, COUNT(*) FROM people WHERE income > 3600 GROUP BY sex",
                                       wide]}}
    con = dpsql.connect(config, user="tester")
    try:
        with pytest.raises(dpsql.Error) as info:
            con.session.plan()
    finally:
        con.close()
        dpsql.dbapi._engines.clear()
    message = str(info.value)
    assert f"income ({N_CELLS:,}) x age (72)" in message
    assert wide in message
    assert "max_clique_cells" in info.value.hint
