"""Issue 29 item 2 end to end: a quantile over a binned column is answered with an interval
that holds the bin it reads (not "± 0"), and that interval holds the true quantile of the
unbinned rows; the wire's `median_ci95` is that half-width."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.engine.variance import Z95
from dpsql.privacy import noise

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult"
WORKLOAD = ["SELECT fnlwgt, COUNT(*) FROM adult GROUP BY fnlwgt",
            "SELECT sex, fnlwgt, COUNT(*) FROM adult GROUP BY sex, fnlwgt",
            "SELECT age, COUNT(*) FROM adult GROUP BY age"]
BIN = 50000      # fnlwgt: integer bins of 50,000 values, lo..lo+49,999 (examples/adult/adult.toml)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quantiles")
    c = dpsql.connect(EXAMPLE / "dpsql.toml", user="ana", ledger=str(tmp / "q.ledger"),
                      cache_dir=str(tmp / "cache"), workload=WORKLOAD,
                      budget={"epsilon": 1.0, "delta": 1e-6})
    with pytest.MonkeyPatch.context() as mp:     # seeded noise bits: one fixed release
        mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(29))
        c.session.measure()
    yield c
    c.close()


def _truth(sql):
    with duckdb.connect() as db:
        db.execute(f"CREATE VIEW adult AS SELECT * FROM read_csv_auto('{EXAMPLE / 'adult.csv'}')")
        return {tuple(r[:-1]): r[-1] for r in db.execute(sql).fetchall()}


@pytest.mark.parametrize("level", [0.5, 0.9, 0.1])
def test_quantiles_of_a_binned_column_hold_the_bin_and_the_truth(con, level):
    sql = (f"SELECT sex, percentile_cont({level}) WITHIN GROUP (ORDER BY fnlwgt) FROM adult GROUP BY sex")
    cur = con.cursor().execute(sql)
    truth = _truth(sql)
    for (sex, value), (_, se) in zip(cur.fetchall(), cur.stderr):
        half = Z95 * se
        assert half >= (BIN - 1) / 2 - 1e-6, (sex, value, half)     # "± 0" before
        assert abs(value - truth[(sex,)]) <= half, (sex, value, half, truth[(sex,)])


def test_error_columns_carry_the_quantiles_half_width(con):
    cur = con.cursor()
    cur.execute("SET dpsql.error_columns = 'ci95'")
    try:
        cur.execute("SELECT MEDIAN(fnlwgt) AS median FROM adult")
        (value, ci95), = cur.fetchall()
        assert [d[0] for d in cur.description] == ["median", "median_ci95"]
        assert ci95 >= (BIN - 1) / 2 - 1e-6 and not math.isnan(ci95)
    finally:
        cur.execute("RESET dpsql.error_columns")
