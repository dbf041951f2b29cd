"""TIME (time-of-day) columns on the wire: a grain of a TIME column goes out as ``time``
(OID 1083) in PostgreSQL's text and binary forms, so psycopg gets ``datetime.time`` and psql
prints ``06:00:00``; the catalog declares the column as ``time without time zone``."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import struct
import subprocess
from pathlib import Path

import duckdb
import pytest

from dpsql.domain_file import load_domain
from dpsql.server import pgtypes
from dpsql.server.shadow import schema_ddl
from dpsql.testing import write_config

from server_fakes import PASSWORD
from test_clients import bounded

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sql"
RAW_SQL = """SELECT
    CASE WHEN i % 61 = 0 THEN NULL ELSE TIME '05:00:00' + to_minutes(CAST((i * 6151) % 1140 AS BIGINT)) END
        AS sched_dep_time,
    CASE WHEN i % 37 = 0 THEN NULL ELSE TIME '00:00:00' + to_seconds(CAST((i * 104729) % 86400 AS BIGINT)) END
        AS dep_time,
    (['AA', 'B6', 'DL', 'UA'])[1 + CAST(i % 4 AS INTEGER)] AS carrier
    FROM range(3000) r(i)"""
GRAIN = ("SELECT date_trunc('hour', sched_dep_time) AS h, COUNT(*) AS n FROM departures "
         "WHERE sched_dep_time >= %s AND sched_dep_time < '09:00' GROUP BY 1 ORDER BY 1")


def test_time_values_in_text_and_binary():
    assert pgtypes.oid_for("time") == 1083 and pgtypes.oid_for("time without time zone") == 1083
    t = dt.time(10, 5, 0, 500000)
    assert pgtypes.encode_text(t, 1083) == b"10:05:00.5"
    assert pgtypes.encode_text(dt.time(6), 1083) == b"06:00:00"
    # binary: microseconds since midnight (PostgreSQL's time_send)
    assert pgtypes.encode_binary(dt.time(0, 0, 1), 1083) == struct.pack("!q", 1_000_000)
    assert pgtypes.decode_param(pgtypes.encode_binary(t, 1083), 1083, 1) == t
    assert pgtypes.type_size(1083) == 8


def test_the_catalog_declares_time_columns():
    ddl = "\n".join(schema_ddl(load_domain(FIXTURES / "departures.toml")))
    assert "sched_dep_time time without time zone" in ddl or '"sched_dep_time" time without time zone' in ddl


@pytest.fixture(scope="module")
def departures_server(measured_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("departures_wire")
    duckdb.sql(f"COPY ({RAW_SQL}) TO '{tmp / 'd.parquet'}' (FORMAT parquet)")
    config = write_config(tmp, table="departures", domain=FIXTURES / "departures.toml",
                          source={"parquet": tmp / "d.parquet"}, epsilon=1e7,
                          queries=["SELECT sched_dep_time, carrier, COUNT(*) FROM departures GROUP BY 1, 2"],
                          dpsql={"policy": "infer"})
    return measured_server(config)


@pytest.mark.parametrize("binary", [False, True])
def test_psycopg_gets_times_of_day(departures_server, binary):
    conn, local = departures_server
    cur = conn.cursor(binary=binary)
    bounded(lambda: cur.execute(GRAIN, (dt.time(6, 0),)))
    rows = bounded(cur.fetchall)
    assert [r[0] for r in rows] == [dt.time(6), dt.time(7), dt.time(8)]
    assert cur.description[0].type_code == 1083
    exact = duckdb.sql(f"SELECT hour(sched_dep_time), COUNT(*) FROM ({RAW_SQL}) WHERE sched_dep_time >= TIME '06:00' "
                       "AND sched_dep_time < TIME '09:00' GROUP BY 1 ORDER BY 1").fetchall()
    assert [round(r[1]) for r in rows] == [n for _, n in exact]      # at ε = 1e7: the exact counts
    # the in-process driver returns the same times
    local_rows = local.cursor().execute(GRAIN.replace("%s", "'06:00'")).fetchall()
    assert [r[0] for r in local_rows] == [r[0] for r in rows]


def test_psql_prints_times_of_day(departures_server):
    if shutil.which("psql") is None:
        pytest.skip("psql not installed")
    conn, _ = departures_server
    env = dict(os.environ, PGPASSWORD=PASSWORD, PGCONNECT_TIMEOUT="10", PGSSLMODE="disable",
               PGOPTIONS="-c dpsql.error_columns=off")
    r = subprocess.run(["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(conn.info.port), "-U", "alice", "-d",
                        "dpsql", "-c", GRAIN.replace("%s", "TIME '07:00'")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [line.split("|")[0] for line in r.stdout.splitlines() if line] == ["07:00:00", "08:00:00"]
