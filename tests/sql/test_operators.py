"""Operators written once for the cells of a domain and for released values (issue 36 item
2): the same misuse of division, a comparison, COALESCE, NULLIF or CASE gives one SQLSTATE
and one message whichever side evaluates it (a GROUP BY expression of a column, an
expression of aggregates, an outer stage over a subquery's rows)."""

import numpy as np
import pytest

import dpsql.errors as errors
from dpsql.sql import compile as compile_sql

INNER = "SELECT sex, COUNT(*) AS k FROM adult GROUP BY sex"


def _refusal(catalog, sql):
    with pytest.raises(errors.Error) as info:
        compile_sql(sql, catalog)
    return info.value


def _post_refusal(catalog, sql):
    """The error of post-processing ``sql``'s (made-up, public) answers."""
    cq = compile_sql(sql, catalog)
    with pytest.raises(errors.Error) as info:
        cq.postprocess({lq.name: np.full(lq.matrix.shape[0], 5.0) for lq in cq.linear_queries})
    return info.value


def _rows(catalog, sql):
    cq = compile_sql(sql, catalog)
    return cq.postprocess({lq.name: np.full(lq.matrix.shape[0], 5.0) for lq in cq.linear_queries})[0]


@pytest.mark.parametrize("op", ["/", "%"])
def test_division_by_a_literal_zero_is_refused_alike(catalog, op):
    """Over cells it was refused (0A000); over an aggregate or an outer stage's column it was
    a NULL in every row, after the budget was spent."""
    cells = _refusal(catalog, f"SELECT age {op} 0 AS x, COUNT(*) FROM adult GROUP BY 1")
    values = _refusal(catalog, f"SELECT AVG(age) {op} 0 FROM adult")
    outer = _refusal(catalog, f"SELECT sex, k {op} 0 FROM ({INNER}) t")
    assert type(cells) is type(values) is type(outer) is errors.UnsupportedQueryError
    assert cells.sqlstate == values.sqlstate == outer.sqlstate == "0A000"
    assert cells.message == values.message == outer.message == "division by zero"
    assert cells.hint == values.hint == outer.hint
    assert cells.position == 8 and values.position == 8     # at the division as written


def test_a_divisor_zero_only_on_some_rows_stays_null(catalog):
    rows = _rows(catalog, f"SELECT sex, k / (k - 5) AS q FROM ({INNER}) t")
    assert [r[1] for r in rows] == [None, None]


def test_an_impossible_comparison_is_refused_alike(catalog):
    """A number against text: DomainViolationError (22023) with the values in the message on
    cells; over aggregates DataError (22000) with the noisy value in the message, raised
    only when the answers were post-processed (after measuring).  Now one message, and
    over values a refusal at compile time, from the IR's types."""
    cells = _refusal(catalog, "SELECT CASE WHEN age / 10.0 > 'abc' THEN 1 ELSE 0 END AS b, COUNT(*) "
                              "FROM adult GROUP BY 1")
    values = _refusal(catalog, "SELECT CASE WHEN AVG(age) > 'abc' THEN 1 ELSE 0 END FROM adult")
    outer = _refusal(catalog, f"SELECT sex FROM ({INNER}) t WHERE k > 'abc'")
    having = _refusal(catalog, "SELECT sex FROM adult GROUP BY sex HAVING 'abc' <= COUNT(*)")
    assert type(cells) is type(values) is type(outer) is errors.DomainViolationError
    assert cells.sqlstate == values.sqlstate == outer.sqlstate == "22023"
    assert cells.message == values.message == outer.message == "cannot compare double precision with text"
    assert having.message == "cannot compare text with double precision"
    assert cells.hint == values.hint == outer.hint == having.hint
    assert values.position == 18 and outer.position == 77        # at the comparison as written
    mixed = _refusal(catalog, "SELECT sex, CASE WHEN COUNT(*) > 3 THEN 'x' ELSE 1 END > 2 FROM adult GROUP BY sex")
    assert mixed.message == "cannot compare text with integer"     # a CASE of text and numbers is text


def test_a_time_compared_with_text_reads_the_text_as_a_time(toracle):
    """On cells '2013-03-01' is a date against date_trunc's value; over a subquery's rows the
    comparison raised 'cannot compare'."""
    month = "date_trunc('month', flight_date)"
    cells = compile_sql(f"SELECT {month} AS m, COUNT(*) FROM flights WHERE {month} >= '2013-03-01' "
                        "GROUP BY 1", toracle.catalog)
    want = len(cells.postprocess({lq.name: np.ones(lq.matrix.shape[0]) for lq in cells.linear_queries})[0])
    inner = f"SELECT {month} AS m, COUNT(*) AS k FROM flights GROUP BY 1"
    for where in ("m >= '2013-03-01'", "'2013-03-01' <= m"):
        outer = compile_sql(f"SELECT m, k FROM ({inner}) t WHERE {where}", toracle.catalog)
        rows = outer.postprocess({lq.name: np.ones(lq.matrix.shape[0]) for lq in outer.linear_queries})[0]
        assert 0 < len(rows) == want and all(str(r[0]) >= "2013-03-01" for r in rows), where


@pytest.mark.parametrize("then, other, want", [("'m'", "'f'", "text"), ("1", "0", "integer"),
                                               ("true", "false", "boolean"), ("1", "0.5", "double precision"),
                                               ("'m'", "NULL", "text")])
def test_a_case_is_typed_by_one_rule_over_cells_and_values(catalog, then, other, want):
    """A CASE over released values (an aggregate, a group key, an outer stage's column) was
    'double precision' whatever its branches; GROUP BY the same CASE over cells typed it by
    its values.  COALESCE of values took its first argument's type."""
    case = "CASE WHEN {} THEN " + then + " ELSE " + other + " END"
    cells = compile_sql(f"SELECT {case.format('age > 30')} AS c, COUNT(*) FROM adult GROUP BY 1", catalog)
    key = compile_sql(f"SELECT sex, {case.format(chr(39).join(['sex = ', 'Male', '']))} FROM adult GROUP BY sex",
                      catalog)
    agg = compile_sql(f"SELECT sex, {case.format('COUNT(*) > 3')} FROM adult GROUP BY sex", catalog)
    outer = compile_sql(f"SELECT sex, {case.format('k > 3')} FROM ({INNER}) t", catalog)
    assert cells.columns[0].type == key.columns[1].type == agg.columns[1].type == outer.columns[1].type == want
    if want == "integer":
        assert _rows(catalog, f"SELECT sex, {case.format('COUNT(*) > 3')} FROM adult GROUP BY sex") == \
            [("Female", 1), ("Male", 1)]


def test_coalesce_is_typed_by_all_its_arguments(catalog):
    cq = compile_sql("SELECT age, COALESCE(age, 0.5), COALESCE(NULL, age) FROM adult GROUP BY age", catalog)
    assert [c.type for c in cq.columns] == ["integer", "double precision", "integer"]


def test_if_and_nullif_are_the_case_they_stand_for_over_cells_and_values(catalog):
    """IF(c, a, b) over cells was CASE WHEN c THEN a ELSE b END; over values it was refused
    as an unsupported function.  NULLIF is CASE WHEN a = b THEN NULL ELSE a END on both
    sides (scalars.as_case), its argument's standard error kept where it is not NULL."""
    cells = compile_sql("SELECT IF(age > 30, 'old', 'young') AS c, COUNT(*) FROM adult GROUP BY 1", catalog)
    assert cells.columns[0].type == "text"
    values = "SELECT sex, IF(COUNT(*) > 3, 'big', 'small'), CASE WHEN COUNT(*) > 3 THEN 'big' ELSE 'small' END " \
             "FROM adult GROUP BY sex"
    assert [c.type for c in compile_sql(values, catalog).columns] == ["text"] * 3
    assert all(r[1] == r[2] == "big" for r in _rows(catalog, values))
    cq = compile_sql("SELECT sex, NULLIF(COUNT(*), 5), NULLIF(COUNT(*), 4), NULLIF(sex, 'Male') FROM adult "
                     "GROUP BY sex", catalog)
    answers = {lq.name: np.full(lq.matrix.shape[0], 5.0) for lq in cq.linear_queries}
    rows, errs = cq.postprocess(answers, {k: np.ones_like(v) for k, v in answers.items()})
    assert rows == [("Female", None, 5, "Female"), ("Male", None, 5, None)]
    assert [e[2] for e in errs] == [1.0, 1.0]          # COUNT's, kept
