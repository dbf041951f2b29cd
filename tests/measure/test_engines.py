"""DuckDB, PostgreSQL and Spark count identically (issue 19).

The same typed rows are loaded into a Parquet file (DuckDB), a real PostgreSQL table and a
Spark table; every engine runs the same measurement AST in its own dialect and must return
*identical* integer counts — equal to a Python reference built from ``Attribute.index_of``
and the documented text conversions — for

* a 30-marginal strategy over adult, row-level and with the privacy unit bounded to
  ``max_rows`` = 1 and 3 rows per id on a table whose ids repeat (the reference recomputes
  the keyed SHA-256 order, so the very same rows are kept everywhere);
* a hostile fixture: NULL, NaN, ±inf, -0.0, values on bin edges, out-of-domain values,
  case and whitespace variants, and non-numeric strings in text columns read as numbers;

and the adult dashboard answers end to end are identical across backends given the same
noise bits.
"""

from __future__ import annotations

import hashlib
import math
import random
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
import engines
from dpsql.domain import Categorical, IntegerRange, Numeric, TableSchema
from dpsql.domain_file import load_domain
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.postgres import PostgresBackend
from dpsql.measure.reader import parse_number, type_family
from dpsql.measure.router import open_backend
from dpsql.measure.source import Source
from dpsql.privacy import noise
from dpsql.sql.split import split_statements

pytestmark = pytest.mark.slow   # a Spark JVM and a PostgreSQL cluster, each counting adult

ADULT = load_domain(engines.ADULT_DIR / "adult.toml")["adult"]
KEY = "s3cret-key-of-the-operator"


def strategy(n_pairs=20, n_triples=10, seed=30):
    """A 30-marginal strategy: random pairs and triples of adult's attributes."""
    rng = random.Random(seed)
    names = list(ADULT.column_names)
    out = set()
    while len(out) < n_pairs:
        out.add(tuple(sorted(rng.sample(names, 2), key=names.index)))
    while len(out) < n_pairs + n_triples:
        out.add(tuple(sorted(rng.sample(names, 3), key=names.index)))
    return sorted(out)


CLIQUES = strategy()
UNITS = {"row": {}, "max_rows=1": {"id": "pid", "max_rows": 1},
         "max_rows=3": {"id": "pid", "max_rows": 3}}


# --- the Python reference ------------------------------------------------------------------

def cell(att, value, family: str) -> int:
    """Where a typed value lands (docs/domains.md, "Where every record lands")."""
    if value is None:
        return att.null_place
    if family == "text":
        if att.kind == "categorical" and att.python_type is str:
            return att.index_of(value)
        x = parse_number(value)
        return att.invalid_index if x is None else att.index_of(x)
    if att.kind == "categorical" and att.python_type is str:
        return att.index_of(str(value).lower() if isinstance(value, bool) else str(value))
    return att.index_of(float(value) if isinstance(value, Decimal) and att.kind == "numeric" else value)


def reference_cells(con, schema, rel_sql):
    types = {n: type_family(str(t)) for n, t, *_ in con.execute(f"DESCRIBE {rel_sql}").fetchall()}
    names = list(schema.column_names)
    has_pid = "pid" in types
    select = ", ".join(f'"{n}"' for n in (["pid"] if has_pid else []) + names)
    out = []
    for row in con.execute(f"SELECT {select} FROM ({rel_sql})").fetchall():
        pid, values = (row[0], row[1:]) if has_pid else (None, row)
        out.append((pid, tuple(cell(schema.attribute(n), v, types[n]) for n, v in zip(names, values))))
    return out


def reference_counts(rows, schema, cliques, max_rows=None, key=KEY):
    if max_rows is not None:
        by_id = {}
        for pid, cells in rows:
            if pid is None:
                continue
            h = hashlib.sha256(f"{key}|{pid}|{','.join(map(str, cells))}".encode()).hexdigest()
            by_id.setdefault(pid, []).append((h, cells))
        rows = [(pid, c) for pid, kept in by_id.items() for _, c in sorted(kept)[:max_rows]]
    pos = {a: i for i, a in enumerate(schema.column_names)}
    table = np.array([c for _, c in rows], dtype=np.int64).reshape(len(rows), len(pos))
    out = {}
    for clique in cliques:
        arr = np.zeros(tuple(schema.domain[a] for a in clique), dtype=np.int64)
        np.add.at(arr, tuple(table[:, pos[a]] for a in clique), 1)
        out[clique] = arr
    return out


# --- the same rows in every engine -----------------------------------------------------------

@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lake")
    con = duckdb.connect()
    adult = engines.adult_relation(con, ids=5000)      # ~9.8 rows per id
    engines.write_parquet(con, adult, tmp / "adult.parquet")
    con.execute(HOSTILE_DDL)
    con.executemany(f"INSERT INTO hostile VALUES ({', '.join('?' * (len(HOSTILE_COLUMNS) + 1))})", hostile_rows())
    engines.write_parquet(con, "SELECT * FROM hostile", tmp / "hostile.parquet")
    yield tmp, con
    con.close()


@pytest.fixture(scope="module")
def pg(lake, pg_server):
    tmp, con = lake
    for name in ("adult", "hostile"):
        rel = f"SELECT * FROM read_parquet('{tmp / name}.parquet')"
        pg_server.load(name, engines.pg_ddl(con, rel), con.execute(rel).fetchall())
    return pg_server


@pytest.fixture(scope="module")
def spark_tables(lake, spark):
    tmp, _ = lake
    for name in ("adult", "hostile"):
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} USING parquet LOCATION '{tmp / name}.parquet'")
    return spark


def sources(tmp, pg, table, unit):
    """The same table as a source of each engine."""
    out = {"duckdb": Source.from_config({"parquet": str(tmp / f"{table}.parquet")}, tmp),
           "postgres": Source.from_config({"postgres": pg.url, "table": table, "data_version": 1}, tmp)}
    out["spark"] = Source.from_config({"spark": "local[2]", "table": table}, tmp)
    return {k: _keyed(s.with_unit(unit or None, tmp)) for k, s in out.items()}


def _keyed(source):
    from dataclasses import replace
    return replace(source, hash_key=KEY) if source.id_column else source


def _assert_identical_everywhere(tmp, pg, name, unit, domain, cliques, expected, label=()):
    """Each engine's count of ``cliques`` over table ``name`` equals ``expected``."""
    backend = open_backend({f"{name}_{e}": s for e, s in sources(tmp, pg, name, unit).items()})
    try:
        for engine in ("duckdb", "postgres", "spark"):
            got = backend.count_marginals(TableSchema(f"{name}_{engine}", domain.attributes), cliques)
            for clique in cliques:
                assert np.array_equal(got[clique], expected[clique]), (*label, engine, clique,
                                                                       got[clique], expected[clique])
    finally:
        backend.close()


def test_30_marginals_identical_on_duckdb_postgres_and_spark(lake, pg, spark_tables):
    tmp, con = lake
    rows = reference_cells(con, ADULT, f"SELECT * FROM read_parquet('{tmp / 'adult.parquet'}')")
    assert len(CLIQUES) == 30
    for unit_name, unit in UNITS.items():
        expected = reference_counts(rows, ADULT, CLIQUES, unit.get("max_rows"))
        total = int(expected[CLIQUES[0]].sum())
        assert total == (48842 if not unit else 5000 * unit["max_rows"])
        _assert_identical_everywhere(tmp, pg, "adult", unit, ADULT, CLIQUES, expected, (unit_name,))


def test_csv_and_parquet_sources_count_alike():
    """The example's CSV source (total CSV reader) and its typed Parquet copy agree."""
    con = duckdb.connect()
    csv_backend = DuckDBBackend({"adult": Source.from_config(ADULT.source, engines.ADULT_DIR)})
    rel = engines.adult_relation(con)
    rows = reference_cells(con, ADULT, rel)
    expected = reference_counts(rows, ADULT, CLIQUES)
    got = csv_backend.count_marginals(ADULT, CLIQUES)
    csv_backend.close()
    for clique in CLIQUES:
        assert np.array_equal(got[clique], expected[clique]), clique


# --- the hostile fixture ---------------------------------------------------------------------

HOSTILE = TableSchema("hostile", (
    Numeric("x", [0.0, 0.5, 1.0], nullable=True),             # DOUBLE
    Numeric("f", [-1.0, 0.1, 2.0]),                           # REAL (float32); NULL → invalid
    Numeric("d", [0.0, 0.1, 0.2]),                            # DECIMAL(10,3)
    IntegerRange("n", 0, 10, bin_width=5, nullable=True),     # BIGINT
    IntegerRange("xi", 0, 10, bin_width=5),                   # DOUBLE read as integers
    Categorical("s", ["a", "B", "Zürich", "%", "it's"]),      # TEXT, open
    Categorical("sc", ["a", "b"], closed=True),               # TEXT, closed, not nullable
    IntegerRange("t", 0, 100, bin_width=10, nullable=True),   # TEXT read as numbers
    Numeric("tn", [0.0, 1.0, 10.0]),                          # TEXT read as reals
    Categorical("code", [1, 2, 3], nullable=True),            # TEXT, integer labels
    Categorical("ci", [1, 2, 3]),                             # BIGINT, integer labels
    Categorical("b", ["true", "false"], nullable=True),       # BOOLEAN as labels
    Categorical("k", ["7", "8"]),                             # BIGINT as text labels
    Categorical("so", ["a", "b"], nullable=True),             # TEXT, open and nullable
    IntegerRange("m", -7, 20, bin_width=4),                   # INTEGER, arithmetic bins from a negative lo
    IntegerRange("w", -(2 ** 61), 2 ** 61, bin_width=2 ** 59, nullable=True),  # BIGINT, near the guard
    IntegerRange("e", 0, 100, edges=[0, 1, 10, 50]),          # BIGINT, edges: the comparison chain
))
HOSTILE_COLUMNS = {"x": "DOUBLE", "f": "FLOAT", "d": "DECIMAL(10,3)", "n": "BIGINT", "xi": "DOUBLE",
                   "s": "VARCHAR", "sc": "VARCHAR", "t": "VARCHAR", "tn": "VARCHAR", "code": "VARCHAR",
                   "ci": "BIGINT", "b": "BOOLEAN", "k": "BIGINT", "so": "VARCHAR", "m": "INTEGER", "w": "BIGINT",
                   "e": "BIGINT"}
HOSTILE_DDL = "CREATE TABLE hostile (pid BIGINT, " + ", ".join(f"{k} {v}" for k, v in HOSTILE_COLUMNS.items()) + ")"
NUMBER_TEXTS = [None, "5", " 5", "5 ", "\t5", "5.", ".5", "+5", "-5", "1e2", "1E2", "1e+1", "1e999", "1e-999",
                "1e99", "1e-99", "abc", "", " ", "NaN", "nan", "inf", "-Infinity", "5\n", "\n5", "5\r", "0x10",
                "1_000", "5,0", "١٢", "９", "--5", "5e", "e5", ".", "+", "-", "99999999999999999999",
                "1" * 101, "-0", "-0.0", "55.5", "100", "100.0000000000001", "10", "9.999999999999999",
                "5.e1", "+.5e1\t", "1e", "1.2.3", "1 2", "½", "5\u00a0"]
VALUES = {
    "x": [None, math.nan, math.inf, -math.inf, -0.0, 0.0, 0.5, 1.0, 1.0000000000000002,
          0.49999999999999994, -1e300, 1e300, 5e-324, 0.1, 2.0],
    "f": [None, math.nan, math.inf, -math.inf, -0.0, 0.1, 2.0, -1.0, 1e30, -3.4e38, 0.099999994],
    "d": [None, Decimal("0.100"), Decimal("0.099"), Decimal("0.2"), Decimal("-5.5"), Decimal("9999999.999"),
          Decimal("0.000"), Decimal("0.199")],
    "n": [None, -9223372036854775808, 9223372036854775807, 0, 4, 5, 10, 11, -1],
    "xi": [4.5, 4.999, 5.0, -0.0, math.nan, None, math.inf, -math.inf, 29.5, 10.5, 9.9999999999],
    "s": [None, "a", "A", " a", "a ", "B", "b", "Zürich", "Zu\u0308rich", "", "NaN", "\n", "%", "%%", "it's",
          "\\", "\ufffd", "a\tb", "ZÜRICH"],
    "sc": [None, "a", "b", "A", "c", " b", ""],
    "t": NUMBER_TEXTS,
    "tn": list(reversed(NUMBER_TEXTS)),
    "code": [None, "1", "01", "1.0", " 1", "1e0", "one", "", "4", "-1", "2.5", "3 ", "0x1"],
    "ci": [None, 1, 2, 3, 4, -1, 0],
    "b": [None, True, False],
    "k": [None, 7, 8, 9, -7, 70],
    "so": [None, "a", "b", "A", "", "c"],
    "m": [None, -2 ** 31, 2 ** 31 - 1, -8, -7, -4, -3, -1, 0, 1, 12, 13, 20, 21],
    "w": [None, -2 ** 63, 2 ** 63 - 1, -(2 ** 61) - 1, -(2 ** 61), 2 ** 61, 2 ** 61 + 1, 0, -1, 2 ** 59,
          2 ** 59 - 1 - 2 ** 61],
    "e": [None, -2 ** 63, 2 ** 63 - 1, -1, 0, 1, 9, 10, 49, 50, 100, 101],
}


def hostile_rows():
    n = max(len(v) for v in VALUES.values()) * 2
    return [[i % 7 if i % 11 else None] + [VALUES[c][i % len(VALUES[c])] for c in HOSTILE_COLUMNS]
            for i in range(n)]


HOSTILE_CLIQUES = [(a,) for a in HOSTILE.column_names] + [("x", "t", "s"), ("b", "code", "k"), ("f", "d", "n", "xi"),
                                                         ("so", "m", "w", "e")]


@pytest.mark.parametrize("unit", ["row", "max_rows=3"])
def test_hostile_fixture_lands_alike_everywhere(lake, pg, spark_tables, unit):
    tmp, con = lake
    unit_spec = UNITS[unit] if unit == "row" else {"id": "pid", "max_rows": 2}
    rows = reference_cells(con, HOSTILE, f"SELECT * FROM read_parquet('{tmp / 'hostile.parquet'}')")
    expected = reference_counts(rows, HOSTILE, HOSTILE_CLIQUES, unit_spec.get("max_rows"))
    _assert_identical_everywhere(tmp, pg, "hostile", unit_spec, HOSTILE, HOSTILE_CLIQUES, expected)


def test_reference_sanity():
    """The reference itself: a few hand-checked landings."""
    t = HOSTILE.attribute("t")
    assert cell(t, " 5", "text") == 0 and cell(t, "1e2", "text") == 10 and cell(t, "55.5", "text") == 5
    assert cell(t, "1e999", "text") == t.invalid_index == t.null_index   # beyond the grammar: unreadable
    assert cell(t, "5\n", "text") == t.invalid_index
    x = HOSTILE.attribute("x")
    assert cell(x, math.nan, "float") == x.invalid_index and cell(x, -0.0, "float") == 0
    assert cell(x, 0.5, "float") == 1 and cell(x, 1.0, "float") == 1 and cell(x, math.inf, "float") == 1
    assert cell(HOSTILE.attribute("b"), True, "boolean") == 0
    m, w = HOSTILE.attribute("m"), HOSTILE.attribute("w")
    assert cell(m, -2 ** 31, "integer") == 0 and cell(m, -3, "integer") == 1 and cell(m, 21, "integer") == 6
    assert cell(w, 2 ** 63 - 1, "integer") == w.size - 2 and cell(w, None, "integer") == w.size - 1


# --- end to end: the dashboard, same noise bits ---------------------------------------------

DASHBOARD = split_statements((engines.ADULT_DIR / "dashboard.sql").read_text())


def _config(tmp: Path, source: dict, name: str) -> dict:
    return {"dpsql": {"ledger": str(tmp / f"{name}.ledger"), "cache_dir": str(tmp / "plans"), "fit_iters": 300},
            "budget": {"epsilon": 1.0, "delta": 1e-6},
            "tables": {"adult": {"domain": str(engines.ADULT_DIR / "adult.toml"), "source": source}},
            "workload": {"files": [str(engines.ADULT_DIR / "dashboard.sql")]},
            "planner": {"restarts": 1, "seed": 0}}


def test_dashboard_answers_identical_across_backends(lake, pg, spark_tables, monkeypatch, tmp_path):
    tmp, _ = lake
    configs = {"duckdb": {"csv": str(engines.ADULT_DIR / "adult.csv")},
               "postgres": {"postgres": pg.url, "table": "adult", "data_version": 1},
               "spark": {"spark": "local[2]", "table": "adult"}}
    answers = {}
    for name, source in configs.items():
        monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(19))   # the same noise bits
        con = dpsql.connect(_config(tmp_path, source, name), user="analyst")
        try:
            con.session.measure()
            answers[name] = [con.cursor().execute(sql).fetchall() for sql in DASHBOARD]
        finally:
            con.close()
            dpsql.dbapi._engines.clear()
    assert len(answers["duckdb"]) == 30
    assert answers["postgres"] == answers["duckdb"]
    assert answers["spark"] == answers["duckdb"]
    # and they are noisy answers, not the exact counts (the bits did reach the sampler)
    assert answers["duckdb"][0][0][0] != 48842


def test_postgres_errors_are_withheld_and_the_key_never_leaks(pg, tmp_path):
    """A failure inside PostgreSQL (a view that divides by zero on one private row) is an
    OperationalError naming only the step; the engine's message is for the operator, with the
    bounding key scrubbed.  A statement timeout is QueryCanceledError."""
    pg.execute("CREATE OR REPLACE VIEW bad AS SELECT pid, 1 / (age - 39) AS age, sex FROM adult")
    schema = TableSchema("bad", (IntegerRange("age", 0, 10), Categorical("sex", ["Female", "Male"])))
    from dataclasses import replace
    source = replace(Source.from_config({"postgres": pg.url, "table": "bad", "data_version": 1}, tmp_path)
                     .with_unit({"id": "pid", "max_rows": 1}, tmp_path), hash_key=KEY)
    backend = PostgresBackend({"bad": source})
    with pytest.raises(dpsql.OperationalError) as info:
        backend.count_marginals(schema, [("age",)])
    err = info.value
    assert "division by zero" not in str(err) and KEY not in str(err) and "39" not in str(err)
    assert "withheld" in err.message and "division by zero" in err.operator_detail
    assert KEY not in err.operator_detail
    slow = replace(Source.from_config({"postgres": pg.url, "table": "adult", "data_version": 1,
                                       "statement_timeout": 0.001}, tmp_path))
    pg.execute("CREATE OR REPLACE VIEW slow AS SELECT a.* FROM adult a, pg_sleep(0.2) s LIMIT 10")
    slow = replace(slow, table="slow")
    with pytest.raises(dpsql.errors.QueryCanceledError):
        PostgresBackend({"slow": slow}).count_marginals(TableSchema("slow", ADULT.attributes[:2]), [("age",)])


# --- binning offsets: the same clamp on every engine (issue 29 item 1) -------------------------

OFFSET_REQUESTS = {
    "adult": [((), "fnlwgt"), (("sex",), "capital_gain"), (("race", "income"), "capital_loss"),
              (("education",), "fnlwgt")],
    # NULL, NaN, ±inf, -0.0, bin edges, values beyond the range, float32, DECIMAL, text read as numbers
    "hostile": [((), a) for a in ("x", "f", "d", "n", "xi", "t", "tn")]
    + [(("s",), "x"), (("b", "code"), "t"), (("sc",), "tn")],
}


@pytest.mark.parametrize("unit", ["row", "max_rows=3"])
def test_offset_sums_identical_on_duckdb_postgres_and_spark(lake, pg, spark_tables, unit):
    """Every engine clamps and rounds the rows' offsets alike (``dpsql.measure.offsets``) and,
    under a privacy unit, keeps the same rows: identical integer sums.  Row-level adult also
    equals the Python reference."""
    from dpsql.measure.offsets import brute_force_offsets

    tmp, con = lake
    for name, schema in (("adult", ADULT), ("hostile", HOSTILE)):
        unit_spec = UNITS[unit]
        backend = open_backend({f"{name}_{e}": s for e, s in sources(tmp, pg, name, unit_spec).items()})
        try:
            got = {e: backend.sum_offsets(TableSchema(f"{name}_{e}", schema.attributes), OFFSET_REQUESTS[name])
                   for e in ("duckdb", "postgres", "spark")}
        finally:
            backend.close()
        for req in OFFSET_REQUESTS[name]:
            assert np.array_equal(got["duckdb"][req], got["postgres"][req]), (name, unit, req, "postgres")
            assert np.array_equal(got["duckdb"][req], got["spark"][req]), (name, unit, req, "spark")
        assert any(got["duckdb"][req].any() for req in OFFSET_REQUESTS[name])
        if name == "adult" and unit == "row":
            cols = [a.name for a in ADULT.attributes]
            raw = con.execute(f"SELECT {', '.join(cols)} FROM read_parquet('{tmp / 'adult.parquet'}')").fetchall()
            rows = [dict(zip(cols, r)) for r in raw]
            for clique, column in OFFSET_REQUESTS["adult"]:
                want = brute_force_offsets(rows, ADULT.attributes, clique, column)
                assert np.array_equal(got["duckdb"][(clique, column)], want), (clique, column)


# --- time columns (issue 30) -----------------------------------------------------------------

@pytest.fixture(scope="module")
def times(lake, pg, spark_tables):
    """The hostile time table (tests/measure/time_rows.py) in every engine: Parquet written
    by DuckDB (session zone Asia/Kolkata: it must not matter), the same rows in PostgreSQL
    (session zone UTC by default) and Spark over the Parquet file."""
    import time_rows
    tmp, con = lake
    con.execute("SET TimeZone = 'Asia/Kolkata'")
    con.execute(time_rows.DDL)
    con.executemany(f"INSERT INTO times VALUES ({', '.join('?' * len(time_rows.COLUMNS))})", time_rows.rows())
    engines.write_parquet(con, "SELECT * FROM times", tmp / "times.parquet")
    ddl = ", ".join(f'"{c}" {time_rows.PG_TYPES[t]}' for c, t in time_rows.COLUMNS.items())
    pg.load("times", ddl, time_rows.rows())
    spark_tables.sql("DROP TABLE IF EXISTS times")
    spark_tables.sql(f"CREATE TABLE times USING parquet LOCATION '{tmp / 'times.parquet'}'")
    return time_rows


def test_time_columns_land_alike_everywhere(lake, pg, times):
    """DATE, TIMESTAMP, TIMESTAMPTZ and ISO text: the same cell for the same value on DuckDB,
    PostgreSQL and Spark, equal to ``index_of`` (daylight-saving change, edges, out of period)."""
    tmp, _ = lake
    schema = times.SCHEMA
    cliques = [(a,) for a in schema.column_names] + [("d", "ts", "tz")]
    table = np.array([[times.cell(schema.attribute(c), v) for c, v in zip(times.COLUMNS, r)] for r in times.rows()])
    pos = {a: i for i, a in enumerate(times.COLUMNS)}
    expected = {}
    for clique in cliques:
        arr = np.zeros(tuple(schema.domain[a] for a in clique), dtype=np.int64)
        np.add.at(arr, tuple(table[:, pos[a]] for a in clique), 1)
        expected[clique] = arr
    _assert_identical_everywhere(tmp, pg, "times", {}, schema, cliques, expected)


# --- integer join keys (issue 31): out of range is not clamped --------------------------------

JOIN_KEYS = TableSchema("joinkeys", (
    IntegerRange("kb", 1, 12, nullable=True).unclamped(),                               # BIGINT
    IntegerRange("ki", 1, 12, nullable=True).unclamped(),                               # INTEGER
    IntegerRange("kd", 1, 12, nullable=True).unclamped(),                               # DOUBLE
    IntegerRange("kt", 1, 12, nullable=True).unclamped(),                               # TEXT read as numbers
    IntegerRange("kn", -3, 40, edges=list(range(-3, 41)), nullable=True).unclamped(),   # DECIMAL, the chain
))
JOIN_KEY_COLUMNS = {"kb": "BIGINT", "ki": "INTEGER", "kd": "DOUBLE", "kt": "VARCHAR", "kn": "DECIMAL(10,3)"}
JOIN_KEY_VALUES = {
    "kb": [None, 0, 1, 12, 13, -1, 99, -2 ** 63, 2 ** 63 - 1, 6],
    "ki": [None, 0, 1, 12, 13, -2 ** 31, 2 ** 31 - 1, 7],
    "kd": [None, 0.5, 1.0, 12.0, 12.5, 13.0, math.nan, math.inf, -math.inf, 0.9999, 1e300, -0.0],
    "kt": [None, "0", "1", "12", "13", " 12 ", "1e1", "12.5", "abc", "99999999999999999999", "-0", "1e999"],
    "kn": [None, Decimal("40.000"), Decimal("40.001"), Decimal("-3.000"), Decimal("-3.001"), Decimal("-5.5"),
           Decimal("9999999.999"), Decimal("7.000")],
}


@pytest.fixture(scope="module")
def join_keys(tmp_path_factory, pg_server, spark):
    tmp = tmp_path_factory.mktemp("joinkeys")
    con = duckdb.connect()
    con.execute("CREATE TABLE joinkeys (" + ", ".join(f"{c} {t}" for c, t in JOIN_KEY_COLUMNS.items()) + ")")
    n = max(len(v) for v in JOIN_KEY_VALUES.values()) * 3
    rows = [[JOIN_KEY_VALUES[c][(i * (k + 1)) % len(JOIN_KEY_VALUES[c])] for k, c in enumerate(JOIN_KEY_COLUMNS)]
            for i in range(n)]
    con.executemany(f"INSERT INTO joinkeys VALUES ({', '.join('?' * len(JOIN_KEY_COLUMNS))})", rows)
    rel = "SELECT * FROM joinkeys"
    engines.write_parquet(con, rel, tmp / "joinkeys.parquet")
    pg_server.load("joinkeys", engines.pg_ddl(con, rel), con.execute(rel).fetchall())
    spark.sql("DROP TABLE IF EXISTS joinkeys")
    spark.sql(f"CREATE TABLE joinkeys USING parquet LOCATION '{tmp / 'joinkeys.parquet'}'")
    yield tmp, con, pg_server
    con.close()


def test_join_keys_out_of_range_land_alike_everywhere(join_keys):
    """An integer join key's values outside lo..hi land in its NULL cell on DuckDB,
    PostgreSQL and Spark alike, for integer, float, decimal and text columns: equal to
    ``index_of``, cell by cell (clamped, 13 would join December's dimension row)."""
    tmp, con, pg = join_keys
    rows = reference_cells(con, JOIN_KEYS, f"SELECT * FROM read_parquet('{tmp / 'joinkeys.parquet'}')")
    cliques = [(a,) for a in JOIN_KEYS.column_names] + [("kb", "kt", "kn")]
    expected = reference_counts(rows, JOIN_KEYS, cliques)
    kb = JOIN_KEYS.attribute("kb")
    assert expected[("kb",)][kb.null_index] > expected[("kb",)][11] > 0     # 13, 99, … apart from 12
    _assert_identical_everywhere(tmp, pg, "joinkeys", {}, JOIN_KEYS, cliques, expected)


# --- categorical join keys (issue 31): NULL and undeclared values join nothing ----------------

CAT_KEYS = TableSchema("catkeys", (
    Categorical("ct", ["EWR", "JFK", "LGA"], nullable=True, closed=True),   # VARCHAR, closed
    Categorical("cb", [10, 20, 30], nullable=True, closed=True),            # BIGINT, integer labels
    Categorical("cd", [10, 20, 30], nullable=True, closed=True),            # DOUBLE
    Categorical("cn", [10, 20, 30], nullable=True, closed=True),            # DECIMAL
    Categorical("cv", [10, 20, 30], nullable=True, closed=True),            # VARCHAR read as numbers
    Categorical("co", ["EWR", "JFK", "LGA"]),                               # VARCHAR, open, not nullable
))
CAT_KEY_COLUMNS = {"ct": "VARCHAR", "cb": "BIGINT", "cd": "DOUBLE", "cn": "DECIMAL(10,3)", "cv": "VARCHAR",
                   "co": "VARCHAR"}
CAT_KEY_VALUES = {
    "ct": [None, "EWR", "JFK", "LGA", "jfk", " JFK", "JFK ", "", "XXX", "BOS", "Ewr"],
    "cb": [None, 10, 20, 30, 0, 15, 40, -10, 2 ** 62],
    "cd": [None, 10.0, 20.0, 30.0, 10.5, math.nan, math.inf, -0.0, 29.999999999999996],
    "cn": [None, Decimal("10.000"), Decimal("20.000"), Decimal("10.001"), Decimal("-30.000"), Decimal("30.000")],
    "cv": [None, "10", "20", "30", "010", "1e1", "10.5", "x", "", " 20 ", "40"],
    "co": [None, "EWR", "JFK", "LGA", "jfk", "", "XXX"],
}


@pytest.fixture(scope="module")
def cat_keys(tmp_path_factory, pg_server, spark):
    tmp = tmp_path_factory.mktemp("catkeys")
    con = duckdb.connect()
    con.execute("CREATE TABLE catkeys (" + ", ".join(f"{c} {t}" for c, t in CAT_KEY_COLUMNS.items()) + ")")
    n = max(len(v) for v in CAT_KEY_VALUES.values()) * 3
    rows = [[CAT_KEY_VALUES[c][(i * (k + 1)) % len(CAT_KEY_VALUES[c])] for k, c in enumerate(CAT_KEY_COLUMNS)]
            for i in range(n)]
    con.executemany(f"INSERT INTO catkeys VALUES ({', '.join('?' * len(CAT_KEY_COLUMNS))})", rows)
    rel = "SELECT * FROM catkeys"
    engines.write_parquet(con, rel, tmp / "catkeys.parquet")
    pg_server.load("catkeys", engines.pg_ddl(con, rel), con.execute(rel).fetchall())
    spark.sql("DROP TABLE IF EXISTS catkeys")
    spark.sql(f"CREATE TABLE catkeys USING parquet LOCATION '{tmp / 'catkeys.parquet'}'")
    yield tmp, con, pg_server
    con.close()


def test_categorical_keys_send_undeclared_values_to_a_cell_joining_nothing(cat_keys):
    """A categorical join key is nullable or open (engine.public._check_key): its NULL and
    undeclared values ('jfk', ' JFK', 'BOS', 15, NaN, 10.5, 'x') land in the NULL or
    "(other)" cell, which joins no dimension row, on DuckDB, PostgreSQL and Spark alike, for
    text, integer, float, decimal and text-as-number columns: equal to ``index_of``, cell by
    cell, and none of them in a label's cell."""
    tmp, con, pg = cat_keys
    rows = reference_cells(con, CAT_KEYS, f"SELECT * FROM read_parquet('{tmp / 'catkeys.parquet'}')")
    cliques = [(a,) for a in CAT_KEYS.column_names] + [("ct", "cb", "cv")]
    expected = reference_counts(rows, CAT_KEYS, cliques)
    raw = con.execute("SELECT ct, co FROM catkeys").fetchall()
    ct, co = CAT_KEYS.attribute("ct"), CAT_KEYS.attribute("co")
    # 'jfk', ' JFK', 'JFK ', '', 'XXX', 'BOS', 'Ewr' and NULL: none in a label's cell
    labels = ("EWR", "JFK", "LGA")
    assert [c[0] for _, c in rows] == [labels.index(v) if v in labels else ct.null_index for v, _ in raw]
    assert [c[5] for _, c in rows] == [labels.index(v) if v in labels else co.other_index for _, v in raw]
    assert expected[("ct",)][ct.null_index] > 0 and expected[("co",)][co.other_index] > 0
    _assert_identical_everywhere(tmp, pg, "catkeys", {}, CAT_KEYS, cliques, expected)
