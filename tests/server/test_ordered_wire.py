"""A fine ordered column over the wire (issue 35 item 4): a quantile and range counts over a
5,000-cell integer column, measured by the ordered strategy, reach psycopg through
``dpsql serve`` with the values and 95% half-widths the in-process driver reports."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.sql.postprocess import Z95
from dpsql.testing import write_config

from test_clients import bounded
from ordered_parts import assert_routed

QUERIES = ["SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY income) FROM t",
           "SELECT COUNT(*) FROM t WHERE income BETWEEN 500 AND 1500"]


@pytest.fixture(scope="module")
def fine_server(measured_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fine_wire")
    x = np.clip(np.random.default_rng(3).lognormal(7.0, 0.7, 3000).astype(np.int64), 0, 4999)
    (tmp / "t.csv").write_text("income\n" + "\n".join(map(str, x)) + "\n")
    (tmp / "t.toml").write_text("[tables.t.columns.income]\ntype = \"integer\"\nlo = 0\nhi = 4999\n")
    config = write_config(tmp, table="t", domain=tmp / "t.toml", source={"csv": tmp / "t.csv"},
                          epsilon=1.0, queries=QUERIES)
    return measured_server(config)


@pytest.mark.slow
@pytest.mark.parametrize("sql", QUERIES)
def test_psycopg_gets_the_ordered_answer_and_its_interval(fine_server, sql):
    conn, local = fine_server
    want = local.cursor().execute(sql)
    value, se = want.fetchone()[0], want.result.stderr[0][0]
    assert_routed(want.result, sql, local.session.plan())   # a thin count of the plan's rest: its model
    assert math.isfinite(se) and se > 0
    cur = bounded(lambda: conn.execute(sql), timeout=120)
    row = bounded(cur.fetchone)
    names = [d.name for d in cur.description]
    assert names[1].endswith("_ci95"), names           # the wire's default error column
    assert float(row[0]) == pytest.approx(value, rel=1e-6, abs=0.5)
    assert float(row[1]) == pytest.approx(Z95 * se, rel=0.05, abs=0.5)


# -- a fine timestamp column: its quantile is a TIMESTAMP on the wire -------------------------
TIME_QUERIES = ["SELECT quantile_disc(ts, 0.9) FROM t",
                "SELECT COUNT(*) FROM t WHERE ts >= '2024-01-02 10:00' AND ts < '2024-01-03 12:31'"]


@pytest.fixture(scope="module")
def time_server(measured_server, tmp_path_factory):
    import datetime as dt
    tmp = tmp_path_factory.mktemp("time_wire")
    minutes = np.clip(np.random.default_rng(4).normal(2880, 800, 3001).astype(np.int64), 0, 5759)
    start = dt.datetime(2024, 1, 1)
    (tmp / "t.csv").write_text("ts\n" + "\n".join((start + dt.timedelta(minutes=int(m))).isoformat(" ")
                                                  for m in minutes) + "\n")
    (tmp / "t.toml").write_text('[tables.t.columns.ts]\ntype = "timestamp"\nlo = 2024-01-01\n'
                                'hi = 2024-01-04\nbin = "minute"\n')
    config = write_config(tmp, table="t", domain=tmp / "t.toml", source={"csv": tmp / "t.csv"},
                          epsilon=1.0, queries=TIME_QUERIES)
    return measured_server(config)


@pytest.mark.slow
def test_psycopg_gets_a_fine_timestamps_quantile_as_a_timestamp(time_server):
    """Issue 35: the quantile of a 5,760-cell timestamp column reaches psycopg as a
    ``timestamp`` (OID 1114) value, the one the in-process driver reports; before, the
    statement was refused ("aggregates timestamp column 'ts' as a number")."""
    import datetime as dt
    conn, local = time_server
    sql = TIME_QUERIES[0]
    want = local.cursor().execute(sql)
    value = want.fetchone()[0]
    assert want.result.model.startswith("ordered") and isinstance(value, dt.datetime)
    cur = bounded(lambda: conn.execute(sql), timeout=120)
    row = bounded(cur.fetchone)
    assert cur.description[0].type_code == 1114, cur.description
    assert row[0] == value
    assert float(row[1]) == pytest.approx(Z95 * want.result.stderr[0][0], rel=0.05, abs=0.5)
