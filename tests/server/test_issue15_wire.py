"""Issue 15 over the wire (policy "measure"): one hostile row in the private table no longer
decides whether an analyst's query succeeds (was SQLSTATE 58000 naming the DuckDB exception
class: D and D + 1 row told apart at no cost), nor moves other rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpsql.server.server import serve

from server_fakes import PASSWORD
from test_clients import bounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from test_issue15 import ROWS, make  # noqa: E402

HOSTILE = ["p0,NA,Male,1,Zürich", "p0,40,Male,x1,Zürich", "p0,40,Male,1,Zürich,extra", 'p0,"40,Male,1,']


@pytest.mark.parametrize("extra", [None] + HOSTILE)
def test_measure_policy_over_the_wire_ignores_one_hostile_row(users_file, tmp_path, extra):
    psycopg = pytest.importorskip("psycopg")
    config = make(tmp_path, ROWS + ([extra] if extra else []))
    thread = serve(str(config), users_file=users_file, shadow=False)
    try:
        conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=thread.port, user="alice",
                                               password=PASSWORD, dbname="dpsql", connect_timeout=10,
                                               autocommit=True, sslmode="disable"))
        try:
            rows = bounded(lambda: conn.execute("SELECT age, COUNT(*) FROM t GROUP BY age").fetchall(),
                           timeout=120)
            assert len(rows) == 8
            assert round(sum(n for _, n, *_ in rows)) == 60 + (extra is not None)
        finally:
            bounded(conn.close)
    finally:
        thread.stop()
