"""Fine date and timestamp columns through SQL (issue 35 item 4): quantiles and range counts
over a timestamp to the minute (5,760 cells) and a date to the day (7,305 cells), both above
the planner's 4,096-cell threshold, are planned as ordered columns and answered with typed
values, a TIMESTAMP or DATE as DuckDB's quantile_disc / quantile_cont return them, through the
DB-API (here) and the wire (tests/server/test_ordered_wire.py).  (10⁵-cell time axes take the
same path, measured by arithmetic since issue 35's reader change; these tests stay near 10⁴
cells to plan in seconds.)

Before: ``QUANTILE_CONT(ts, 0.5) aggregates timestamp column 'ts' as a number`` (refused).
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.errors import UnsupportedQueryError
from dpsql.sql.postprocess import Z95

from ordered_parts import assert_routed, ordered_part

ROWS = 5001          # odd, and q·N no integer for the DISC levels below: no tie to break

TS_QUERIES = [
    "SELECT quantile_disc(ts, 0.5) FROM t",
    "SELECT sex, percentile_disc(0.9) WITHIN GROUP (ORDER BY ts) FROM t GROUP BY sex",
    "SELECT COUNT(*) FROM t WHERE ts >= '2024-01-02 10:00' AND ts < '2024-01-03 12:31'",
    "SELECT COUNT(*) FROM t WHERE ts BETWEEN '2024-01-02' AND '2024-01-02 23:59:59.999999'",
]
BORN_QUERIES = [
    "SELECT quantile_disc(born, 0.3) FROM p",
    "SELECT COUNT(*) FROM p WHERE born BETWEEN '2005-01-01' AND '2012-06-30'",
]


def _tables(tmp: Path) -> None:
    rng = np.random.default_rng(5)
    start = dt.datetime(2024, 1, 1)
    minutes = np.clip(rng.normal(2 * 1440, 0.6 * 1440, ROWS).astype(np.int64), 0, 4 * 1440 - 1)
    sex = rng.choice(["F", "M"], ROWS)
    (tmp / "t.csv").write_text("ts,sex\n" + "\n".join(
        f"{(start + dt.timedelta(minutes=int(m))).isoformat(' ')},{s}" for m, s in zip(minutes, sex)) + "\n")
    days = np.clip(rng.normal(3_650, 1_500, ROWS).astype(np.int64), 0, 7_304)
    (tmp / "p.csv").write_text("born\n" + "\n".join(
        str(dt.date(2000, 1, 1) + dt.timedelta(days=int(d))) for d in days) + "\n")
    (tmp / "d.toml").write_text("""
[tables.t.columns.ts]
type = "timestamp"
lo = 2024-01-01
hi = 2024-01-04
bin = "minute"
[tables.t.columns.sex]
type = "categorical"
labels = ["F", "M"]
[tables.p.columns.born]
type = "date"
lo = 2000-01-01
hi = 2019-12-31
bin = "day"
""")


def _config(tmp: Path, name: str, epsilon: float = 1e7) -> dict:
    """One table per configuration: a workload plans one fine column at a time."""
    return {"dpsql": {"ledger": str(tmp / f"{name}.ledger"), "cache_dir": str(tmp / "cache")},
            "budget": {"epsilon": epsilon, "delta": 1e-6},
            "tables": {name: {"domain": str(tmp / "d.toml"), "source": {"csv": str(tmp / f"{name}.csv")},
                              "rows": ROWS}},
            "workload": {"queries": TS_QUERIES if name == "t" else BORN_QUERIES}}


def _exact(tmp: Path, sql: str) -> dict:
    with duckdb.connect() as db:
        db.execute(f"CREATE VIEW t AS SELECT * FROM read_csv('{tmp / 't.csv'}')")
        db.execute(f"CREATE VIEW p AS SELECT * FROM read_csv('{tmp / 'p.csv'}')")
        return {tuple(r[:-1]): r[-1] for r in db.execute(sql).fetchall()}


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timed")
    _tables(tmp)
    cons = {name: dpsql.connect(_config(tmp, name), user="tester") for name in ("t", "p")}
    reports = {name: con.session.plan() for name, con in cons.items()}
    for con in cons.values():
        con.session.measure()
    yield cons, reports, tmp
    for con in cons.values():
        con.close()
    dpsql.dbapi._engines.clear()


@pytest.mark.slow
def test_fine_time_columns_are_planned_as_ordered(timed):
    _, reports, _ = timed
    t, p = ordered_part(reports["t"].strategy), ordered_part(reports["p"].strategy)
    assert t.operator in ("tree", "toeplitz")
    assert t.attribute == "ts" and t.size == 5_760
    assert t.groups == ("sex",)
    assert p.attribute == "born" and p.size == 7_305


@pytest.mark.slow
@pytest.mark.parametrize("sql, kind", [
    (TS_QUERIES[0], "timestamp"), (TS_QUERIES[1], "timestamp"), (TS_QUERIES[2], "count"), (TS_QUERIES[3], "count"),
    ("SELECT quantile_cont(ts, 0.5) FROM t", "timestamp"),
    ("SELECT sex, median(ts) FROM t GROUP BY sex ORDER BY sex", "timestamp"),
    ("SELECT COUNT(*) FROM t WHERE ts < '2024-01-02' AND sex = 'F'", "count"),
    (BORN_QUERIES[0], "date"), (BORN_QUERIES[1], "count"),
    ("SELECT quantile_cont(born, 0.25) FROM p", "timestamp"),
    # a range on the quantile's own column keeps a run of its cells: the quantile of that run,
    # from the ordered release (before: the model's path)
    ("SELECT quantile_cont(ts, 0.5) FROM t WHERE ts >= '2024-01-02 06:00'", "timestamp"),
    ("SELECT quantile_disc(ts, 0.3) FROM t WHERE ts BETWEEN '2024-01-01 12:00' AND '2024-01-03 11:59:59.999999'",
     "timestamp"),
    ("SELECT sex, quantile_disc(ts, 0.9) FROM t WHERE ts > '2024-01-01 17:59:59.999999' GROUP BY sex ORDER BY sex",
     "timestamp"),
    ("SELECT quantile_disc(born, 0.7) FROM p WHERE born >= '2008-02-29'", "date"),
])
def test_answers_are_typed_and_equal_duckdb_at_a_huge_budget(timed, sql, kind):
    cons, reports, tmp = timed
    cur = cons["p" if "born" in sql else "t"].cursor()
    cur.execute(sql)
    assert_routed(cur.result, sql, reports["p" if "born" in sql else "t"])    # a thin count of the rest: its model
    want = _exact(tmp, sql.replace("median(ts)", "quantile_cont(ts, 0.5)"))
    got = {tuple(r[:-1]): (r[-1], e[-1]) for r, e in zip(cur.fetchall(), cur.stderr)}
    assert set(want) <= set(got), (sql, got)
    column = cur.description[-1]
    if kind == "count":
        for key, exact in want.items():
            assert got[key][0] == pytest.approx(exact, abs=0.5) and got[key][1] < 0.5, (sql, key)
        return
    assert column[1] == dpsql.DATETIME and cur.result.columns[-1].type == kind, column
    cont = "cont" in sql or "median" in sql
    for key, exact in want.items():
        value, se = got[key]
        assert type(value) is (dt.date if kind == "date" else dt.datetime), (sql, value)
        assert type(exact) is type(value), (sql, exact, value)     # DuckDB's type too
        # the standard error is in the column's unit: days for a date, seconds for a timestamp
        unit = dt.timedelta(days=1) if "born" in sql else dt.timedelta(seconds=1)
        assert math.isfinite(se) and se >= 0, (sql, key, se)
        if cont:     # interpolated between cells by its own rank convention, as for integers
            # the truth can be the interval's end exactly (2 of 25 releases: a day's start);
            # the value and the timedelta are rounded to the microsecond
            assert abs(value - exact) <= Z95 * se * unit + dt.timedelta(milliseconds=1), (sql, key, value, exact, se)
        else:
            assert value == exact, (sql, key, value, exact)


def test_a_time_quantile_in_an_expression_is_refused_before_anything_is_measured(tmp_path):
    """Inside, the quantile is a number of seconds or days: computing with it or comparing
    it would show that number, so it may only be selected (and ordered by)."""
    _tables(tmp_path)
    con = dpsql.connect(_config(tmp_path, "t"), user="tester")
    try:
        cur = con.cursor()
        for sql in ["SELECT quantile_disc(ts, 0.5) + INTERVAL 1 DAY FROM t",
                    "SELECT sex, COUNT(*) FROM t GROUP BY sex HAVING quantile_disc(ts, 0.5) > '2024-01-02'"]:
            with pytest.raises(UnsupportedQueryError, match="date or timestamp"):
                cur.execute(sql)
        with pytest.raises(UnsupportedQueryError, match="as a number"):
            cur.execute("SELECT AVG(ts) FROM t")        # still: no SUM or AVG of a time
        assert con.session.engine.ledger.spent(None) == 0
    finally:
        con.close()
        dpsql.dbapi._engines.clear()
