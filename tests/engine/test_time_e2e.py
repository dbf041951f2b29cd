"""Issue 30 acceptance: `dpsql init` → `check` → `measure` → query on a Parquet file with DATE
and TIMESTAMP columns, read as they are (no rewrite); answers of every grain come from one
model, so the days add up to the months and the months to the year exactly."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import dpsql

ROOT = Path(__file__).resolve().parents[2]


def run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flights")
    duckdb.sql(f"""COPY (SELECT DATE '2013-01-01' + CAST((i * 7919) % 90 AS INTEGER) AS flight_date,
        TIMESTAMP '2013-01-01 00:00:00' + to_minutes(CAST((i * 6151) % (90 * 24 * 60) AS BIGINT)) AS time_hour,
        (['AA', 'B6', 'DL', 'UA'])[1 + CAST(i % 4 AS INTEGER)] AS carrier
        FROM range(6000) r(i)) TO '{tmp / 'flights.parquet'}' (FORMAT parquet)""")
    r = run("init", "flights.parquet", "-o", "dpsql.toml", cwd=tmp)
    assert r.returncode == 0, r.stderr
    domain = (tmp / "flights.domain.toml").read_text()
    fills = {"# lo = ?": "lo = 2013-01-01", "# hi = ?": "hi = 2013-03-31"}
    lines = []
    for line in domain.splitlines():
        for todo, value in fills.items():
            if line.startswith(todo):
                line = value
        if line.startswith("# bin = ?"):
            line = 'bin = "day"'
        if line.startswith("# labels = ?"):
            line = 'labels = ["AA", "B6", "DL", "UA"]'
        lines.append(line)
    (tmp / "flights.domain.toml").write_text("\n".join(lines) + "\n")
    config = (tmp / "dpsql.toml").read_text().replace("queries = []", """queries = [
        "SELECT flight_date, carrier, COUNT(*) FROM flights GROUP BY 1, 2",
        "SELECT CAST(time_hour AS DATE), COUNT(*) FROM flights GROUP BY 1"]""")
    (tmp / "dpsql.toml").write_text(config)
    check = run("check", cwd=tmp)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "every value is in the declared domain" in check.stdout
    measure = run("measure", "--yes", cwd=tmp)
    assert measure.returncode == 0, measure.stdout + measure.stderr
    return tmp


def test_init_check_measure_query_on_parquet_dates(flights):
    conn = dpsql.connect(str(flights / "dpsql.toml"))
    cur = conn.cursor()
    cur.execute("SELECT date_trunc('month', flight_date) AS m, COUNT(*) AS n FROM flights GROUP BY 1 ORDER BY 1")
    months = cur.fetchall()
    assert [m for m, _ in months] == [dt.datetime(2013, m, 1) for m in (1, 2, 3)]
    assert [d[1] for d in cur.description] == [dpsql.dbapi.DATETIME, dpsql.dbapi.NUMBER]
    cur.execute("SELECT EXTRACT(YEAR FROM flight_date) AS y, COUNT(*) FROM flights GROUP BY 1")
    (year, total), = cur.fetchall()
    assert year == 2013
    assert sum(n for _, n in months) == pytest.approx(total, abs=1e-6)       # months add up to the year
    cur.execute("SELECT flight_date, COUNT(*) FROM flights WHERE flight_date < '2013-02-01' GROUP BY 1 ORDER BY 1")
    days = cur.fetchall()
    assert days[0][0] == dt.date(2013, 1, 1) and len(days) == 31
    assert sum(n for _, n in days) == pytest.approx(months[0][1], abs=1e-6)  # days add up to January
    cur.execute("SELECT COUNT(*) FROM flights WHERE time_hour >= TIMESTAMP '2013-02-01 00:00:00' "
                "AND time_hour < TIMESTAMP '2013-03-01 00:00:00'")
    (feb,), = cur.fetchall()
    assert abs(feb - 6000 * 28 / 90) < 300          # ~1,867 rows; the noise's standard error is ~30
    conn.close()
