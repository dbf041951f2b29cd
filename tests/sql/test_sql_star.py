"""Joins with public tables (issue 31): every accepted join equals DuckDB's exact answer on
the same tables, every refused shape fails with its SQLSTATE, and the compiled matrices
are over the private table's own cells (post-processing of its histogram)."""

import pytest
import sqlglot

import dpsql.errors as errors
from dpsql.linalg import Bucket, Explicit
from dpsql.sql import compile as compile_sql
from sql_oracle import load_fixtures, rows_equal
from star_oracle import STAR, StarOracle

ACCEPTED = load_fixtures("star.sql")
REFUSED = load_fixtures("star_refused.sql")
PUBLIC = load_fixtures("star_public.sql")
TOOLS = ["superset", "metabase", "looker", "tableau", "powerbi"]
BI = [(tool, i, case) for tool in TOOLS for i, case in enumerate(load_fixtures(f"star_bi_{tool}.sql"))]


@pytest.fixture(scope="module")
def star():
    return StarOracle()


@pytest.mark.parametrize("case", ACCEPTED, ids=[f"j{i:02d}" for i in range(len(ACCEPTED))])
def test_join_matches_duckdb(star, case):
    cq, ours = star.ours(case["sql"])
    theirs = star.duck(case["sql"])
    ours = star.normalise(cq, ours)
    ordered = sqlglot.parse_one(case["sql"], read="postgres").args.get("order") is not None
    assert rows_equal(ours, theirs, ordered), f"\nours:   {ours[:12]}\nduckdb: {theirs[:12]}"


@pytest.mark.parametrize("tool,i,case", BI, ids=[f"{t}{i:02d}" for t, i, _ in BI])
def test_bi_star_schema_sql_matches_duckdb(star, tool, i, case):
    """The SQL Superset, Metabase, Looker, Tableau and Power BI send for a star schema."""
    test_join_matches_duckdb(star, case)


@pytest.mark.parametrize("case", REFUSED, ids=[f"r{i:02d}" for i in range(len(REFUSED))])
def test_refused_join(star, case):
    with pytest.raises(errors.Error) as info:
        compile_sql(case["sql"], star.catalog)
    err = info.value
    assert err.sqlstate == case["sqlstate"], f"{type(err).__name__}: {err}"
    assert err.message and err.hint and err.position is not None


def test_join_is_a_query_of_the_private_histogram(star):
    """Every factor is over the private table's declared cells; a key matching two rows
    (UA) weighs its cell 2 in the total, the sensitivity of what is measured unchanged."""
    cq = compile_sql("SELECT COUNT(*) FROM flights f JOIN alliances al ON f.carrier = al.carrier", star.catalog)
    (lq,) = cq.linear_queries
    schema = star.schema
    block = lq.matrix.blocks[0].base
    assert [f.shape[1] for f in block.factors] == [a.size for a in schema.attributes]
    carrier = block.factors[schema.column_names.index("carrier")].dense()[0]
    labels = schema.attribute("carrier").labels()
    assert dict(zip(labels, carrier)) == {"AA": 1, "B6": 0, "DL": 1, "UA": 2, "ZZ": 0, "(other)": 0, None: 0}
    # a key matching one row is a bucketing factor R_f; one matching several, a 0/1 matrix
    # whose column has a 1 in each of its rows' groups
    cq = compile_sql("SELECT c.name, COUNT(*) FROM flights f JOIN carriers c ON f.carrier = c.carrier "
                     "GROUP BY 1", star.catalog)
    factor = cq.linear_queries[0].matrix.blocks[0].base.factors[0]
    assert isinstance(factor, Bucket) and factor.shape == (4, len(labels))
    cq = compile_sql("SELECT al.alliance, COUNT(*) FROM flights f JOIN alliances al ON f.carrier = al.carrier "
                     "GROUP BY 1", star.catalog)
    factor = cq.linear_queries[0].matrix.blocks[0].base.factors[0]
    assert isinstance(factor, Explicit) and factor.shape == (4, len(labels))
    assert factor.dense()[:, labels.index("UA")].tolist() == [0, 0, 1, 1]


def test_undeclared_keys_name_the_declaration(star):
    with pytest.raises(errors.UnsupportedQueryError) as info:
        compile_sql("SELECT COUNT(*) FROM flights f JOIN airports a ON f.carrier = a.faa", star.catalog)
    assert "keys" in info.value.hint


@pytest.mark.parametrize("case", PUBLIC, ids=[f"p{i:02d}" for i in range(len(PUBLIC))])
def test_public_tables_answer_exactly(star, case):
    cq = compile_sql(case["sql"], star.catalog)
    assert cq.linear_queries == [] and cq.exact_rows is not None
    ordered = sqlglot.parse_one(case["sql"], read="postgres").args.get("order") is not None
    assert rows_equal(cq.exact_rows, star.duck(case["sql"]), ordered)


def test_public_column_names_are_postgres_names(star):
    cq = compile_sql("SELECT state, COUNT(*), upper(name), alt + 1 FROM airports GROUP BY state, name, alt",
                     star.catalog)
    assert [c.name for c in cq.columns] == ["state", "count", "upper", "?column?"]
    assert [c.type for c in cq.columns] == ["text", "bigint", "text", "bigint"]


def test_public_dates_and_timestamps_keep_their_types(star):
    """A dimension's DATE and TIMESTAMP columns are dates and timestamps in SQL: grouped on,
    truncated and extracted like a declared date column, and typed so in the answer's
    columns (they were read as text: date_trunc and comparisons with dates were refused)."""
    import datetime as dt
    cq = compile_sql("SELECT h.day, date_trunc('month', h.announced) AS m, COUNT(*) FROM flights f "
                     "JOIN holidays h ON f.month = h.month GROUP BY 1, 2", star.catalog)
    assert [c.type for c in cq.columns][:2] == ["date", "timestamp"]
    cq = compile_sql("SELECT day, announced FROM holidays ORDER BY day LIMIT 1", star.catalog)
    assert [c.type for c in cq.columns] == ["date", "timestamp"]
    assert cq.exact_rows == [(dt.date(2024, 1, 1), dt.datetime(2023, 6, 1, 9, 0))]


def test_the_public_database_reaches_no_file(star):
    """Defence in depth: even a statement naming a file reader, were it ever sent to the
    public tables' database, cannot read anything (external access is off and locked)."""
    with pytest.raises(errors.ProgrammingError):
        star.config.public_db.query(f"SELECT * FROM read_csv('{STAR / 'flights.csv'}')")
    with pytest.raises(errors.ProgrammingError):
        star.config.public_db.query("SET enable_external_access = true")
    with pytest.raises(errors.Error):
        compile_sql(f"SELECT * FROM read_csv('{STAR / 'flights.csv'}')", star.catalog)
