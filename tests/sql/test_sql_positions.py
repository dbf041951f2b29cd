"""Select-list positions in ORDER BY and GROUP BY (``dpsql.sql.cells.position_literal``).

Both clauses share one check: an integer literal names a select-list item, 1-based; outside
1..n it is refused with SQLSTATE 0A000, the clause's name, the valid range as the hint and
the literal's position; any other constant (1.5, 'a') is not a position and is treated as an
expression, as before the check was shared.
"""

import pytest

import dpsql.errors as errors
from dpsql.sql import compile as compile_sql

SQL = {
    "ORDER BY": "SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY {}",
    "GROUP BY": "SELECT sex, COUNT(*) FROM adult GROUP BY {}",
}


def exact(oracle, cq):
    return {lq.name: oracle.answer(lq) for lq in cq.linear_queries}


@pytest.mark.parametrize("clause", sorted(SQL))
@pytest.mark.parametrize("literal, value", [("0", 0), ("-1", -1), ("3", 3), ("-0", 0), ("100", 100)])
def test_position_outside_the_select_list_is_refused(catalog, clause, literal, value):
    sql = SQL[clause].format(literal)
    with pytest.raises(errors.UnsupportedQueryError) as info:
        compile_sql(sql, catalog)
    err = info.value
    assert err.sqlstate == "0A000"
    assert str(err).splitlines()[0] == f"{clause} position {value} is not in select list"
    assert err.hint == "use 1..2"
    # the position points at the literal's digits (1-based), past a sign
    assert sql[err.position - 1:] == literal.lstrip("-")


def test_order_by_position_sorts_by_that_output(oracle, catalog):
    for literal, desc in (("2", False), ("2 DESC", True), ("(2) DESC", True), ("CAST(2 AS INTEGER)", False)):
        cq = compile_sql(SQL["ORDER BY"].format(literal), catalog)
        rows, _ = cq.postprocess(exact(oracle, cq))
        truth = oracle.duck(f"SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY 2 {'DESC' if desc else ''}")
        assert [tuple(r) for r in rows] == [tuple(r) for r in truth], literal
    cq = compile_sql(SQL["ORDER BY"].format("1 DESC"), catalog)
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert [r[0] for r in rows] == ["Male", "Female"]


def test_group_by_position_groups_by_that_item(oracle, catalog):
    for literal in ("1", "(1)"):
        cq = compile_sql(SQL["GROUP BY"].format(literal), catalog)
        assert cq.groups == [("Female",), ("Male",)]
        rows, _ = cq.postprocess(exact(oracle, cq))
        assert sorted(tuple(r) for r in rows) == sorted(
            tuple(r) for r in oracle.duck("SELECT sex, COUNT(*) FROM adult GROUP BY sex"))
    # position 2 is the aggregate: the item's own rule applies, not the range check
    with pytest.raises(errors.UnsupportedQueryError, match="aggregate functions are not allowed in GROUP BY"):
        compile_sql(SQL["GROUP BY"].format("2"), catalog)


@pytest.mark.parametrize("literal", ["1.5", "'a'", "TRUE"])
def test_non_integer_constant_is_not_a_position(oracle, catalog, literal):
    # ORDER BY a constant: the rows keep the group order
    cq = compile_sql(SQL["ORDER BY"].format(literal), catalog)
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert [r[0] for r in rows] == ["Female", "Male"]
    # GROUP BY a constant does not split the groups
    cq = compile_sql(f"SELECT COUNT(*) FROM adult GROUP BY {literal}", catalog)
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert [tuple(r) for r in rows] == [tuple(r) for r in oracle.duck("SELECT COUNT(*) FROM adult")]
    # ... so a bare column beside it is still refused
    with pytest.raises(errors.PrivacyViolationError):
        compile_sql(SQL["GROUP BY"].format(literal), catalog)
