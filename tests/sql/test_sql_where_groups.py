"""A WHERE on a grouped attribute decides, from the SQL and the declared domain alone, which
groups can have rows: the others are not listed, as in PostgreSQL and DuckDB.

Unlike ``test_sql_fixtures.py``, these comparisons drop no empty group: every group of the
fixtures that can satisfy its WHERE has rows in examples/adult, so the compiled rows on the
exact marginals must equal DuckDB's rows as they are.  The groups that *can* satisfy the
WHERE stay listed whatever their count (that choice must not depend on the data); see
``test_empty_groups_are_returned_with_zero_counts`` in test_sql_compile.py.
"""

import pytest
import sqlglot

from dpsql.sql import compile as compile_sql
from dpsql.sql.postprocess import run_program
from sql_oracle import load_fixtures, rows_equal

CASES = load_fixtures("where_groups.sql")


def test_fixture_count():
    assert len(CASES) >= 25 and all("groups" in c for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"w{i:02d}" for i in range(len(CASES))])
def test_rows_equal_duckdb_without_dropping_groups(oracle, case):
    cq = compile_sql(case["sql"], oracle.catalog)
    assert len(cq.groups) == int(case["groups"]), cq.groups
    answers = {lq.name: oracle.answer(lq) for lq in cq.linear_queries}
    ours, _ = run_program(cq, answers, None)
    theirs = oracle.duck(case["sql"])
    ours = oracle.normalise(cq, ours)
    ordered = sqlglot.parse_one(case["sql"], read="postgres").args.get("order") is not None
    assert rows_equal(ours, theirs, ordered), f"\nours:   {ours[:12]}\nduckdb: {theirs[:12]}"


def _rows(oracle, sql):
    cq = compile_sql(sql, oracle.catalog)
    answers = {lq.name: oracle.answer(lq) for lq in cq.linear_queries}
    return cq, run_program(cq, answers, None)[0]


def test_listed_groups_ignore_filter_clauses(oracle):
    # FILTER restricts one aggregate, not the groups: SQL lists 'Male' with a zero count.
    cq, rows = _rows(oracle, "SELECT sex, COUNT(*) FILTER (WHERE sex = 'Female') FROM adult GROUP BY sex")
    assert [r[0] for r in rows] == ["Female", "Male"] and rows[1][1] == 0


def test_no_group_can_satisfy(oracle):
    # A WHERE that no cell satisfies (decided from the domain) lists no group at all, and
    # measures nothing.
    cq, rows = _rows(oracle, "SELECT sex, COUNT(*) FROM adult WHERE sex = 'Male' AND sex = 'Female' GROUP BY sex")
    assert rows == [] and cq.groups == [] and cq.linear_queries == []
    # Without GROUP BY, SQL still returns its one row (COUNT = 0).
    cq, rows = _rows(oracle, "SELECT COUNT(*) FROM adult WHERE sex = 'Male' AND sex = 'Female'")
    assert rows == [(0,)]


def test_explain_counts_listed_groups(oracle):
    cq = compile_sql("EXPLAIN SELECT age, COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 GROUP BY age",
                     oracle.catalog)
    assert "groups: 11" in cq.explain()
