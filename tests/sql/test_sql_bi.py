"""The SQL BI tools send (issue 21): one fixture file per tool, every statement answered and
equal to DuckDB's answer on the same binned data (exact linear-query answers, as a
near-infinite budget gives).  The statements and where their shapes come from are
described at the top of each ``tests/fixtures/sql/bi_*.sql``."""

from __future__ import annotations

import json

import pytest
import sqlglot

from dpsql.sql.lexer import tokenize
from sql_oracle import load_fixtures, rows_equal

TOOLS = ["superset", "metabase", "tableau", "powerbi", "looker", "dbplyr", "sqlalchemy"]
CASES = [(tool, i, case) for tool in TOOLS for i, case in enumerate(load_fixtures(f"bi_{tool}.sql"))]


def inline(sql: str, params) -> str:
    """The statement with its '?' markers replaced by SQL literals (for DuckDB's side)."""
    if not params:
        return sql
    out, last, k = [], 0, 0
    for tok in tokenize(sql):
        if tok.kind == "param":
            v = params[k]
            k += 1
            lit = "NULL" if v is None else repr(v) if isinstance(v, (int, float)) else \
                "'" + str(v).replace("'", "''") + "'"
            out += [sql[last:tok.start], lit]
            last = tok.end
    return "".join(out) + sql[last:]


def test_every_tool_has_its_fixtures():
    counts = {t: sum(1 for c in CASES if c[0] == t) for t in TOOLS}
    assert all(n >= 8 for n in counts.values()), counts


@pytest.mark.parametrize("tool,i,case", CASES, ids=[f"{t}{i:02d}" for t, i, _ in CASES])
def test_bi_statement_matches_duckdb(oracle, toracle, tool, i, case):
    if case.get("table") == "flights":      # time-series charts (issue 30): the flights table
        oracle = toracle
    params = json.loads(case["params"]) if "params" in case else None
    cq, ours = oracle.ours(case["sql"], params=params)
    assert not cq.is_schema_probe
    text = inline(case["sql"], params)
    theirs = oracle.duck(text)
    ours = oracle.normalise(cq, ours)
    ordered = sqlglot.parse_one(text, read="postgres").args.get("order") is not None
    assert rows_equal(ours, theirs, ordered), f"\nours:   {ours[:12]}\nduckdb: {theirs[:12]}"
