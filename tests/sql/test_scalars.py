"""One table of scalar functions (dpsql/sql/scalars.py) for the cells of a domain and for
released values (issue 36 item 2): the same call is checked once, with one SQLSTATE and one
message, whichever side evaluates it.  Before the table, ROUND over cells and ROUND over
aggregates had their own checks and messages, and FLOOR's second argument was dropped."""

import math

import numpy as np
import pytest

import dpsql.errors as errors
from dpsql.sql import compile as compile_sql
from dpsql.sql.scalars import SCALARS, round_half_away
from sql_oracle import rows_equal

# the same ROUND argument over cells (GROUP BY an expression of a column) and over values
# (an aggregate), in that order
CELLS = "SELECT round(age / 3.0, {}) AS r, COUNT(*) FROM adult GROUP BY 1"
VALUES = "SELECT round(AVG(age), {}) FROM adult"


def _refusal(catalog, sql):
    with pytest.raises(errors.Error) as info:
        compile_sql(sql, catalog)
    return info.value


@pytest.mark.parametrize("places", ["1.5", "2147483648", "-2147483648", "'2'", "true"])
def test_invalid_round_places_are_refused_alike_over_cells_and_values(catalog, places):
    cells, values = (_refusal(catalog, q.format(places)) for q in (CELLS, VALUES))
    assert type(cells) is type(values) is errors.DataError
    assert cells.sqlstate == values.sqlstate == "22000"
    assert cells.message == values.message == \
        f"round: {places.strip(chr(39)).replace('true', 'True')} is not a valid number of decimal places"
    assert cells.hint == values.hint
    # each points into the decimal places as written
    for err, q in ((cells, CELLS), (values, VALUES)):
        sql = q.format(places)
        start = sql.index(places, sql.index("round")) + 1
        assert start <= err.position < start + len(places)


def test_non_constant_round_places_are_refused_alike(catalog):
    """A column or an aggregate as the places: refused on both sides (over values the first
    group's places were used for every group)."""
    cells = _refusal(catalog, "SELECT round(age / 3.0, age) AS r, COUNT(*) FROM adult GROUP BY 1")
    values = _refusal(catalog, "SELECT sex, round(AVG(age), COUNT(*)) FROM adult GROUP BY sex")
    assert type(cells) is type(values) is errors.UnsupportedQueryError
    assert cells.message.endswith("needs a constant integer number of decimal places")
    assert values.message.endswith("needs a constant integer number of decimal places")
    assert cells.hint == values.hint


@pytest.mark.parametrize("places", ["1 + 1", "NULL", "-1"])
def test_constant_round_places_match_duckdb_over_cells(oracle, places):
    """Constant places that values accepted (1 + 1, NULL: a NULL result) are accepted on cells."""
    sql = f"SELECT round(age / 7.0, {places}) AS r, COUNT(*) FROM adult GROUP BY 1"
    cq, ours = oracle.ours(sql)
    assert rows_equal(oracle.normalise(cq, ours), oracle.duck(sql), False)


def test_round_places_given_by_an_expression_over_values(catalog):
    cq = compile_sql("SELECT round(AVG(age), 1 + 1), round(AVG(age), NULL) FROM adult", catalog)
    rows, _ = cq.postprocess({lq.name: np.array([1234.5678]) for lq in cq.linear_queries})
    assert rows == [(1.0, None)]        # AVG = SUM / COUNT = 1: both answers are 1234.5678


def test_floor_with_a_second_argument_is_refused_not_ignored(catalog):
    for sql in ("SELECT floor(AVG(age), 2) FROM adult",
                "SELECT floor(age / 3.0, 2) AS f, COUNT(*) FROM adult GROUP BY 1",
                "SELECT round(AVG(age), 1, 1) FROM adult"):
        err = _refusal(catalog, sql)
        assert isinstance(err, errors.UnsupportedQueryError) and "argument" in err.message, sql


def test_round_of_a_huge_value_over_cells_keeps_it():
    """An overflowing 10**d·x (x = 1e300 with 300 places) keeps x, as over values; it raised
    OverflowError on cells."""
    assert round_half_away(1e300, 300) == 1e300
    assert round_half_away(-2.5) == -3.0 and round_half_away(2.5) == 3.0 and round_half_away(7, 2) == 7
    assert round_half_away(1234, -2) == 1200.0 and round_half_away(12.5, -400) == 0.0


def test_the_table_applies_to_released_columns_as_to_cells():
    x = np.array([-2.5, 0.4, np.nan, np.inf, 9.0])
    for fn in (f for f in SCALARS.values() if f.numeric):
        got = fn.apply(x)
        for a, r in zip(x.tolist(), got.tolist()):
            want = None if math.isnan(a) else fn.value(a)
            assert (math.isnan(r) if want is None else r == want), (fn.name, a, r, want)


def test_output_types_follow_one_rule_in_a_query_and_an_outer_stage(catalog, toracle):
    """ir.type_of types both levels: COALESCE/NULLIF of a text key were 'double precision' in
    a query and 'text' over a subquery; to_char over a subquery was 'double precision'."""
    inner = "SELECT sex, COALESCE(sex, 'none') AS c, NULLIF(sex, 'x') AS n, COUNT(*) AS k FROM adult GROUP BY sex"
    assert [c.type for c in compile_sql(inner, catalog).columns[:3]] == ["text"] * 3
    outer = compile_sql(f"SELECT sex, COALESCE(sex, 'none') AS c, NULLIF(sex, 'x') AS n FROM ({inner}) t", catalog)
    assert [c.type for c in outer.columns] == ["text"] * 3
    month = "SELECT DATE_TRUNC('month', flight_date) AS m, COUNT(*) AS k FROM flights GROUP BY 1"
    top = compile_sql(f"SELECT TO_CHAR(m, 'YYYY-MM') AS label, k FROM ({month}) t", toracle.catalog)
    assert top.columns[0].type == "text"
    ours = top.postprocess({lq.name: np.ones(lq.matrix.shape[0]) for lq in top.linear_queries})[0]
    assert ours[0][0] == "2013-01"


def test_cast_of_values_converts_as_on_cells(oracle, catalog):
    """CAST over released values returned its argument unchanged (CAST(AVG(age) AS INTEGER)
    gave 38.58…, typed double precision); it now converts each value as on cells, typed as
    the target, and equals DuckDB on exact answers."""
    sql = "SELECT sex, CAST(AVG(age) AS INTEGER) AS a, CAST(SUM(age) AS DOUBLE) AS s FROM adult GROUP BY sex"
    cq, ours = oracle.ours(sql)
    assert [c.type for c in cq.columns] == ["text", "integer", "double precision"]
    assert rows_equal(oracle.normalise(cq, ours), oracle.duck(sql), False)
    assert all(isinstance(r[1], int) for r in ours)
    text = compile_sql("SELECT sex, CAST(COUNT(*) AS TEXT) FROM adult GROUP BY sex", catalog)
    assert text.columns[1].type == "text"
    assert text.postprocess({lq.name: np.full(lq.matrix.shape[0], 12.5) for lq in text.linear_queries})[0] \
        == [("Female", "12.5"), ("Male", "12.5")]
    one = compile_sql("SELECT CAST(AVG(age) AS INTEGER) FROM adult", catalog)
    answers = {lq.name: np.array([77.2]) for lq in one.linear_queries}      # AVG = 77.2 / 77.2
    rows, errs = one.postprocess(answers, {k: np.ones(1) for k in answers})
    assert isinstance(rows[0][0], int) and errs[0][0] is not None    # its error passes through


def test_a_cast_refused_on_cells_is_refused_alike_on_values(catalog):
    cells = _refusal(catalog, "SELECT CAST(age / 7.0 AS BOOLEAN) AS b, COUNT(*) FROM adult GROUP BY 1")
    values = _refusal(catalog, "SELECT CAST(AVG(age) AS BOOLEAN) FROM adult")
    assert type(cells) is type(values) is errors.UnsupportedQueryError
    assert cells.message == values.message == "cast to boolean is not supported"
    cq = compile_sql("SELECT sex, CAST(sex AS INTEGER) FROM adult GROUP BY sex", catalog)
    with pytest.raises(errors.DomainViolationError) as keys:
        cq.postprocess({lq.name: np.ones(lq.matrix.shape[0]) for lq in cq.linear_queries})
    cells = _refusal(catalog, "SELECT CAST(sex AS INTEGER) AS s, COUNT(*) FROM adult GROUP BY 1")
    assert keys.value.message == cells.message and "cannot cast" in cells.message


@pytest.mark.parametrize("fmt", ["5", "flight_date"])
def test_to_char_format_is_checked_alike_on_cells_and_values(toracle, fmt):
    """to_char over a grouped key accepted a numeric format (every row the text '5') and
    refused a column as an unsupported function; on cells both were 'needs a constant format'."""
    cells = _refusal(toracle.catalog, f"SELECT to_char(flight_date, {fmt}) AS x, COUNT(*) FROM flights GROUP BY 1")
    month = "date_trunc('month', flight_date)"
    values = _refusal(toracle.catalog, f"SELECT to_char({month}, {fmt}), COUNT(*) FROM flights GROUP BY {month}")
    assert type(cells) is type(values) is errors.UnsupportedQueryError
    assert cells.message == values.message == "to_char needs a constant format"
    assert cells.position == 29 and values.position == 50       # at the format, as written


def _edge_values():
    rng = np.random.default_rng(7)
    halves = np.arange(-20, 21) / 2.0                    # ties: half away from zero
    return np.concatenate([
        halves, halves / 100, rng.normal(0, 1e3, 400), rng.normal(0, 1e-3, 200), rng.normal(0, 1e18, 50),
        [0.0, -0.0, -0.3, 0.3, -0.5, 0.5, 2.0 ** 53 + 2, -(2.0 ** 60), 1e308, -1e308, 5e-324,
         math.inf, -math.inf, math.nan]])


@pytest.mark.parametrize("name,constants", [("round", ()), ("round", (1,)), ("round", (2,)), ("round", (15,)),
                                            ("round", (-1,)), ("round", (-3,)), ("round", (-309,)),
                                            ("round", (309,)), ("round", (300,)), ("round", (-300,)),
                                            ("floor", ()), ("ceil", ()), ("abs", ()), ("sqrt", ())])
def test_functions_apply_to_a_whole_released_column_to_the_bit(name, constants, monkeypatch):
    """Issue 35: ROUND & co. over released values take the column at once (35 ms value by
    value on 100,000 rows), with the bits of the function on each value, signed zeros and
    NULLs (NaN) included."""
    import dataclasses
    fn = SCALARS[name]
    x = _edge_values()
    want = np.array([math.nan if math.isnan(a) else (math.nan if (r := fn.value(a, *constants)) is None else float(r))
                     for a in x.tolist()])
    monkeypatch.setitem(SCALARS, name, dataclasses.replace(
        fn, value=lambda *a: pytest.fail("applied value by value")))
    got = SCALARS[name].apply(x, *constants)
    assert got.dtype == np.float64
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok]) and np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def test_cast_of_released_values_to_integer_takes_the_whole_column(monkeypatch):
    """CAST(AVG(x) AS INTEGER) over released rows rounds half to even by cast_value, value by
    value before; the column at once gives the same bits (signed zeros, ties, ±inf, NaN)."""
    from dpsql.sql import relation
    from dpsql.sql.scalars import cast_value
    from sqlglot import exp
    to = exp.DataType.Type.INT
    x = _edge_values()
    want = np.array([a if not math.isfinite(a) else float(cast_value(a, to)) for a in x.tolist()])
    monkeypatch.setattr(relation, "cast_value", lambda *a: pytest.fail("cast value by value"))
    got = relation._cast(relation.V(x.copy(), {0: np.ones(x.size)}), to)
    assert np.array_equal(np.isnan(got.val), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got.val[ok], want[ok]) and np.array_equal(np.signbit(got.val[ok]), np.signbit(want[ok]))
    assert np.array_equal(got.grad[0], np.ones(x.size))
