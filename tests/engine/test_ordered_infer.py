"""Questions the workload did not cover over a fine ordered column (issue 35 item 4), under
``policy = "infer"``: a TIME column to the second (64,800 cells and NULL) whose release is a
CDF for a quantile, measured at a huge budget.

Before: both failed with "refusing to materialise a 64801x64801 query matrix": a GROUP BY of
the column's values (a ``Bucket`` of 64,801 rows, not answered by the ordered release) went
to the model, and the range of an inferred answer (``engine.bounds``) formed every query
factor densely, a quantile's 64,801 CDF rows too.  Now the ordered release answers the first
cell by cell, equal to DuckDB's count with a finite standard error, and the second is the
model's guess with a range computed from the factors' structure.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql import linalg
from dpsql.engine.bounds import _row_extremes

ROWS = 4001


def _setup(tmp: Path) -> dict:
    rng = np.random.default_rng(11)
    seconds = np.clip(rng.normal(15 * 3600, 3 * 3600, ROWS).astype(np.int64), 6 * 3600, 24 * 3600 - 1)
    # a cluster of rows in one minute: the GROUP BY below reads non-zero cells
    seconds[:40] = 12 * 3600 + rng.integers(0, 30, 40)
    sex = rng.choice(["F", "M"], ROWS)
    (tmp / "t.csv").write_text("tm,sex\n" + "\n".join(
        f"{dt.time(s // 3600, s // 60 % 60, s % 60).isoformat()},{x}" for s, x in zip(seconds, sex)) + "\n")
    (tmp / "d.toml").write_text("""
[tables.t.columns.tm]
type = "time"
lo = 06:00:00
hi = 23:59:59.999999
bin = "second"
nullable = true
[tables.t.columns.sex]
type = "categorical"
labels = ["F", "M"]
""")
    return {"dpsql": {"ledger": str(tmp / "t.ledger"), "cache_dir": str(tmp / "cache")},
            "budget": {"epsilon": 1e7, "delta": 1e-6},
            "tables": {"t": {"domain": str(tmp / "d.toml"), "source": {"csv": str(tmp / "t.csv")}, "rows": ROWS}},
            "workload": {"queries": ["SELECT quantile_disc(tm, 0.5) FROM t",
                                     "SELECT sex, COUNT(*) FROM t GROUP BY sex"]},
            "policy": "infer"}


def _exact(tmp: Path, sql: str) -> dict:
    with duckdb.connect() as db:
        db.execute(f"CREATE VIEW t AS SELECT * FROM read_csv('{tmp / 't.csv'}', types={{'tm': 'TIME'}})")
        return {tuple(r[:-1]): r[-1] for r in db.execute(sql).fetchall()}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("infer_fine")
    con = dpsql.connect(_setup(tmp), user="tester")
    con.session.measure()
    yield con, tmp
    con.close()
    dpsql.dbapi._engines.clear()


def test_a_group_by_of_a_fine_columns_values_is_answered_by_its_release(measured):
    con, tmp = measured
    sql = "SELECT tm, COUNT(*) FROM t WHERE tm >= '12:00:00' AND tm < '12:00:40' GROUP BY tm"
    cur = con.cursor().execute(sql)
    assert cur.result.model.startswith("ordered"), cur.result.model
    got = {tuple(r[:-1]): (r[-1], e[-1]) for r, e in zip(cur.fetchall(), cur.stderr)}
    # a TIME group's label is its second as text
    want = {(k.isoformat(),): v for (k,), v in _exact(tmp, sql).items()}
    assert len(want) >= 10 and set(want) <= set(got)
    assert not any(cur.inferred)
    for key, (value, se) in got.items():
        assert value == pytest.approx(want.get(key, 0), abs=0.5), (key, value, want.get(key))
        assert math.isfinite(se) and 0 < se < 0.5, (key, se)


def test_an_inferred_quantile_over_a_fine_column_has_a_range(measured):
    """The release has no groups: by sex, the quantile is the model's guess (inferred), with
    a range; the CDF rows' extremes are read from their structure, not a dense matrix."""
    con, tmp = measured
    sql = "SELECT sex, quantile_disc(tm, 0.5) FROM t GROUP BY sex ORDER BY sex"
    cur = con.cursor().execute(sql)
    rows = {r[0]: (i, r) for i, r in enumerate(cur.fetchall())}
    want = _exact(tmp, sql)
    assert {"F", "M"} <= set(rows) and all(cur.inferred)
    for sex in ("F", "M"):
        i, row = rows[sex]
        low, high = cur.result.bounds[i][-1]
        truth = want[(sex,)]
        # the range is in the column's inner unit (seconds since midnight), not typed yet
        seconds = truth.hour * 3600 + truth.minute * 60 + truth.second
        assert low is not None and high is not None and low <= seconds <= high, (row, low, high, truth)
        assert 6 * 3600 <= low and high < 24 * 3600


def test_a_range_count_by_another_column_is_bounded_by_the_ranges_count(measured):
    """COUNT over a range of the fine column GROUP BY sex: inferred (the release has no
    groups), and its range's upper end is the range's count from the ordered release
    (within its noise), not each sex's total; before, [0, N_sex]."""
    con, tmp = measured
    sql = "SELECT sex, COUNT(*) FROM t WHERE tm < '09:00:00' GROUP BY sex"
    cur = con.cursor().execute(sql)
    rows = cur.fetchall()
    within = sum(_exact(tmp, sql).values())
    total = _exact(tmp, "SELECT sex, COUNT(*) FROM t GROUP BY sex")
    assert 0 < within < min(total.values()) / 4
    want = _exact(tmp, sql)
    for i, row in enumerate(rows):
        if row[0] not in ("F", "M"):
            continue
        assert cur.inferred[i]
        low, high = cur.result.bounds[i][-1]
        # the upper end: the range's count plus 4 sd bounded by the triangle inequality over
        # its 10,800 cells (each sd ~7.6e-4 here: ~33); the guess (the model's even spread,
        # ~330) is moved into the range
        assert low <= want.get((row[0],), 0) <= high <= within + 50, (row, low, high, within)
        assert low <= row[1] <= high


@pytest.mark.parametrize("factor", [
    linalg.Prefix(7), linalg.Suffix(7), linalg.Identity(5), linalg.Identity(1),
    linalg.Bucket(6, np.array([0, 0, 2, -1, 2, 2]), buckets=4), linalg.Bucket(3, np.array([0, 0, 0])),
    linalg.Weighted(2.5, linalg.Prefix(4)),
])
def test_structured_row_extremes_equal_the_dense_ones(factor):
    dense = np.asarray(factor.dense())
    high, low = _row_extremes(factor)
    assert np.array_equal(high, dense.max(axis=1)) and np.array_equal(low, dense.min(axis=1))
    assert _row_extremes(linalg.Weighted(-1.0, factor)) is None     # a signed row: no range
