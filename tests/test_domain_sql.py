"""Agreement of ``dpsql.measure.cellsql.index_sql`` (run in DuckDB) with ``Attribute.index_of`` (Python).

The test table is adversarial: NULLs, values outside the domain, values exactly on bin
edges, negatives, NaN and infinities, and strings differing only by case or whitespace.
Every row's SQL cell index must equal the Python one, with no tolerance.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pytest
import sqlglot
from sqlglot import exp

from dpsql.domain import Categorical, IntegerRange, Numeric
from dpsql.domain_file import load_domain
from dpsql.measure.cellsql import index_sql

ADULT_TOML = Path(__file__).resolve().parent.parent / "examples" / "adult" / "adult.toml"

INTS = [None, -1000, -11, -10, -9, -7, -6, -3, -2, -1, 0, 1, 2, 5, 6, 9, 10, 11, 17, 29, 30, 90,
        91, 999, 1000, 99998, 99999, 100000, 2 ** 40]
FLOATS = [None, float("nan"), float("inf"), float("-inf"), -1e300, -1.5, -1.5000000001, -0.5, -0.0,
          0.0, 1e-300, 0.1, 0.30000000000000004, 0.3, 0.29999999999999993, 1.999999, 2.0, 2.0000001,
          7.25, 1e300, 29.5, -6.5]
STRINGS = [None, "White", "white", "WHITE", " White", "White ", "", "Black", "Other", "other",
           "(other)", "Bl ack", "Whité", "<=50K", ">50K", "<=50k", "NULL"]

rng = np.random.default_rng(20261122)
INTS += rng.integers(-400, 400, size=200).tolist()
FLOATS += rng.normal(0, 3, size=200).round(rng.integers(0, 4)).tolist()


def _table(con, name: str, sql_type: str, values) -> None:
    con.execute(f"CREATE TABLE {name} (v {sql_type})")
    con.executemany(f"INSERT INTO {name} VALUES (?)", [[v] for v in values])


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    _table(con, "ints", "BIGINT", INTS)
    _table(con, "floats", "DOUBLE", FLOATS)
    _table(con, "strings", "VARCHAR", STRINGS)
    _table(con, "codes", "INTEGER", [None, 1, 2, 3, 4, 0, -1])
    yield con
    con.close()


def _agree(con, attribute, table: str, column: exp.Expression | str = "v") -> int:
    """Run index_sql over ``table`` and compare every row with index_of; returns rows checked."""
    query = exp.select(exp.column("v"), exp.alias_(index_sql(attribute, column), "cell")).from_(table)
    rows = con.execute(query.sql("duckdb")).fetchall()
    mismatches = [(v, cell, attribute.index_of(v)) for v, cell in rows if cell != attribute.index_of(v)]
    assert not mismatches, mismatches[:10]
    assert all(0 <= cell < attribute.size for _, cell in rows)
    return len(rows)


CATEGORICALS = [
    Categorical("race", ["White", "Black", "Other"], nullable=True),
    Categorical("race", ["White", "Black", "Other"]),
    Categorical("race", ["White", "Black"], nullable=True, closed=True),
    Categorical("race", ["White", "Black"], closed=True),
    Categorical("income", ["<=50K", ">50K"], closed=True),
    Categorical("odd", ["", "(o'ther)", "NULL", "white"], nullable=True),
]

INTEGERS = [
    IntegerRange("age", 17, 90),
    IntegerRange("age", 17, 90, nullable=True),
    IntegerRange("t", -10, 10, bin_width=4, nullable=True),
    IntegerRange("t", -10, 10, bin_width=3),
    IntegerRange("gain", 0, 99999, edges=[0, 1, 1000, 2500, 99999]),
    IntegerRange("wide", -300, 300, nullable=True),  # 601 bins: exercises the nested CASE
    IntegerRange("one", 5, 5),
]

NUMERICS = [
    Numeric("x", [-1.5, -0.5, 0, 0.1, 0.3, 2.0], nullable=True),
    Numeric("x", [-1.5, 0.30000000000000004, 2.0]),
    Numeric("x", [0, 1]),
    Numeric("x", np.linspace(-5, 5, 101).tolist(), nullable=True),  # nested CASE over floats
]


@pytest.mark.parametrize("attribute", CATEGORICALS, ids=lambda a: repr(a))
def test_categorical_sql_agrees(con, attribute):
    assert _agree(con, attribute, "strings") == len(STRINGS)


def test_integer_label_categorical_sql_agrees(con):
    for attribute in (Categorical("code", [1, 2, 3], nullable=True), Categorical("code", [1, 2], closed=True)):
        _agree(con, attribute, "codes")


@pytest.mark.parametrize("attribute", INTEGERS, ids=lambda a: repr(a))
def test_integer_sql_agrees(con, attribute):
    _agree(con, attribute, "ints")
    # The measurement engine may hand integer attributes DOUBLE values (29.5, NaN, inf).
    _agree(con, attribute, "floats")


@pytest.mark.parametrize("attribute", NUMERICS, ids=lambda a: repr(a))
def test_numeric_sql_agrees(con, attribute):
    _agree(con, attribute, "floats")
    _agree(con, attribute, "ints")


def test_float32_and_decimal_columns(con):
    """CAST to DOUBLE makes REAL/DECIMAL columns compare like Python floats at an edge like 0.1."""
    con.execute("CREATE TEMP TABLE reals AS SELECT CAST(v AS REAL) AS v FROM floats "
                "WHERE v IS NULL OR NOT isfinite(v) OR abs(v) < 1e30")
    con.execute("CREATE TEMP TABLE decimals AS SELECT CAST(v AS DECIMAL(9, 4)) AS v FROM floats "
                "WHERE v IS NULL OR (isfinite(v) AND abs(v) < 1e4)")
    for attribute in NUMERICS + INTEGERS[2:5]:
        _agree(con, attribute, "reals")
        _agree(con, attribute, "decimals")
    x = Numeric("x", [0, 0.1, 0.3, 1])
    assert x.index_of(Decimal("0.1")) == 1 and x.index_of(Decimal("0.0999")) == 0


def test_index_sql_accepts_expressions(con):
    """A column expression (as the measurement engine passes) works like a column name."""
    a = IntegerRange("age", 17, 90, nullable=True)
    text = exp.column("s")
    try_cast = exp.TryCast(this=text, to=exp.DataType.build("DOUBLE"))
    query = exp.select(exp.column("s"), exp.alias_(index_sql(a, try_cast), "cell")).from_(
        exp.Subquery(this=sqlglot.parse_one(
            "SELECT * FROM (VALUES ('17'), ('90.0'), ('abc'), (NULL), ('-5'), ('1e9')) AS t(s)"), alias="u"))
    got = dict(con.execute(query.sql("duckdb")).fetchall())
    assert got == {"17": 0, "90.0": 73, "abc": 74, None: 74, "-5": 0, "1e9": 73}


def test_generated_sql_is_portable():
    """No engine-specific constructs; every target dialect can render it."""
    forbidden = re.compile(r"WIDTH_BUCKET|LEAST|GREATEST|FLOOR|TRY_CAST|GROUPING", re.I)
    for attribute in CATEGORICALS + INTEGERS + NUMERICS:
        tree = index_sql(attribute, "v")
        for dialect in ("duckdb", "postgres", "spark", "trino"):
            text = tree.sql(dialect)
            assert not forbidden.search(text), text[:200]
            assert text.startswith("CASE WHEN") and "IS NULL THEN" in text and "ELSE" in text
        assert sqlglot.parse_one(tree.sql("postgres"), read="postgres") is not None


@pytest.mark.slow
def test_adult_csv_agrees():
    """Every row of the example data set maps to the same cell in DuckDB and in Python."""
    adult = load_domain(ADULT_TOML)["adult"]
    con = duckdb.connect()
    source = exp.func("read_csv", exp.Literal.string(adult.source["csv"]))
    raw = [exp.column(a.name, quoted=True) for a in adult.attributes]
    cells = [exp.alias_(index_sql(a, a.name), f"c_{a.name}") for a in adult.attributes]
    rows = con.execute(exp.select(*raw, *cells).from_(source).sql("duckdb")).fetchall()
    con.close()
    n = len(adult.attributes)
    assert len(rows) == 48842
    for row in rows:
        for j, attribute in enumerate(adult.attributes):
            assert row[n + j] == attribute.index_of(row[j]), (attribute.name, row[j])
    # the declaration is public, but on this extract nothing should have fallen back: every
    # non-NULL categorical value is a declared label and numbers sit inside their ranges
    for j, attribute in enumerate(adult.attributes):
        assert all(v is None or attribute.contains_value(v) for v in (r[j] for r in rows)), attribute.name
