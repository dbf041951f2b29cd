"""Sources of issue 19: strict configuration of postgres and spark sources, Parquet globs and
hive-partitioned directories, types checked from the catalog before any charge, and release
identity (a changed table or file set makes earlier releases stale)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.domain import Categorical, IntegerRange, Numeric, TableSchema
from dpsql.engine.config import load_config
from dpsql.errors import ConfigError, OperationalError
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.postgres import PostgresBackend
from dpsql.measure.router import open_backend
from dpsql.measure.source import Source

PG = "postgresql://dpsql@db.example:5432/hr"


# --- strict configuration --------------------------------------------------------------------

@pytest.mark.parametrize("spec, match", [
    ({"postgres": "postgresql://u:pw@db/hr", "table": "t", "data_version": 1}, "holds a password"),
    ({"postgres": PG + "?password=pw", "table": "t", "data_version": 1}, "holds a password"),
    ({"postgres": PG, "table": "t"}, "needs data_version or version_query"),
    ({"postgres": PG, "data_version": 1}, "needs table"),
    ({"postgres": "mysql://db/hr", "table": "t", "data_version": 1}, "postgresql:// URL"),
    ({"postgres": PG, "table": "t", "data_version": 1, "tabel": "x"}, "unknown key 'tabel'.*'table'"),
    ({"postgres": PG, "table": "t", "data_version": 1, "statement_timeout": 0}, "statement_timeout"),
    ({"postgres": PG, "table": "t", "version_query": "DELETE FROM t"}, "must be a SELECT"),
    ({"postgres": PG, "table": "t", "data_version": 1, "password": "x"}, "unknown key 'password'"),
    ({"spark": "local[2]"}, "either table"),
    ({"spark": "local[2]", "table": "t", "parquet": "x"}, "either table"),
    ({"spark": "local[2]", "csv": "x.csv"}, "not csv"),
    ({"spark": "http://x", "table": "t"}, "master URL"),
    ({"spark": "local[2]", "table": "t", "conf": {"a": [1]}}, "table of Spark settings"),
    ({"spark": "local[2]", "table": "t", "statement_timeout": 5}, "unknown key 'statement_timeout'"),
    ({"parquet": "x.parquet", "hive_partitioning": "yes"}, "true or false"),
    ({"csv": "x.csv", "hive_partitioning": True}, "unknown key 'hive_partitioning'"),
    ({"postgres": PG, "csv": "x.csv"}, "exactly one of csv, parquet, duckdb, postgres, spark"),
])
def test_source_config_errors(tmp_path, spec, match):
    with pytest.raises(ConfigError, match=match):
        Source.from_config(spec, tmp_path)


def documented_sources() -> list[dict]:
    """Every ``source = {…}`` line and ``[tables.*.source]`` block of docs/config.md, except
    those of public tables (``public = true`` in the same block: a public source needs no
    ``data_version``, tests/measure/test_public_engines.py loads them)."""
    import re
    import tomllib
    text = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    out = []
    for block in re.findall(r"```toml\n(.*?)```", text, re.S):
        if block.lstrip().startswith("[tables.") and ".source]" in block.split("\n", 1)[0]:
            doc = tomllib.loads(block)
            out.extend(t["source"] for t in doc["tables"].values())
            continue
        if "public = true" in block:
            doc = tomllib.loads(block)
            out.extend(t["source"] for t in doc["tables"].values() if "source" in t and not t.get("public"))
            continue
        for line in block.splitlines():
            if line.startswith("source = "):
                out.append(tomllib.loads(line)["source"])
    return out


def test_every_documented_source_example_loads(tmp_path):
    """The examples of docs/config.md load as a [tables.*] source in dpsql.toml, and every
    kind of source has one."""
    domain = tmp_path / "d.toml"
    domain.write_text('[tables.t.columns.age]\ntype = "integer"\nlo = 0\nhi = 9\n')
    examples = documented_sources()
    kinds = set()
    for spec in examples:
        cfg = load_config({"budget": {"rho": 1}, "ledger": str(tmp_path / "l"),
                           "tables": {"t": {"domain": str(domain), "source": spec}}})
        kinds.add(cfg.sources["t"].kind)
        if "parquet" in spec and "spark" not in spec and "*" in spec["parquet"]:
            assert cfg.sources["t"].is_glob
    assert kinds == {"csv", "parquet", "duckdb", "postgres", "spark"}
    assert any("hive_partitioning" in s and "spark" not in s for s in examples)
    assert any("version_query" in s for s in examples) and any("passfile" in s for s in examples)
    assert {s["spark"].split(":")[0] for s in examples if "spark" in s} >= {"local[2]", "spark", "sc"}
    s3 = Source.from_config({"spark": "spark://m:7077", "parquet": "s3a://lake/people/",
                             "hive_partitioning": True, "conf": {"spark.executor.memory": "8g"}}, tmp_path)
    assert s3.location == "s3a://lake/people/" and s3.hive_partitioning
    assert Source.from_config({"parquet": "lake/people/*.parquet"}, tmp_path).path == tmp_path / "lake/people/*.parquet"


def test_spark_conf_may_not_switch_off_totality(tmp_path):
    pytest.importorskip("pyspark")
    from dpsql.measure.spark import SparkBackend
    source = Source.from_config({"spark": "local[2]", "table": "t", "conf": {"spark.sql.ansi.enabled": True}}, tmp_path)
    with pytest.raises(ConfigError, match="may not set spark.sql.ansi.enabled"):
        SparkBackend({"t": source})


def test_credentials_never_reach_identity_or_ledger(tmp_path):
    s = Source.from_config({"postgres": PG, "table": "t", "data_version": 1, "passfile": "pw"}, tmp_path)
    assert "passfile" not in str(s.describe()) and s.describe()["url"] == PG


# --- Parquet globs and hive-partitioned directories --------------------------------------------

LAKE_SCHEMA = TableSchema("lake", (
    Categorical("year", ["2020", "2021"], nullable=True),
    IntegerRange("age", 0, 99, bin_width=10, nullable=True),
    Categorical("sex", ["F", "M"], nullable=True),
))


def _write_lake(root: Path, age_type: str = "BIGINT"):
    con = duckdb.connect()
    (root / "year=2020").mkdir(parents=True)
    (root / "year=2021" / "_temporary").mkdir(parents=True)
    con.execute(f"COPY (SELECT * FROM (VALUES (30, 'F'), (41, 'M'), (NULL, 'M')) t(age, sex)) "
                f"TO '{root / 'year=2020' / 'part-0.parquet'}' (FORMAT parquet)")
    # another file's schema: no sex column, age as BIGINT (read by name, missing = NULL;
    # DuckDB widens INTEGER and BIGINT to one type, Spark refuses to merge them)
    con.execute(f"COPY (SELECT CAST(55 AS {age_type}) AS age UNION ALL SELECT 7) "
                f"TO '{root / 'year=2021' / 'part-0.parquet'}' (FORMAT parquet)")
    # skipped like Spark skips them: hidden and underscore names
    for junk in (root / "year=2021" / "_temporary" / "part-9.parquet", root / "year=2020" / ".part-1.parquet"):
        con.execute(f"COPY (SELECT 99 AS age, 'F' AS sex) TO '{junk}' (FORMAT parquet)")
    (root / "_SUCCESS").write_text("")
    return {("year",): [3, 2, 0, 0], ("age",): [1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1], ("sex",): [1, 2, 0, 2]}


CLIQUES = [("year",), ("age",), ("sex",)]


@pytest.mark.parametrize("form", ["directory", "glob"])
def test_hive_partitioned_parquet(tmp_path, form):
    expected = _write_lake(tmp_path / "lake")
    spec = {"parquet": "lake" if form == "directory" else "lake/*/*.parquet", "hive_partitioning": True}
    backend = DuckDBBackend({"lake": Source.from_config(spec, tmp_path)})
    got = backend.count_marginals(LAKE_SCHEMA, CLIQUES)
    assert {c: got[c].tolist() for c in CLIQUES} == expected
    cols = backend.source_columns("lake")
    assert cols["year"] == "VARCHAR"   # partition values are text, never typed from the names
    backend.close()


def test_without_hive_partitioning_the_partition_is_not_a_column(tmp_path):
    _write_lake(tmp_path / "lake")
    backend = DuckDBBackend({"lake": Source.from_config({"parquet": "lake"}, tmp_path)})
    with pytest.raises(ConfigError, match="no column 'year'"):
        backend.count_marginals(LAKE_SCHEMA, CLIQUES)
    schema = TableSchema("lake", LAKE_SCHEMA.attributes[1:])
    assert int(backend.count_marginals(schema, [()])[()]) == 5
    backend.close()


@pytest.mark.slow
def test_spark_reads_the_same_lake(tmp_path, spark):
    expected = _write_lake(tmp_path / "lake", age_type="INTEGER")
    from dpsql.measure.spark import SparkBackend
    backend = SparkBackend({"lake": Source.from_config({"spark": "local[2]", "parquet": "lake",
                                                         "hive_partitioning": True}, tmp_path)})
    got = backend.count_marginals(LAKE_SCHEMA, CLIQUES)
    assert {c: got[c].tolist() for c in CLIQUES} == expected
    before = backend.fingerprint("lake")
    assert before["files"] == 2
    time.sleep(0.01)
    os.utime(tmp_path / "lake" / "year=2020" / "part-0.parquet")
    assert backend.fingerprint("lake") != before
    backend.close()


def test_glob_fingerprint_is_the_file_listing(tmp_path):
    _write_lake(tmp_path / "lake")
    source = Source.from_config({"parquet": "lake", "hive_partitioning": True}, tmp_path)
    a = source.fingerprint()
    assert a["files"] == 2 and set(a) == {"files", "listing"}
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 1 AS age) TO '{tmp_path / 'lake' / 'year=2021' / 'part-1.parquet'}' (FORMAT parquet)")
    b = source.fingerprint()
    assert b["files"] == 3 and b != a
    with pytest.raises(ConfigError, match="matches no files"):
        Source.from_config({"parquet": "nothing/*.parquet"}, tmp_path).fingerprint()


def test_a_changed_file_set_is_never_counted_for_an_older_identity(tmp_path):
    _write_lake(tmp_path / "lake")
    source = Source.from_config({"parquet": "lake", "hive_partitioning": True}, tmp_path)
    backend = DuckDBBackend({"lake": source})
    old = backend.fingerprint("lake")
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 1 AS age) TO '{tmp_path / 'lake' / 'year=2021' / 'part-1.parquet'}' (FORMAT parquet)")
    with pytest.raises(OperationalError, match="changed since"):
        backend.count_marginals(LAKE_SCHEMA, CLIQUES, expect=old)
    assert int(backend.count_marginals(LAKE_SCHEMA, [()], expect=backend.fingerprint("lake"))[()]) == 6
    backend.close()


# --- PostgreSQL: types from the catalog, release identity ---------------------------------------

def test_postgres_types_checked_from_the_catalog(pg_server, tmp_path):
    pg_server.execute("DROP TABLE IF EXISTS typed",
                      "CREATE TABLE typed (code char(3), ratio double precision, born date, pid double precision, "
                      "uid uuid, name varchar(20))",
                      "INSERT INTO typed VALUES ('ab', 0.5, '2000-01-01', 1.5, gen_random_uuid(), 'x')")

    def backend(id_column=None):
        unit = {"id": id_column, "max_rows": 1} if id_column else None
        return PostgresBackend({"typed": Source.from_config({"postgres": pg_server.url, "table": "typed",
                                                             "data_version": 1}, tmp_path).with_unit(unit, tmp_path)})
    cases = [(Categorical("code", ["ab"]), "type character\\(3\\)"),
             (Categorical("born", ["x"]), "type date"),
             (Categorical("ratio", ["x"]), "type double precision")]
    for att, match in cases:
        with pytest.raises(ConfigError, match=match):
            backend().count_marginals(TableSchema("typed", (att,)), [(att.name,)])
    with pytest.raises(ConfigError, match="no column 'nmae'.*"):
        backend().count_marginals(TableSchema("typed", (Categorical("nmae", ["x"]),)), [("nmae",)])
    ok = TableSchema("typed", (Categorical("name", ["x"]), Numeric("ratio", [0, 1])))
    with pytest.raises(ConfigError, match="id column 'pid' has type double precision"):
        backend(id_column="pid").count_marginals(ok, [("name",)])
    assert int(backend(id_column="uid").count_marginals(ok, [("name",)])[("name",)][0]) == 1
    with pytest.raises(ConfigError, match="no table 'nope'"):
        source = Source.from_config({"postgres": pg_server.url, "table": "nope", "data_version": 1}, tmp_path)
        PostgresBackend({"n": source}).count_marginals(TableSchema("n", (ok.attributes[0],)), [()])


def test_postgres_version_query_makes_releases_stale(pg_server, tmp_path):
    pg_server.execute("DROP TABLE IF EXISTS people",
                      "CREATE TABLE people (pid bigint, age integer, sex text, updated_at timestamptz)",
                      "INSERT INTO people SELECT g, 20 + g % 50, CASE WHEN g % 2 = 0 THEN 'F' ELSE 'M' END, "
                      "'2024-01-01' FROM generate_series(1, 500) g")
    domain = tmp_path / "people.toml"
    domain.write_text('[tables.people.columns.age]\ntype = "integer"\nlo = 0\nhi = 99\nbin_width = 10\n'
                      '[tables.people.columns.sex]\ntype = "categorical"\nlabels = ["F", "M"]\n')
    config = {"budget": {"epsilon": 100, "delta": 1e-6}, "ledger": str(tmp_path / "p.ledger"),
              "cache_dir": str(tmp_path / "c"),
              "tables": {"people": {"domain": str(domain), "privacy_unit": {"id": "pid", "max_rows": 1},
                                    "source": {"postgres": pg_server.url, "table": "people",
                                               "version_query": "SELECT max(updated_at), count(*) FROM people"}}},
              "workload": {"queries": ["SELECT sex, COUNT(*) FROM people GROUP BY sex"], "epsilon": 1}}
    con = dpsql.connect(config, user="op")
    try:
        con.session.measure()
        spent = con.session.budget()["total_spent_rho"]
        assert spent > 0
        assert con.session.measure_cost() == 0                        # same content: reused
        con.session.measure()
        assert con.session.budget()["total_spent_rho"] == spent
        pg_server.execute("UPDATE people SET updated_at = '2024-02-01' WHERE pid = 1")
        engine = con.session.engine
        stale = [r for r in engine.releases() if not r.current]
        assert len(stale) == 1 and "the source data or how it is read changed" in stale[0].reasons
        con.session.measure()
        assert con.session.budget()["total_spent_rho"] > spent         # new content: new budget
    finally:
        con.close()
        dpsql.dbapi._engines.clear()


def test_postgres_data_check(pg_server, tmp_path):
    pg_server.execute("DROP TABLE IF EXISTS checked",
                      "CREATE TABLE checked (pid int, age text, sex text)",
                      "INSERT INTO checked VALUES (1, '30', 'F'), (1, 'abc', 'X'), (2, NULL, 'M'), (NULL, '200', 'F')")
    schema = TableSchema("checked", (IntegerRange("age", 0, 99, nullable=True),
                                     Categorical("sex", ["F", "M"], closed=True)))
    backend = open_backend({"checked": Source.from_config({"postgres": pg_server.url, "table": "checked",
                                                           "data_version": 1}, tmp_path)
                            .with_unit({"id": "pid", "max_rows": 1}, tmp_path)})
    report = backend.data_check(schema)
    backend.close()
    cols = {c.name: c for c in report.columns}
    assert report.records == 4 and report.dropped == 2 and not report.ok
    assert cols["age"].problems == {"unreadable": 1, "above_range": 1}
    assert cols["sex"].examples["not_a_label"] == [("X", 1)]


def test_typed_parquet_data_check(tmp_path):
    con = duckdb.connect()
    path = tmp_path / "t.parquet"
    con.execute(f"COPY (SELECT * FROM (VALUES (1.5, 'F'), ('NaN'::DOUBLE, 'M'), (NULL, 'Q')) t(x, sex)) "
                f"TO '{path}' (FORMAT parquet)")
    schema = TableSchema("t", (Numeric("x", [0, 1, 2]), Categorical("sex", ["F", "M"])))
    backend = DuckDBBackend({"t": Source("parquet", path)})
    report = backend.data_check(schema)
    backend.close()
    cols = {c.name: c for c in report.columns}
    assert report.records == 3
    assert cols["x"].problems == {"unreadable": 1, "null_not_nullable": 1}
    assert cols["sex"].counts == {"value": 2, "other": 1}
    assert math.isnan(float(cols["x"].examples["unreadable"][0][0]))
