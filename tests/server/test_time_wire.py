"""Dates and timestamps on the wire (issue 30): group keys go out as ``date`` (1082) and
``timestamp`` (1114), in PostgreSQL's text and binary forms, so psycopg (and a BI tool) gets
dates, not text; the catalog declares the columns with those types."""

from __future__ import annotations

import datetime as dt
import math
import struct
import sys
from pathlib import Path

import duckdb
import pytest

from dpsql.domain_file import load_domain
from dpsql.server import pgtypes
from dpsql.server.shadow import schema_ddl
from dpsql.testing import write_config

from dpsql.display import rounded_rows

from test_clients import bounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sql"))
from sql_oracle import FIXTURES, load_fixtures  # noqa: E402
from time_oracle import RAW_SQL  # noqa: E402

DOMAIN = """
[tables.flights.columns.flight_date]
type = "date"
lo = 2013-01-01
hi = 2013-03-31
bin = "day"

[tables.flights.columns.time_hour]
type = "timestamp"
lo = 2013-01-01
hi = 2013-03-31
bin = "hour"
timezone = "America/New_York"
"""


def test_time_values_in_text_and_binary():
    assert pgtypes.oid_for("date") == 1082 and pgtypes.oid_for("timestamp") == 1114
    assert pgtypes.oid_for("timestamp without time zone") == 1114
    day, ts = dt.date(2013, 6, 1), dt.datetime(2013, 6, 1, 10, 5, 0, 500000)
    assert pgtypes.encode_text(day, 1082) == b"2013-06-01"
    assert pgtypes.encode_text(ts, 1114) == b"2013-06-01 10:05:00.5"
    assert pgtypes.encode_text(dt.datetime(2013, 6, 1), 1114) == b"2013-06-01 00:00:00"
    # binary: days / microseconds since 2000-01-01 (PostgreSQL's date_send, timestamp_send)
    assert pgtypes.encode_binary(dt.date(2000, 1, 2), 1082) == struct.pack("!i", 1)
    assert pgtypes.encode_binary(dt.date(1999, 12, 31), 1082) == struct.pack("!i", -1)
    assert pgtypes.encode_binary(dt.datetime(2000, 1, 1, 0, 0, 1), 1114) == struct.pack("!q", 1_000_000)
    assert pgtypes.decode_param(pgtypes.encode_binary(day, 1082), 1082, 1) == day
    assert pgtypes.decode_param(pgtypes.encode_binary(ts, 1114), 1114, 1) == ts


def test_the_catalog_declares_date_and_timestamp_columns(tmp_path):
    (tmp_path / "f.toml").write_text(DOMAIN)
    ddl = "\n".join(schema_ddl(load_domain(tmp_path / "f.toml")))
    assert '"flight_date" date' in ddl or "flight_date date" in ddl
    assert "time_hour timestamp without time zone" in ddl or '"time_hour" timestamp without time zone' in ddl


@pytest.fixture(scope="module")
def flights_server(measured_server, tmp_path_factory):
    """The flights table of the SQL tests (tests/fixtures/sql/flights.toml, the rows of
    tests/sql/time_oracle.py) in a Parquet file, served; a few marginals measured."""
    tmp = tmp_path_factory.mktemp("flights_wire")
    duckdb.sql(f"COPY ({RAW_SQL}) TO '{tmp / 'f.parquet'}' (FORMAT parquet)")
    workload = ["SELECT flight_date, carrier, COUNT(*) FROM flights GROUP BY 1, 2",
                "SELECT sched_month, COUNT(*) FROM flights GROUP BY 1",
                "SELECT time_hour, COUNT(*) FROM flights GROUP BY 1"]
    config = write_config(tmp, table="flights", domain=FIXTURES / "flights.toml",
                          source={"parquet": tmp / "f.parquet"}, epsilon=1e6, queries=workload,
                          dpsql={"policy": "infer"})
    return measured_server(config)


@pytest.mark.parametrize("binary", [False, True])
def test_psycopg_gets_dates_and_timestamps(flights_server, binary):
    cur = flights_server[0].cursor(binary=binary)
    cur.execute("SELECT DATE_TRUNC('month', flight_date) AS m, COUNT(*) AS n FROM flights "
                "WHERE flight_date >= %s GROUP BY 1 ORDER BY 1", (dt.date(2013, 11, 1),))
    rows = cur.fetchall()
    assert [r[0] for r in rows] == [dt.datetime(2013, 11, 1), dt.datetime(2013, 12, 1)]
    assert [d.type_code for d in cur.description][0] == 1114
    cur.execute("SELECT flight_date, COUNT(*) FROM flights WHERE flight_date < '2013-01-04' GROUP BY 1 ORDER BY 1")
    assert [r[0] for r in cur.fetchall()] == [dt.date(2013, 1, d) for d in (1, 2, 3)]
    assert cur.description[0].type_code == 1082


TIME_CASES = [(tool, i, case) for tool in ("superset", "metabase", "tableau", "powerbi", "looker")
              for i, case in enumerate(load_fixtures(f"bi_{tool}.sql")) if case.get("table") == "flights"]


def test_every_tool_has_time_series_fixtures():
    assert {t for t, _, _ in TIME_CASES} == {"superset", "metabase", "tableau", "powerbi", "looker"}


@pytest.mark.parametrize("tool,i,case", TIME_CASES, ids=[f"{t}{i:02d}" for t, i, _ in TIME_CASES])
def test_time_series_chart_over_the_wire(flights_server, tool, i, case):
    """Each tool's time-grain SQL through psycopg returns what the in-process driver returns
    from the same engine (that equals DuckDB: tests/sql/test_sql_bi.py)."""
    conn, local = flights_server
    expected = local.cursor().execute(case["sql"])
    want_rows = rounded_rows(expected.result)
    cur = bounded(lambda: conn.execute(case["sql"].replace("%", "%%")), timeout=120)
    got_rows = bounded(cur.fetchall)
    names = [d[0] for d in expected.description]
    # the wire adds error columns (<col>_ci95) and the ``inferred`` flag after the answer's own
    assert [d.name for d in cur.description][:len(names)] == names
    assert len(got_rows) == len(want_rows) and got_rows
    for got, want in zip(got_rows, want_rows):
        assert all(_same(g, w) for g, w in zip(got[:len(names)], want)), (got, want)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b
