"""TIME (time-of-day) columns in the total reader: a typed TIME column (DuckDB table, Parquet,
PostgreSQL) and ``HH:MM[:SS[.ffffff]]`` text (CSV, VARCHAR on DuckDB, PostgreSQL and Spark)
land every value where ``TimeOfDayRange.index_of`` does: NULL in the NULL cell, values
before ``lo`` or after ``hi`` and text that is not a time of day in the invalid place."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dpsql.domain import TableSchema  # noqa: E402
from dpsql.measure.backend import DuckDBBackend  # noqa: E402
from dpsql.measure.router import open_backend  # noqa: E402
from dpsql.measure.source import Source  # noqa: E402
from dpsql.timeaxis import parse_time  # noqa: E402
from dpsql.timeofday import TimeOfDayRange  # noqa: E402

SCHEMA = TableSchema("tod", (
    TimeOfDayRange("t", "05:30", "22:59:59.999999", "hour", nullable=True),          # TIME
    TimeOfDayRange("tm", "00:00", "23:59:59.999999", "minute"),                       # TIME, not nullable
    TimeOfDayRange("t_text", "05:00:30", "22:00", "minute", nullable=True),         # VARCHAR
    TimeOfDayRange("ts_text", "10:00", "10:00:59.999999", "second", nullable=True),  # VARCHAR, second bins
))
_T = [None, dt.time(5, 30), dt.time(5, 29, 59, 999999), dt.time(0, 0), dt.time(22, 59, 59, 999999),
      dt.time(23, 0), dt.time(23, 59, 59, 999999), dt.time(12, 0), dt.time(12, 59, 59, 999999), dt.time(6, 0, 0, 1)]
TEXT_TIMES = [None, "05:00:30", "05:00:29.999999", "05:01", "10:15:59.999999", "22:00", "22:00:00.000001",
              "23:59:59.999999", "24:00", "9:15", "10:60", "10:15:60", "", "x", "10:15:00.1234567",
              "10:15 ", " 10:15", "10:15\n", "10:15+02", "١٠:15", "10.15", "10:15:07.5", "00:00"]
TEXT_SECONDS = [None, "10:00", "10:00:00.5", "10:00:59.999999", "10:01", "09:59:59.999999", "10:00:30", "1000"]
VALUES = {"t": _T, "tm": [v or dt.time(1, 2) for v in reversed(_T)], "t_text": TEXT_TIMES, "ts_text": TEXT_SECONDS}
COLUMNS = {"t": "TIME", "tm": "TIME", "t_text": "VARCHAR", "ts_text": "VARCHAR"}
CLIQUES = [(a,) for a in COLUMNS] + [("t", "t_text")]


def rows() -> list[list]:
    n = max(len(v) for v in VALUES.values()) * 3
    return [[VALUES[c][(i * (k + 1)) % len(VALUES[c])] for k, c in enumerate(COLUMNS)] for i in range(n)]


def cell(att, value) -> int:
    if isinstance(value, str):
        parsed = parse_time(value)
        return att.invalid_index if parsed is None else att.index_of(parsed)
    return att.index_of(value)


def expected(data, schema=SCHEMA, cliques=CLIQUES):
    names = list(COLUMNS)
    table = np.array([[cell(schema.attribute(c), v) for c, v in zip(names, r)] for r in data])
    out = {}
    for clique in cliques:
        arr = np.zeros(tuple(schema.domain[a] for a in clique), dtype=np.int64)
        np.add.at(arr, tuple(table[:, names.index(a)] for a in clique), 1)
        out[clique] = arr
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tod")
    con = duckdb.connect()
    con.execute("CREATE TABLE tod (" + ", ".join(f"{k} {v}" for k, v in COLUMNS.items()) + ")")
    data = rows()
    con.executemany(f"INSERT INTO tod VALUES ({', '.join('?' * len(COLUMNS))})", data)
    con.execute(f"COPY tod TO '{tmp / 'tod.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT t_text, ts_text FROM tod) TO '{tmp / 'text.parquet'}' (FORMAT parquet)")
    db = tmp / "tod.duckdb"
    con.execute(f"ATTACH '{db}' AS f")
    con.execute("CREATE TABLE f.tod AS SELECT * FROM tod")
    con.execute("DETACH f")
    yield tmp, con, data
    con.close()


def _count(sources: dict, schema=SCHEMA, cliques=CLIQUES, backend_cls=DuckDBBackend):
    backend = backend_cls(sources) if backend_cls is DuckDBBackend else open_backend(sources)
    try:
        return {name: backend.count_marginals(TableSchema(name, schema.attributes), cliques) for name in sources}
    finally:
        backend.close()


@pytest.mark.parametrize("kind", ["parquet", "duckdb"])
def test_typed_time_columns_land_as_index_of(lake, kind):
    tmp, _, data = lake
    spec = {"parquet": str(tmp / "tod.parquet")} if kind == "parquet" else \
        {"duckdb": str(tmp / "tod.duckdb"), "table": "tod"}
    got = _count({"tod": Source.from_config(spec, tmp)})["tod"]
    want = expected(data)
    for clique in CLIQUES:
        assert np.array_equal(got[clique], want[clique]), (clique, got[clique], want[clique])


def test_time_text_in_a_csv_lands_as_the_grammar_says(lake, tmp_path):
    _, con, data = lake
    # every field quoted: the CSV holds exactly the text above (NULL is the empty field); a
    # line break inside a field makes a malformed record (every cell invalid, tested elsewhere)
    data = [r for r in data if not any(isinstance(v, str) and "\n" in v for v in r)]
    con.execute("CREATE TEMP TABLE one_line AS SELECT * FROM tod WHERE NOT contains(coalesce(t_text, ''), chr(10))")
    con.execute(f"COPY one_line TO '{tmp_path / 'tod.csv'}' (HEADER, FORCE_QUOTE *)")
    got = _count({"tod": Source.from_config({"csv": str(tmp_path / "tod.csv")}, tmp_path)})["tod"]
    text = [[str(v) if isinstance(v, dt.time) else v for v in r] for r in data]
    # the CSV writes '' for an empty string, as for NULL: both are NULL when read back
    text = [[None if v == "" else v for v in r] for r in text]
    want = expected(text)
    for clique in CLIQUES:
        assert np.array_equal(got[clique], want[clique]), (clique, got[clique], want[clique])


def test_the_same_cells_on_postgresql_and_spark(lake, pg_server, spark):
    """PostgreSQL reads the TIME columns typed (``time without time zone``) and the text by
    the grammar; Spark, which has no TIME type, reads the text; every cell as DuckDB's."""
    tmp, con, data = lake
    pg_types = {"TIME": "time without time zone", "VARCHAR": "text"}
    pg_server.load("tod", ", ".join(f'"{k}" {pg_types[v]}' for k, v in COLUMNS.items()), data)
    spark.sql("DROP TABLE IF EXISTS tod_text")
    spark.sql(f"CREATE TABLE tod_text USING parquet LOCATION '{tmp / 'text.parquet'}'")
    want = expected(data)
    got = _count({"tod_pg": Source.from_config({"postgres": pg_server.url, "table": "tod", "data_version": 1}, tmp)},
                 backend_cls=None)["tod_pg"]
    for clique in CLIQUES:
        assert np.array_equal(got[clique], want[clique]), ("postgres", clique, got[clique], want[clique])
    text_schema = TableSchema("tod_text", SCHEMA.attributes[2:])
    text_cliques = [("t_text",), ("ts_text",), ("t_text", "ts_text")]
    text_want = expected(data, cliques=text_cliques)
    got = _count({"tod_text": Source.from_config({"spark": "local[2]", "table": "tod_text"}, tmp)},
                 schema=text_schema, cliques=text_cliques, backend_cls=None)["tod_text"]
    for clique in text_cliques:
        assert np.array_equal(got[clique], text_want[clique]), ("spark", clique, got[clique], text_want[clique])
