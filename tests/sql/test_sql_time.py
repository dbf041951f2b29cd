"""Dates and times in SQL (issue 30): every statement of tests/fixtures/sql/time.sql equals
DuckDB's answer at near-infinite budget (exact linear-query answers), a filter or grain that
splits a bin is refused with the bin named, and months from one model add up to the year."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
import sqlglot

import dpsql.errors as errors
from dpsql.sql import compile as compile_sql
from sql_oracle import load_fixtures, rows_equal

CASES = load_fixtures("time.sql")


def test_fixture_count():
    assert len(CASES) >= 35


@pytest.mark.parametrize("case", CASES, ids=[f"t{i:03d}" for i in range(len(CASES))])
def test_time_statement_matches_duckdb(toracle, case):
    cq, ours = toracle.ours(case["sql"])
    theirs = toracle.duck(case["sql"])
    ours = toracle.normalise(cq, ours)
    ordered = sqlglot.parse_one(case["sql"], read="postgres").args.get("order") is not None
    assert len(ours) > 0
    assert rows_equal(ours, theirs, ordered), f"\nours:   {ours[:12]}\nduckdb: {theirs[:12]}"


@pytest.mark.parametrize("sql, bin_named", [
    ("SELECT COUNT(*) FROM flights WHERE sched_month >= '2013-06-15'", "2013-06 (2013-06-01 .. 2013-06-30)"),
    ("SELECT COUNT(*) FROM flights WHERE sched_month BETWEEN '2013-06-01' AND '2013-06-20'", "2013-06"),
    ("SELECT date_trunc('day', sched_month), COUNT(*) FROM flights GROUP BY 1", "2013-01"),
    ("SELECT date_trunc('week', sched_month), COUNT(*) FROM flights GROUP BY 1", "2013-01"),
    ("SELECT EXTRACT(DAY FROM sched_month), COUNT(*) FROM flights GROUP BY 1", "2013-01"),
    ("SELECT EXTRACT(MINUTE FROM time_hour), COUNT(*) FROM flights GROUP BY 1", "2013-01-01 00:00"),
    ("SELECT COUNT(*) FROM flights WHERE time_hour < '2013-01-05 10:30'", "2013-01-05 10:00"),
    ("SELECT COUNT(*) FROM flights WHERE time_hour = TIMESTAMP '2013-01-05 10:00:00'", "2013-01-05 10:00"),
    ("SELECT COUNT(*) FROM flights WHERE time_hour BETWEEN '2013-01-01' AND '2013-01-31 23:59:59'", "2013-01-31 23:00"),
])
def test_a_filter_or_grain_that_splits_a_bin_is_refused_with_the_bin_named(catalog_time, sql, bin_named):
    with pytest.raises(errors.UnsupportedQueryError) as info:
        compile_sql(sql, catalog_time)
    assert info.value.sqlstate == "0A000" and bin_named in info.value.message
    assert "declared by" in info.value.message and info.value.hint and info.value.position


@pytest.mark.parametrize("sql, sqlstate", [
    ("SELECT COUNT(*) FROM flights WHERE flight_date < 'June'", "22023"),
    ("SELECT COUNT(*) FROM flights WHERE flight_date < 5", "22023"),
    ("SELECT COUNT(*) FROM flights WHERE flight_date < DATE '2013-02-30'", "22023"),
    ("SELECT SUM(flight_date) FROM flights", "0A000"),
    ("SELECT COUNT(*) FROM flights WHERE flight_date * 2 > 3", "0A000"),
    ("SELECT date_trunc('decade', flight_date), COUNT(*) FROM flights GROUP BY 1", "0A000"),
    ("SELECT EXTRACT(EPOCH FROM flight_date), COUNT(*) FROM flights GROUP BY 1", "0A000"),
])
def test_wrong_time_expressions_are_refused(catalog_time, sql, sqlstate):
    with pytest.raises(errors.Error) as info:
        compile_sql(sql, catalog_time)
    assert info.value.sqlstate == sqlstate, f"{type(info.value).__name__}: {info.value}"
    assert info.value.hint


@pytest.fixture(scope="module")
def catalog_time(toracle):
    return toracle.catalog


def test_grains_are_the_same_cells_summed(toracle):
    """Daily, monthly and yearly counts are the same cells summed (Bucket factors over one
    day axis), so from one data vector the days add up to the months and the months to the
    year exactly; with noise this holds per model (tests/engine/test_time_e2e.py)."""
    def answer(sql):
        cq = compile_sql(sql, toracle.catalog)
        (lq,) = cq.linear_queries
        return cq, toracle.answer(lq)
    cq_d, daily = answer("SELECT flight_date, COUNT(*) FROM flights GROUP BY 1")
    cq_m, monthly = answer("SELECT date_trunc('month', flight_date), COUNT(*) FROM flights GROUP BY 1")
    cq_y, yearly = answer("SELECT EXTRACT(YEAR FROM flight_date), COUNT(*) FROM flights GROUP BY 1")
    assert [g[0] for g in cq_m.groups] == [dt.datetime(2013, m, 1) for m in range(1, 13)]
    by_month = np.zeros(12)
    for (day,), n in zip(cq_d.groups, daily):
        by_month[day.month - 1] += n
    assert np.array_equal(by_month, monthly) and monthly.sum() == yearly[0] == 20_000


def test_instants_are_compared_in_the_axis_zone(catalog_time):
    """time_hour is wall time in New York: an instant literal (with an offset) is converted to
    that zone, so 11:00 UTC on 15 January is 06:00 there (EST, UTC-5)."""
    def cells(sql):
        cq = compile_sql(sql, catalog_time)
        (lq,) = cq.linear_queries
        (block,) = lq.matrix.blocks
        names = [a.name for a in catalog_time["flights"].attributes]
        return block.base.factors[names.index("time_hour")].dense()
    wall = cells("SELECT COUNT(*) FROM flights WHERE time_hour >= '2013-01-15 06:00:00'")
    for literal in ("TIMESTAMPTZ '2013-01-15 11:00:00+00'", "timestamp with time zone '2013-01-15 11:00:00.000Z'",
                    "CAST('2013-01-15 12:00:00+01' AS TIMESTAMP WITH TIME ZONE)"):
        assert np.array_equal(cells(f"SELECT COUNT(*) FROM flights WHERE time_hour >= {literal}"), wall), literal
    # untyped text takes the column's type (timestamp without time zone), whose input ignores
    # a zone, as PostgreSQL's does
    eleven = cells("SELECT COUNT(*) FROM flights WHERE time_hour >= '2013-01-15 11:00:00'")
    assert not np.array_equal(eleven, wall)
    for text in ("'2013-01-15 11:00:00+00:00'", "'2013-01-15 11:00:00Z'", "'2013-01-15 11:00:00.000000-05'"):
        assert np.array_equal(cells(f"SELECT COUNT(*) FROM flights WHERE time_hour >= {text}"), eleven), text


def test_a_day_axis_is_planned_as_an_integer_range():
    """The planner sees factors, not kinds: date ranges and calendar grains over a day axis
    compile to the same matrices (range, prefix, bucket) as over the integers 0..364."""
    from dpsql.domain import IntegerRange, TableSchema
    from dpsql.temporal import DateRange
    days = {"t": TableSchema("t", (DateRange("d", "2013-01-01", "2013-12-31", "day"),))}
    ints = {"t": TableSchema("t", (IntegerRange("d", 0, 364),))}
    pairs = [("d BETWEEN '2013-02-01' AND '2013-02-28'", "d BETWEEN 31 AND 58"),
             ("d < DATE '2013-03-01'", "d < 59"),
             ("d >= DATE '2013-12-25' - INTERVAL '7 days'", "d >= 351")]
    for when_day, when_int in pairs:
        a = compile_sql(f"SELECT COUNT(*) FROM t WHERE {when_day}", days).linear_queries[0].matrix.dense()
        b = compile_sql(f"SELECT COUNT(*) FROM t WHERE {when_int}", ints).linear_queries[0].matrix.dense()
        assert np.array_equal(a, b), when_day
    month = compile_sql("SELECT date_trunc('quarter', d), COUNT(*) FROM t GROUP BY 1", days)
    edges = "CASE WHEN d < 90 THEN 0 WHEN d < 181 THEN 1 WHEN d < 273 THEN 2 ELSE 3 END"
    quarter = compile_sql(f"SELECT {edges}, COUNT(*) FROM t GROUP BY 1", ints)
    assert np.array_equal(month.linear_queries[0].matrix.dense(), quarter.linear_queries[0].matrix.dense())


def test_output_names_follow_postgresql(catalog_time):
    names = lambda sql: [c.name for c in compile_sql(sql, catalog_time).columns]  # noqa: E731
    assert names("SELECT EXTRACT(YEAR FROM flight_date), COUNT(*) FROM flights GROUP BY 1") == ["extract", "count"]
    assert names("SELECT date_part('year', flight_date), COUNT(*) FROM flights GROUP BY 1") == ["date_part", "count"]
    assert names("SELECT date_trunc('month', flight_date), COUNT(*) FROM flights GROUP BY 1") == ["date_trunc",
                                                                                                  "count"]


def test_second_bins_in_sql():
    """A second axis (issue 35): date_trunc('second' …) groups by its cells, a coarser grain
    sums them, a comparison on a second's start is exact and one inside a second is refused
    with the bin named; date_trunc('second' …) of a minute axis splits its bins."""
    from dpsql.domain import TableSchema
    from dpsql.temporal import TimestampRange
    secs = {"t": TableSchema("t", (TimestampRange("s", "2013-01-01 10:00:00", "2013-01-01 10:01:59.999999",
                                                  "second"),))}
    by_second = compile_sql("SELECT date_trunc('second', s), COUNT(*) FROM t GROUP BY 1", secs)
    assert len(by_second.groups) == 120 and by_second.groups[5][0] == dt.datetime(2013, 1, 1, 10, 0, 5)
    by_minute = compile_sql("SELECT date_trunc('minute', s), COUNT(*) FROM t GROUP BY 1", secs)
    assert [g[0] for g in by_minute.groups] == [dt.datetime(2013, 1, 1, 10, 0), dt.datetime(2013, 1, 1, 10, 1)]
    (lq,) = compile_sql("SELECT COUNT(*) FROM t WHERE s >= '2013-01-01 10:01:30'", secs).linear_queries
    assert np.array_equal(lq.matrix.dense()[0], np.arange(120) >= 90)
    with pytest.raises(errors.UnsupportedQueryError, match="2013-01-01 10:01:30"):
        compile_sql("SELECT COUNT(*) FROM t WHERE s >= '2013-01-01 10:01:30.5'", secs)
    mins = {"t": TableSchema("t", (TimestampRange("s", "2013-01-01 10:00", "2013-01-01 10:59:59", "minute"),))}
    with pytest.raises(errors.UnsupportedQueryError, match="declared by minute"):
        compile_sql("SELECT date_trunc('second', s), COUNT(*) FROM t GROUP BY 1", mins)
