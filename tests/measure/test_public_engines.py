"""Public tables held by PostgreSQL or Spark (issue 31: "any source dpsql reads"): read once
by their engine when the configuration is loaded, typed from that engine's catalog (DATE and
TIMESTAMP stay dates and timestamps), and joined exactly like the same tables read from CSV
files: the answers at a near-infinite budget equal DuckDB's exact join over the CSV files.
Their content is part of a release's identity only through ``labels_from`` (the domain), as
for a file-backed table, and their rows are sorted (an engine's table has no row order), so
that the labels come in the same order at every load.  Skipped, like the other cross-engine tests, where PostgreSQL or
Spark is missing (``tests/measure/conftest.py``)."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

import dpsql
from dpsql.domain import domain_fingerprint
from dpsql.engine.config import load_config
from dpsql.measure.exact import ExactOracle

STAR = Path(__file__).resolve().parents[1] / "fixtures" / "star"
HUGE = {"epsilon": 1e7, "delta": 1e-6}
WORKLOAD = ["SELECT carrier, origin, dest, month, COUNT(*) FROM flights GROUP BY 1, 2, 3, 4",
            "SELECT dest, month, SUM(distance) FROM flights GROUP BY 1, 2"]
JOINS = [
    "SELECT c.name, COUNT(*) FROM flights f LEFT JOIN carriers c ON f.carrier = c.carrier GROUP BY 1",
    "SELECT a.state, COUNT(*) FROM flights f JOIN airports a ON f.dest = a.faa GROUP BY 1",
    "SELECT h.day, COUNT(*) FROM flights f JOIN holidays h ON f.month = h.month GROUP BY 1",
    "SELECT date_trunc('quarter', h.day) AS q, COUNT(*) FROM flights f JOIN holidays h ON f.month = h.month "
    "WHERE h.announced < TIMESTAMP '2023-12-01 00:00:00' GROUP BY 1",
    "SELECT EXTRACT(dow FROM h.day) AS dow, COUNT(*) FROM flights f JOIN holidays h ON f.month = h.month "
    "WHERE h.day >= DATE '2024-06-01' GROUP BY 1",
]
#: the tables moved to the engine, with their columns' SQL types there
DDL = {"airports": "faa text, name text, state text, alt bigint",
       "carriers": "carrier text, name text",
       "holidays": "month bigint, day date, name text, announced timestamp"}


@pytest.fixture(scope="module")
def from_files():
    """The star configuration as committed: every public table read from its CSV file."""
    return load_config(STAR / "dpsql.toml")


def _star_copy(tmp_path: Path, sources: dict[str, str]) -> Path:
    """The star fixture with each named public table's source replaced (its CSV file left
    out of the copy, so that nothing can read it)."""
    for f in STAR.iterdir():
        if f.suffix in (".csv", ".toml") and f.stem not in sources:
            shutil.copy(f, tmp_path / f.name)
    config = tmp_path / "dpsql.toml"
    text = config.read_text()
    for name, source in sources.items():
        old = f'source = {{ csv = "{name}.csv" }}'
        assert old in text
        text = text.replace(old, f"source = {source}")
    config.write_text(text)
    return config


def _same_tables(cfg, from_files) -> None:
    for name in DDL:
        ours, theirs = cfg.public_tables[name], from_files.public_tables[name]
        assert ours.columns == theirs.columns, name
        assert sorted(ours.rows, key=repr) == sorted(theirs.rows, key=repr), name


def _answers_equal_exact(config: Path, from_files, tmp_path: Path) -> None:
    con = dpsql.connect(config, user="t", ledger=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"),
                        budget=HUGE, workload=WORKLOAD)
    oracle = ExactOracle(from_files.tables, from_files.sources, from_files.public_tables)
    try:
        con.session.measure()
        for sql in JOINS:
            cur = con.cursor()
            cur.execute(sql)
            ours = {tuple(r[:-1]): r[-1] for r in cur.fetchall()}
            exact = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
            assert set(exact) <= set(ours), sql
            for key, value in ours.items():
                assert abs(value - float(exact.get(key, 0))) <= 0.5 + 1e-6 * abs(value), (sql, key, value)
    finally:
        oracle.close()
        con.close()


def test_public_tables_in_postgres(pg_server, from_files, tmp_path):
    """airports (which the flights domain takes its dest labels from), carriers and holidays
    live in PostgreSQL; no data_version is needed (a public table's content names no release)."""
    for name, ddl in DDL.items():
        pg_server.load(f"public_{name}", ddl, from_files.public_tables[name].rows)
    config = _star_copy(tmp_path, {name: f'{{ postgres = "{pg_server.url}", table = "public.public_{name}" }}'
                                   for name in DDL})
    cfg = load_config(config)
    _same_tables(cfg, from_files)
    assert [(c.name, c.type) for c in cfg.public_tables["holidays"].columns] == [
        ("month", "bigint"), ("day", "date"), ("name", "text"), ("announced", "timestamp")]
    _answers_equal_exact(config, from_files, tmp_path)
    # labels_from read from PostgreSQL: the airports' codes, sorted (a table has no row order)
    dest = cfg.tables["flights"].attribute("dest")
    assert list(dest.labels_) == sorted(from_files.tables["flights"].attribute("dest").labels_)
    # the release identity: an update that moves a row to the end of PostgreSQL's heap does
    # not change it, nor does an edit of a dimension that only joins; a new airport does
    before = domain_fingerprint(cfg.tables["flights"])
    pg_server.execute("UPDATE public_airports SET alt = alt WHERE faa = 'EWR'",
                      "UPDATE public_carriers SET name = 'JetBlue' WHERE carrier = 'B6'")
    assert load_config(config).public_tables["carriers"].values("name")[1] == "JetBlue"
    assert domain_fingerprint(load_config(config).tables["flights"]) == before
    pg_server.execute("INSERT INTO public_airports VALUES ('SEA', 'Seattle Tacoma Intl', 'WA', 433)")
    assert domain_fingerprint(load_config(config).tables["flights"]) != before


def test_postgres_public_column_types(pg_server, tmp_path):
    """Types come from PostgreSQL's catalog: numeric(p, s) stays numeric, a timestamp with
    time zone is its UTC timestamp, types DuckDB lacks (jsonb, inet, arrays) are their text."""
    pg_server.execute("DROP TABLE IF EXISTS public_extras",
                      "CREATE TABLE public_extras (id integer, price numeric(10,2), ratio numeric, "
                      "at timestamptz, code char(3), label varchar(8), doc jsonb, tags text[], born date)",
                      "INSERT INTO public_extras VALUES (1, 12.50, 0.25, '2024-03-01 12:00:00+02', 'ab', 'x', "
                      "'{\"a\": 1}', '{p,q}', '2000-02-29'), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    config = _star_copy(tmp_path, {})
    config.write_text(config.read_text() + f'\n[tables.extras]\npublic = true\nsource = {{ postgres = '
                                           f'"{pg_server.url}", table = "public_extras" }}\n')
    cfg = load_config(config)
    extras = cfg.public_tables["extras"]
    types = [("id", "integer"), ("price", "numeric"), ("ratio", "double precision"), ("at", "timestamp"),
             ("code", "text"), ("label", "text"), ("doc", "text"), ("tags", "text"), ("born", "date")]
    assert [(c.name, c.type) for c in extras.columns] == types
    # the wire server's catalog (its shadow DDL, loaded into a scratch database as dpsql serve
    # loads it) lists them with these types, for BI tools to browse
    import psycopg

    from dpsql.public import StarCatalog
    from dpsql.server.shadow import schema_ddl
    pg_server.execute("DROP DATABASE IF EXISTS shadow_check", "CREATE DATABASE shadow_check")
    with psycopg.connect(pg_server.url.replace("/dpsql?", "/shadow_check?"), autocommit=True) as conn:
        for statement in schema_ddl(StarCatalog(cfg.tables, cfg.public_tables, cfg.references)):
            conn.execute(statement)
        listed = conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                              "'extras' ORDER BY ordinal_position").fetchall()
        viewed = conn.execute("SELECT column_name, data_type FROM dpsql_columns WHERE table_name = 'extras' "
                              "ORDER BY ordinal_position").fetchall()
    assert listed == [(n, "timestamp without time zone" if t == "timestamp" else t) for n, t in types]
    assert viewed == types
    import decimal
    assert extras.rows[0] == (1, decimal.Decimal("12.50"), 0.25, dt.datetime(2024, 3, 1, 10, 0), "ab ", "x",
                              '{"a": 1}', "{p,q}", dt.date(2000, 2, 29))
    assert extras.rows[1] == (2,) + (None,) * 8


def test_public_tables_in_spark(spark, from_files, tmp_path):
    """holidays is a Spark table, carriers and airports Parquet files read by Spark."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")     # the TIMESTAMP literals below
    for name, ddl in DDL.items():
        values = ", ".join("(" + ", ".join(_spark_literal(v) for v in row) + ")"
                           for row in from_files.public_tables[name].rows)
        cols = ", ".join(c.split()[0] for c in ddl.split(", "))
        casts = ", ".join(f"CAST({c.split()[0]} AS {c.split()[1].replace('text', 'string')}) AS {c.split()[0]}"
                          for c in ddl.split(", "))
        frame = spark.sql(f"SELECT {casts} FROM VALUES {values} AS t({cols})")
        frame.write.mode("overwrite").parquet(str(tmp_path / f"{name}.parquet"))
    spark.sql("DROP TABLE IF EXISTS public_holidays")
    spark.sql(f"CREATE TABLE public_holidays USING parquet LOCATION '{tmp_path / 'holidays.parquet'}'")
    config = _star_copy(tmp_path, {
        "holidays": '{ spark = "local[2]", table = "public_holidays" }',
        "carriers": f'{{ spark = "local[2]", parquet = "{tmp_path / "carriers.parquet"}" }}',
        "airports": f'{{ spark = "local[2]", parquet = "{tmp_path / "airports.parquet"}" }}'})
    cfg = load_config(config)
    _same_tables(cfg, from_files)
    dest = cfg.tables["flights"].attribute("dest")
    assert list(dest.labels_) == sorted(from_files.tables["flights"].attribute("dest").labels_)
    assert spark.sql("SELECT 1").collect()[0][0] == 1      # the shared session still runs
    _answers_equal_exact(config, from_files, tmp_path)


def _spark_literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP'{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE'{v.isoformat()}'"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(v)


def test_engine_types_map_to_duckdb_types():
    """The column types each engine's catalog gives, as the DuckDB types the public database
    holds them in (no engine needed: the mapping reads type names only)."""
    from dpsql.errors import ConfigError
    from dpsql.measure import postgres, spark
    assert spark.public_column("d", "date") == ("DATE", "`d`")
    assert spark.public_column("t", "timestamp") == ("TIMESTAMP", "CAST(`t` AS STRING) AS `t`")
    assert spark.public_column("n", "timestamp_ntz") == ("TIMESTAMP", "`n`")
    assert spark.public_column("p", "decimal(10,2)") == ("DECIMAL(10,2)", "`p`")
    assert spark.public_column("a`b", "array<int>") == ("VARCHAR", "CAST(`a``b` AS STRING) AS `a``b`")
    assert spark._timestamp("t", "2023-06-01 09:00:00.25") == dt.datetime(2023, 6, 1, 9, 0, 0, 250000)
    with pytest.raises(ConfigError, match="outside years"):
        spark._timestamp("t", "+12345-01-01 00:00:00")
    assert postgres.public_column("at", "timestamp(3) with time zone") == ("TIMESTAMP", "(\"at\" AT TIME ZONE 'UTC')")
    assert postgres.public_column("c", "character varying(20)") == ("VARCHAR", '"c"')
    assert postgres.public_column("big", "numeric(60,2)") == ("DOUBLE", 'CAST("big" AS double precision)')
    assert postgres.public_column("ip", "inet") == ("VARCHAR", 'CAST("ip" AS text)')
