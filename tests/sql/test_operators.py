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
    cells, DataError (22000) with the noisy value in the message over aggregates."""
    cells = _refusal(catalog, "SELECT CASE WHEN age / 10.0 > 'abc' THEN 1 ELSE 0 END AS b, COUNT(*) "
                              "FROM adult GROUP BY 1")
    values = _post_refusal(catalog, "SELECT CASE WHEN AVG(age) > 'abc' THEN 1 ELSE 0 END FROM adult")
    outer = _post_refusal(catalog, f"SELECT sex FROM ({INNER}) t WHERE k > 'abc'")
    assert type(cells) is type(values) is type(outer) is errors.DomainViolationError
    assert cells.sqlstate == values.sqlstate == outer.sqlstate == "22023"
    assert cells.message == values.message == outer.message == "cannot compare double precision with text"
    assert cells.hint == values.hint == outer.hint
    assert "5.0" not in values.message          # never a released (noisy) value in a message


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
