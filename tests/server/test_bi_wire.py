"""The BI fixture files through the wire server with psycopg (issue 21).

Every statement of ``tests/fixtures/sql/bi_*.sql`` (Superset, Metabase, Tableau, Power BI,
Looker, dbplyr, SQLAlchemy 2.x) is sent by psycopg 3 to a server over the real engine, with
its parameters bound server side (``$n``), and must return the columns and rows the
in-process DB-API returns for it from the same engine (same released measurements, same
model).  That the in-process answers equal DuckDB's is ``tests/sql/test_sql_bi.py``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from dpsql.display import rounded_rows
from dpsql.server.server import serve
from dpsql.sql.lexer import tokenize

from server_fakes import ADULT_CONFIG, PASSWORD
from test_clients import bounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sql"))
from sql_oracle import load_fixtures  # noqa: E402

TOOLS = ["superset", "metabase", "tableau", "powerbi", "looker", "dbplyr", "sqlalchemy"]
# the time-series statements read the flights table: tests/server/test_time_wire.py serves it
CASES = [(tool, i, case) for tool in TOOLS for i, case in enumerate(load_fixtures(f"bi_{tool}.sql"))
         if case.get("table") != "flights"]
# A few marginals, measured once: enough for plausible answers; equality with the
# in-process driver holds whatever the released measurements are.
WORKLOAD = ["SELECT race, sex, income, COUNT(*) FROM adult GROUP BY 1, 2, 3"] + \
    [f"SELECT {a}, COUNT(*) FROM adult GROUP BY 1" for a in ("age", "education", "occupation", "workclass",
                                                           "hours_per_week")]


@pytest.fixture(scope="module")
def bi_server(users_file, tmp_path_factory):
    import dpsql
    tmp = tmp_path_factory.mktemp("bi")
    overrides = {"ledger": str(tmp / "bi.ledger"), "cache_dir": str(tmp / "cache"),
                 "budget": {"epsilon": 1e7, "delta": 1e-6}, "workload": WORKLOAD,
                 "policy": "infer"}   # BI shapes over attributes never measured together: the model's values
    local = dpsql.connect(ADULT_CONFIG, user="alice", **overrides)   # the server's engine: same ledger
    local.session.measure()
    local.cursor().execute("SET dpsql.error_columns = 'ci95'")   # the server's default for analysts (issue 33)
    thread = serve(ADULT_CONFIG, overrides=overrides, users_file=users_file, shadow=False)
    psycopg = pytest.importorskip("psycopg")
    conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=thread.port, user="alice", password=PASSWORD,
                                           dbname="dpsql", connect_timeout=10, autocommit=True,
                                           sslmode="disable"))
    yield conn, local
    bounded(conn.close)
    thread.stop()
    local.close()


def _psycopg_text(sql: str, params) -> str:
    """The statement as psycopg takes it: '%s' markers, literal '%' doubled."""
    if not params:
        return sql
    out, last = [], 0
    for tok in tokenize(sql):
        if tok.kind == "param":
            out += [sql[last:tok.start].replace("%", "%%"), "%s"]
            last = tok.end
    return "".join(out) + sql[last:].replace("%", "%%")


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b


@pytest.mark.parametrize("tool,i,case", CASES, ids=[f"{t}{i:02d}" for t, i, _ in CASES])
def test_bi_statement_over_the_wire(bi_server, tool, i, case):
    conn, local = bi_server
    params = json.loads(case["params"]) if "params" in case else None
    expected = local.cursor().execute(case["sql"], params)
    # the wire sends each value at its error's precision (dpsql.display, issue 29 item 4)
    want_rows, want_cols = rounded_rows(expected.result), [d[0] for d in expected.description]
    # with error columns on (the server's default) the wire adds the ``inferred`` flag last
    flags = list(expected.result.inferred or [])
    want_cols.append("inferred")
    want_rows = [tuple(row) + (bool(flags[i]) if i < len(flags) else False,) for i, row in enumerate(want_rows)]
    cur = bounded(lambda: conn.execute(_psycopg_text(case["sql"], params), params), timeout=120)
    got_rows = bounded(cur.fetchall)
    assert [d.name for d in cur.description] == want_cols
    assert len(got_rows) == len(want_rows)
    for got, want in zip(got_rows, want_rows):
        assert len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want)), (got, want)
