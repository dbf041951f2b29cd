"""TIME (time-of-day) columns in SQL: every statement of tests/fixtures/sql/time_of_day.sql
equals DuckDB's answer at near-infinite budget (exact linear-query answers over the same
binned rows), grains come back as ``datetime.time`` values of type ``time``, and a filter or
grain that splits a bin, or a calendar field of a time of day, is refused."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlglot
from sqlglot import exp

import dpsql.errors as errors
from dpsql.domain_file import load_domain
from dpsql.sql import compile as compile_sql
from dpsql.timeaxis import iso_text
from sql_oracle import FIXTURES, Oracle, load_fixtures, rows_equal

CASES = load_fixtures("time_of_day.sql")
ROWS = 12_000
#: departures: minutes over the whole day (so some fall before 05:00: outside the declared
#: period, they join the NULL cell), every 61st scheduled time NULL, every 37th flight cancelled
RAW_SQL = f"""SELECT
    CASE WHEN i % 61 = 0 THEN NULL ELSE TIME '00:00:00' + to_minutes(CAST((i * 6151) % 1440 AS BIGINT)) END
        AS sched_dep_time,
    CASE WHEN i % 37 = 0 THEN NULL ELSE TIME '00:00:00' + to_seconds(CAST((i * 104729) % 86400 AS BIGINT)) END
        AS dep_time,
    (['AA', 'B6', 'DL', 'UA'])[1 + CAST((i * i + i // 7) % 4 AS INTEGER)] AS carrier
    FROM range({ROWS}) r(i)"""


class TimeOfDayOracle(Oracle):
    def __init__(self) -> None:     # not super().__init__: that loads adult
        self.catalog = load_domain(FIXTURES / "departures.toml")
        self._build("departures", RAW_SQL)

    def _midpoints(self, a) -> list[tuple]:
        return []       # a time of day's cells are reported as times (its grains), no label

    def _representative(self, a) -> str:
        if a.kind != "time":
            return super()._representative(a)
        lits = ", ".join("NULL" if b is None else f"'{iso_text(b[0])}'" for b in a.bin_bounds())
        return f'CAST(([{lits}])["{a.name}" + 1] AS TIME)'

    def _duck_rewrite(self, node):
        # DuckDB has no date_trunc(unit, TIME): the time of date_trunc over that time on a day
        if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)) and isinstance(node.this, exp.Column):
            unit = node.args["unit"].name.lower()
            return sqlglot.parse_one(f"CAST(date_trunc('{unit}', DATE '2000-01-01' + {node.this.sql('duckdb')}) "
                                     "AS TIME)", read="duckdb")
        return super()._duck_rewrite(node)


@pytest.fixture(scope="module")
def doracle():
    return TimeOfDayOracle()


def test_fixture_count():
    assert len(CASES) >= 18


@pytest.mark.parametrize("case", CASES, ids=[f"tod{i:02d}" for i in range(len(CASES))])
def test_time_of_day_statement_matches_duckdb(doracle, case):
    cq, ours = doracle.ours(case["sql"])
    theirs = doracle.duck(case["sql"])
    ours = doracle.normalise(cq, ours)
    ordered = sqlglot.parse_one(case["sql"], read="postgres").args.get("order") is not None
    assert len(ours) > 0
    assert rows_equal(ours, theirs, ordered), f"\nours:   {ours[:12]}\nduckdb: {theirs[:12]}"


def test_grains_are_times_of_type_time(doracle):
    cq, rows = doracle.ours("SELECT date_trunc('hour', dep_time) AS h, COUNT(*) FROM departures GROUP BY 1 "
                            "ORDER BY 1")
    assert cq.columns[0].type == "time"
    assert [r[0] for r in rows] == [dt.time(h) for h in range(24)] + [None]
    cq, rows = doracle.ours("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY sched_dep_time) FROM departures")
    assert cq.columns[0].type == "time" and isinstance(rows[0][0], dt.time)


@pytest.mark.parametrize("sql, bin_named", [
    ("SELECT COUNT(*) FROM departures WHERE sched_dep_time < '10:30:30'", "10:30 (10:30:00 .. 10:30:59.999999)"),
    ("SELECT COUNT(*) FROM departures WHERE dep_time >= '06:30'", "06:00 (06:00:00 .. 06:59:59.999999)"),
    ("SELECT EXTRACT(MINUTE FROM dep_time), COUNT(*) FROM departures GROUP BY 1", "00:00"),
    ("SELECT date_trunc('minute', dep_time), COUNT(*) FROM departures GROUP BY 1", "00:00"),
])
def test_a_filter_or_grain_that_splits_a_bin_is_refused_with_the_bin_named(doracle, sql, bin_named):
    with pytest.raises(errors.UnsupportedQueryError) as info:
        compile_sql(sql, doracle.catalog)
    assert info.value.sqlstate == "0A000" and bin_named in info.value.message, info.value.message
    assert info.value.hint and info.value.position


@pytest.mark.parametrize("sql, sqlstate", [
    ("SELECT COUNT(*) FROM departures WHERE sched_dep_time < 'noon'", "22023"),
    ("SELECT COUNT(*) FROM departures WHERE sched_dep_time < '25:00'", "22023"),
    ("SELECT COUNT(*) FROM departures WHERE sched_dep_time < 5", "22023"),
    ("SELECT COUNT(*) FROM departures WHERE sched_dep_time < DATE '2013-01-01'", "22023"),
    ("SELECT SUM(sched_dep_time) FROM departures", "0A000"),
    ("SELECT EXTRACT(DAY FROM sched_dep_time), COUNT(*) FROM departures GROUP BY 1", "0A000"),
    ("SELECT date_trunc('day', sched_dep_time), COUNT(*) FROM departures GROUP BY 1", "0A000"),
    ("SELECT COUNT(*) FROM departures WHERE sched_dep_time + INTERVAL '1 hour' < '10:00'", "0A000"),
])
def test_wrong_time_of_day_expressions_are_refused(doracle, sql, sqlstate):
    with pytest.raises(errors.Error) as info:
        compile_sql(sql, doracle.catalog)
    assert info.value.sqlstate == sqlstate, f"{type(info.value).__name__}: {info.value}"
    assert info.value.hint
